"""Who is asking, provably: request signatures (Web Bot Auth, RFC 9421), the
key directory that publishes the bot's keys, and the signed attestation.
The identity constants the contract fixes are in
:mod:`scrapy_walsh_research.core.contract`."""
