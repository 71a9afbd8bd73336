"""The bundled sandbox scenario: virtual hosts that exercise every gate.

Used by ``scrapy walsh-demo`` (the README's main job) and by its test; it
needs no network: every ``*.test`` host is the loopback origin.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from scrapy_walsh_research.sandbox.origin import Origin, Reply, SandboxServer

OPERATOR = "operator.test"
BLOCKLIST_PATH = "/.well-known/walsh-research/blocklist.json"
SCHEMA_PATH = "/.well-known/walsh-research/blocklist.schema.json"

BLOCKLIST = {
    "contract": "walsh-research-blocklist/v1",
    "updated": "2026-05-23T00:00:00Z",
    "operator": "Sandbox Operator",
    "contact": "ops@example.org",
    "policy": "https://wal.sh/bot/",
    "refresh": "PT6H",
    "blocked": [{"domain": "blocked.test", "added": "2026-05-23", "reason": "email opt-out"}],
}


@dataclass(frozen=True)
class Expectation:
    path: str
    host: str
    outcome: str
    rule: str | None
    why: str
    #: whether the origin must receive this path (a redirect's source is fetched)
    requested: bool | None = None

    @property
    def must_reach_origin(self) -> bool:
        return self.outcome == "fetched" if self.requested is None else self.requested


#: (host, path) of every list line, and what the contract says must happen.
EXPECTED = [
    Expectation("/page", "named.test", "fetched", None, "named group allows us where * disallows"),
    Expectation("/private", "named.test", "denied", "R2", "named group disallows /private"),
    Expectation(
        "/page", "star.test", "fetched", None, "'User-agent: Walsh' does not claim Walsh-Research"
    ),
    Expectation("/nope", "star.test", "denied", "R2", "* group applies when no group names us"),
    Expectation("/page", "blocked.test", "denied", "R3", "apex on the operator blocklist"),
    Expectation("/page", "www.blocked.test", "denied", "R3", "subdomain of a blocklist entry"),
    Expectation("/page", "xblocked.test", "fetched", None, "not a subdomain: no suffix match"),
    Expectation("/page", "down.test", "denied", "R2", "robots.txt 503: host disallowed"),
    Expectation("/page", "norobots.test", "fetched", None, "robots.txt 404: no rules"),
    Expectation("/go", "hop.test", "denied", "R3", "redirect into a blocked host", requested=True),
]
#: Target hosts that must receive no request at all.
UNTOUCHED_HOSTS = ("blocked.test", "www.blocked.test")
BAD_LINES = ["not-a-url", "ftp://named.test/file"]


def schema_text() -> str:
    return (
        resources.files("scrapy_walsh_research")
        .joinpath("schemas/blocklist.schema.json")
        .read_text()
    )


def build(origin: Origin, url: Any) -> None:
    """Install the scenario's routes; *url(host, path)* makes absolute URLs."""
    allow = Reply(200, "User-agent: *\nAllow: /\n", {"Content-Type": "text/plain"})
    page = Reply(200, "<html><body>a page</body></html>", {"Content-Type": "text/html"})
    origin.route(
        OPERATOR,
        BLOCKLIST_PATH,
        Reply(200, json.dumps(BLOCKLIST), {"Content-Type": "application/json"}),
    )
    origin.route(
        OPERATOR, SCHEMA_PATH, Reply(200, schema_text(), {"Content-Type": "application/json"})
    )
    origin.route(
        "named.test",
        "/robots.txt",
        Reply(
            200,
            "User-agent: *\nDisallow: /\n\n"
            "User-agent: Walsh-Research\nAllow: /\nDisallow: /private\n",
        ),
    )
    origin.route(
        "star.test",
        "/robots.txt",
        Reply(200, "User-agent: Walsh\nDisallow: /\n\nUser-agent: *\nDisallow: /nope\n"),
    )
    origin.route("down.test", "/robots.txt", Reply(503, "maintenance"))
    origin.route("hop.test", "/robots.txt", allow)
    origin.route("hop.test", "/go", Reply(302, "", {"Location": url("blocked.test", "/landing")}))
    for host in ("blocked.test", "www.blocked.test", "xblocked.test"):
        origin.route(host, "/robots.txt", allow)
    for e in EXPECTED:
        if e.path != "/go":
            origin.route(e.host, e.path, page)


def list_lines(server: SandboxServer) -> list[str]:
    lines = ["# Walsh-Research sandbox targets", ""]
    lines += [server.url(e.host, e.path) for e in EXPECTED]
    lines += BAD_LINES
    lines.append(server.url("named.test", "/page#again"))  # duplicate by canonical URL
    return lines


def sandbox_settings(server: SandboxServer) -> dict[str, Any]:
    return {
        "WALSH_BLOCKLIST_URL": server.url(OPERATOR, BLOCKLIST_PATH),
        "WALSH_BLOCKLIST_SCHEMA_URL": server.url(OPERATOR, SCHEMA_PATH),
        "WALSH_BLOCKLIST_ALLOW_HTTP": True,
    }
