"""R3: the operator blocklist, consulted before anything else.

The list is fetched from ``WALSH_BLOCKLIST_URL`` over https (every redirect
hop too, and no hop into a blocked host), validated against the published
schema with formats checked (the bundled copy is the contract; a fetched
schema can only add constraints), and adopted only when the whole document
is good, ``refresh`` included (clamped to a logged range). Any failure keeps
the last adopted list, also across restarts (it is persisted in the state
store and validated again when restored): an outage must never un-block an
opt-out.

- :mod:`.middleware`: the gate, :class:`BlocklistMiddleware` (exported here
  and, as users write it in settings, from the package root:
  ``scrapy_walsh_research.BlocklistMiddleware``).

The list in force, its build, its refresh and its schemas are
:mod:`scrapy_walsh_research.documents.blocklist`.

What needs no Scrapy is the pure core's :mod:`scrapy_walsh_research.core.blocklist`:
the document (JSON, the contract, ``refresh``), the entries and the domain
set, the index file, the child process, and the bundled schema.
"""

from scrapy_walsh_research.gates.blocklist.middleware import BlocklistMiddleware

__all__ = ["BlocklistMiddleware"]
