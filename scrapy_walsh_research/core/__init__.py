"""The pure core: what the contract's rules mean, with no Scrapy in it.

The robots.txt policy (RFC 9309 group selection), URL canonicalisation,
Retry-After, the usage-preference vocabularies and the blocklist's domain
index are plain functions over bytes and strings. Nothing here imports
Scrapy or Twisted (an import-linter contract checks it), so each rule can be
read, typed strictly and tested on its own.
"""
