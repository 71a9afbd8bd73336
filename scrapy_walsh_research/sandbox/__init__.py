"""The loopback sandbox the conformance check crawls: an origin with
virtual hosts that logs what it receives, a resolver that sends ``*.test``
to it, and a verifier of the requests' signatures. (The tests use it too;
what only they use is in ``tests/support/``.)"""

from scrapy_walsh_research.sandbox.origin import (
    Hit,
    Origin,
    Reply,
    SandboxResolver,
    SandboxServer,
    install_sandbox_resolver,
)

__all__ = [
    "Hit",
    "Origin",
    "Reply",
    "SandboxResolver",
    "SandboxServer",
    "install_sandbox_resolver",
]
