"""What travels with a request through the chain: its meta keys
(:mod:`.meta`, every one the bundle sets) and the bundle's signed marks on
its own requests and on declared targets, with the fetches it makes for
itself (:mod:`.marks`); and what the components ask of each other, declared
once with one owner per crawler (:mod:`.context`)."""
