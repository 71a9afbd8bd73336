"""What a project sets, and what the bundle makes of it: every ``WALSH_``
setting's default (:mod:`.defaults`), the readers of the settings several
components read (:mod:`.options`), the adaptive policy and its floors
(:mod:`.adaptive`), the request signer (:mod:`.signing`), every check of a
``WALSH_`` value (:mod:`.values`), the typed settings that run them as they
are read (:mod:`.walsh`), and the start-up check that refuses a
configuration breaking the contract before any request (:mod:`.check`)."""
