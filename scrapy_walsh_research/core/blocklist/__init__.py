"""The operator blocklist (R3) with no Scrapy in it: the document read and
checked against the contract (:mod:`.document`), its entries and the domain
set they make (:mod:`.entries`), the index file a large list is mapped from
(:mod:`.index`), the child process that builds it (:mod:`.child`), and the
published schema, bundled verbatim as the contract (:mod:`.schema`).

The gate that fetches, adopts and applies a list is
:mod:`scrapy_walsh_research.gates.blocklist`.
"""
