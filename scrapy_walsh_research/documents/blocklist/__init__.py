"""The operator's blocklist (R3) as the gate reads it: the list in force,
how a version is built, when it is fetched again, and its schemas.

- :mod:`.refresh`: when the list is fetched again, and by which worker of a fleet;
- :mod:`.store`: the list in force, adopted in one step, persisted, restored,
  and the purge of what was stored about the hosts it opts out;
- :mod:`.build`: one version built from a document, inline, in a thread or
  in a child process;
- :mod:`.schema`: the bundled schema (the contract) and the published one.

The gate is :mod:`scrapy_walsh_research.gates.blocklist`; what needs no
Scrapy is the pure core's :mod:`scrapy_walsh_research.core.blocklist`.
"""
