"""What the gates read before a target: the policy documents' keeping.

Not gates themselves (those are in :mod:`scrapy_walsh_research.gates`), but
what the document gates (R3, R2, PREF) share about the documents they read:

- :mod:`.waits`: an unknown document is a wait; how long its targets wait
  (:class:`~.waits.DocumentWaits`, one per crawler);
- :mod:`.names`: a host name the resolver says does not exist is an answer,
  not an outage;
- :mod:`.blocklist`: the operator's blocklist kept in force, built, fetched
  again, and its schemas (the R3 gate is
  :mod:`scrapy_walsh_research.gates.blocklist`).
"""
