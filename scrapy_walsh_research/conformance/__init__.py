"""The conformance check: the bundle crawls its own loopback sandbox and
judges what the origin saw against each rule of the contract.

* :mod:`.scenario`: the sandbox's virtual hosts and what each answers;
* :mod:`.probe`: the crawls (the project's spider and settings, pointed at it);
* :mod:`.identity`: the key a signing project's crawls sign with;
* :mod:`.stored`: the audit log and state a crawl left, read back;
* :mod:`.checks`: the judges, one module per rule or rule group;
* :mod:`scrapy_walsh_research.evidence.verdicts`: the result it fills in
  (``ConformanceResult``), which the attestation reads;
* :mod:`.run`: :func:`~.run.run_conformance`, which ties them together.
"""
