"""The gates: the downloader middlewares every request crosses before it
reaches the network, one per module, in the spec's order (§5), as Scrapy's
own ``downloadermiddlewares/`` are::

    scope (R6, 55) -> cadence (R8, 60) -> blocklist (R3, 80)
      -> robots (R2, 100) -> preferences (PREF, 110)
      -> validators (R7, 520) -> negotiation (R9, 530) -> retry (R5, 550)
      -> pacing (R4, 950) -> useragent (R1, 1000)

with the base of the two gates that read an origin's documents
(:mod:`.origin_documents`) and what their targets do while one is unknown
(:mod:`.waits`). A gate that refuses raises
:class:`~scrapy_walsh_research.errors.WalshDenied` through
:func:`~scrapy_walsh_research.errors.deny`. Users name the gates by the paths
the package root exports (``scrapy_walsh_research.RobotsTxtMiddleware``).
"""
