"""What only the tests use, outside the wheel: the crawl helpers the test
modules share (:mod:`.crawling`, :mod:`.processes`, :mod:`.fleet`), a real
``redis-server`` (:mod:`.redis_server`, with ``stepclock.c`` to step its
clock) and a recording forward proxy (:mod:`.proxy`). The loopback origin
itself is the package's (:mod:`scrapy_walsh_research.sandbox`): the
conformance check crawls it.
"""
