"""Usage preferences with no Scrapy in them: the purposes, the statement
model and the decision (:mod:`.model`), TDMRep's ``tdmrep.json`` and headers
(:mod:`.tdmrep`), and the statements in robots.txt lines and response
headers (Content Signals, Content-Usage, X-Robots-Tag: :mod:`.statements`).

The gate that fetches and applies them is
:mod:`scrapy_walsh_research.gates.preferences`.
"""
