"""The gates: the downloader middlewares every request crosses before it
reaches the network, one per module, in the spec's order (§5), as Scrapy's
own ``downloadermiddlewares/`` are::

    R6 scope (55) -> R8 cadence (60) -> R3 operator blocklist (80)
      -> R2 robots.txt (100) -> PREF usage preferences (110)
      -> R7 sitemaps (510) -> R7 validators (520) -> R9 negotiation (530)
      -> R5 retry (550) -> R4 pacing (950) -> R1 exact User-Agent (1000)

with the base of the two gates that read an origin's documents
(:mod:`.origin_documents`); what the document gates share (what their
targets do while a document is unknown, the operator's blocklist kept in
force) is :mod:`scrapy_walsh_research.documents`. A gate that refuses raises
:class:`~scrapy_walsh_research.errors.WalshDenied` through
:func:`~scrapy_walsh_research.errors.deny`. Users name the gates by the paths
the package root exports (``scrapy_walsh_research.RobotsTxtMiddleware``).
"""
