"""Loopback sandbox used by the tests and the conformance check."""

from scrapy_walsh_research.sandbox.origin import (
    Hit,
    Origin,
    RecordingProxy,
    Reply,
    SandboxResolver,
    SandboxServer,
    install_sandbox_resolver,
)

__all__ = [
    "Hit",
    "Origin",
    "RecordingProxy",
    "Reply",
    "SandboxResolver",
    "SandboxServer",
    "install_sandbox_resolver",
]
