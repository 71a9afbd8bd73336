"""What the contract fixes about the Walsh-Research bot (spec §4.1, §10).

These are the values every component and every attestation refers to; they
are not settings, because the contract fixes them.
"""

from __future__ import annotations

USER_AGENT = "Mozilla/5.0 (compatible; Walsh-Research/1.0; +https://wal.sh/bot/)"
#: Product token matched against robots.txt ``User-agent`` lines (R2).
PRODUCT_TOKEN = "Walsh-Research"
SPEC_VERSION = "walsh-research-compliance/v1"
BLOCKLIST_CONTRACT = "walsh-research-blocklist/v1"
BLOCKLIST_URL = "https://wal.sh/.well-known/walsh-research/blocklist.json"
BLOCKLIST_SCHEMA_URL = "https://wal.sh/.well-known/walsh-research/blocklist.schema.json"
