"""What travels with a request through the chain: its meta keys
(:mod:`.meta`, every one the bundle sets) and the bundle's signed marks on
its own requests and on declared targets, with the fetches it makes for
itself (:mod:`.marks`)."""
