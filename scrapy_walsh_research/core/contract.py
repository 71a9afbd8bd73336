"""What the contract fixes about the Walsh-Research bot (spec §4.1, §10),
and the signed identity it publishes.

The first are the values every component and every attestation refers to;
they are not settings, because the contract fixes them. The last three are
the bot's published Web Bot Auth identity: the key directory every signed
request's ``Signature-Agent`` names, the form it names it in, and how long a
signature lives. Settings can point them elsewhere (``WALSH_SIGNATURE_*``,
whose defaults these are); a ``Signer`` made without them uses them.
"""

from __future__ import annotations

USER_AGENT = "Mozilla/5.0 (compatible; Walsh-Research/1.0; +https://wal.sh/bot/)"
#: the bot's public policy page, which its User-Agent names
POLICY_URL = "https://wal.sh/bot/"
#: Product token matched against robots.txt ``User-agent`` lines (R2).
PRODUCT_TOKEN = "Walsh-Research"
SPEC_VERSION = "walsh-research-compliance/v1"
BLOCKLIST_CONTRACT = "walsh-research-blocklist/v1"
BLOCKLIST_URL = "https://wal.sh/.well-known/walsh-research/blocklist.json"
BLOCKLIST_SCHEMA_URL = "https://wal.sh/.well-known/walsh-research/blocklist.schema.json"

#: where the bot publishes its request-signing keys (Web Bot Auth key directory)
SIGNATURE_AGENT = "https://wal.sh/.well-known/http-message-signatures-directory"
#: ``Signature-Agent: sig1="<the directory>"`` (draft-ietf-webbotauth-httpsig-protocol)
SIGNATURE_AGENT_FORM = "dictionary"
#: seconds from ``created`` to ``expires``: long enough to outlive a TLS
#: handshake, short enough to limit replay
SIGNATURE_TTL = 60
