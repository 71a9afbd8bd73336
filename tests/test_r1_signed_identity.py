"""Signed identity (Web Bot Auth, RFC 9421): every request signed at the moment
it goes onto its connection, verified at the origin by a verifier that shares
no code with the signer; the published test vectors reproduced byte for byte;
keys that would make the signature worthless refused at start-up."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.identity.signing import (
    Signer,
    _b64url_decode,
    generate_key,
    load_key,
    public_jwk,
    sign_directory,
)
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.sandbox.verify import Verifier, parse_dictionary
from scrapy_walsh_research.settings.check import check_settings
from tests.support.crawling import BLOCKLIST_HOST, base_settings, crawl

VECTORS = json.loads((Path(__file__).parent / "data" / "webbotauth_vectors.json").read_text())
TEST_KEY = Ed25519PrivateKey.from_private_bytes(_b64url_decode(VECTORS["key"]["d"]))


# -- the published test vectors -----------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["requests"], ids=lambda v: v["name"])
def test_the_drafts_request_vectors_are_reproduced_byte_for_byte(vector):
    dictionary = vector["signature_agent_key"] is not None
    signer = Signer(
        TEST_KEY,
        agent="https://signature-agent.test",
        form="origin" if dictionary else "string",
        ttl=vector["expires"] - vector["created"],
        label=vector["label"],
        agent_key=vector["signature_agent_key"],
    )
    headers: dict[str, str] = {}
    signer.sign_request(
        "GET", vector["target_url"], headers, created=vector["created"], nonce=vector["nonce"]
    )
    assert signer.keyid == VECTORS["key"]["thumbprint"]
    assert headers == {
        "Signature-Agent": vector["signature_agent"],
        "Signature-Input": vector["signature_input"],
        "Signature": vector["signature"],
    }


def test_the_drafts_signed_directory_response_is_reproduced_byte_for_byte():
    d = VECTORS["directory_response"]
    headers = sign_directory(
        TEST_KEY, d["authority"], d["body"].encode(), created=1735689600, expires=4889289600,
        label=d["label"], alg=False,
    )  # fmt: skip
    assert headers == {
        "Content-Digest": d["content_digest"],
        "Signature-Input": d["signature_input"],
        "Signature": d["signature"],
    }


@pytest.mark.parametrize("vector", VECTORS["requests"], ids=lambda v: v["name"])
def test_the_independent_verifier_accepts_the_published_vectors(vector):
    verifier = Verifier({VECTORS["key"]["thumbprint"]: VECTORS["key"]["x"]})
    headers = {
        "signature-agent": vector["signature_agent"],
        "signature-input": vector["signature_input"],
        "signature": vector["signature"],
    }
    at = vector["created"] + 60
    assert verifier.verify("GET", "https", "example.com", "/path/to/resource", headers, at) == (
        "verified"
    )


# -- the verifier can fail ---------------------------------------------------------


def signed(signer: Signer, url: str = "http://site.test:8080/p") -> dict[str, str]:
    out: dict[str, str] = {}
    signer.sign_request("GET", url, out)
    return {k.lower(): v for k, v in out.items()}


@pytest.fixture
def pair() -> tuple[Signer, Verifier]:
    key = Ed25519PrivateKey.generate()
    jwk = public_jwk(key)
    return Signer(key), Verifier({jwk["kid"]: jwk["x"]})


def test_a_signature_verifies_once_for_its_own_authority(pair):
    signer, verifier = pair
    headers = signed(signer)
    assert verifier.verify("GET", "http", "site.test:8080", "/p", headers) == "verified"
    # the same request again (a replay) is refused: its nonce was seen
    assert verifier.verify("GET", "http", "site.test:8080", "/p", headers) == (
        "invalid: nonce repeated"
    )


def test_a_tampered_authority_fails(pair):
    signer, verifier = pair
    got = verifier.verify("GET", "http", "other.test:8080", "/p", signed(signer))
    assert got == "invalid: signature does not verify"


def test_an_expired_signature_fails(pair):
    signer, verifier = pair
    headers = signed(signer)
    later = 10**10  # far beyond any expires
    assert verifier.verify("GET", "http", "site.test:8080", "/p", headers, later) == (
        "invalid: expired"
    )


def test_a_signature_created_in_the_future_fails(pair):
    signer, verifier = pair
    out: dict[str, str] = {}
    import time

    signer.sign_request("GET", "http://site.test:8080/p", out, created=int(time.time()) + 3600)
    headers = {k.lower(): v for k, v in out.items()}
    got = verifier.verify("GET", "http", "site.test:8080", "/p", headers)
    assert got == "invalid: created in the future"


def test_a_signature_not_covering_signature_agent_fails(pair):
    signer, verifier = pair
    signer.covered = ("@authority",)  # a signer that forgot the agent (library path)
    signer._fast = False
    got = verifier.verify("GET", "http", "site.test:8080", "/p", signed(signer))
    assert got == "invalid: signature-agent not covered"


def test_an_unsigned_request_is_reported_as_unsigned(pair):
    _, verifier = pair
    assert verifier.verify("GET", "http", "a.test", "/", {"user-agent": "x"}) == "unsigned"


# -- keys refused at start-up, naming the setting -----------------------------------


def write_key(tmp_path: Path, data: bytes, mode: int = 0o600, name: str = "key") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    path.chmod(mode)
    return path


def pem(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def refused(path: Path | str, match: str) -> None:
    settings = Settings({"ADDONS": {"scrapy_walsh_research.Addon": 0}})
    settings.set("WALSH_SIGNING_KEY", str(path))
    with pytest.raises(WalshConfigurationError, match=match) as info:
        check_settings(settings)
    assert "WALSH_SIGNING_KEY" in str(info.value)


def test_a_missing_key_file_is_refused(tmp_path):
    refused(tmp_path / "nope.pem", "cannot be read")


def test_a_key_readable_by_others_is_refused(tmp_path):
    path = write_key(tmp_path, pem(Ed25519PrivateKey.generate()), mode=0o644)
    refused(path, "chmod 600")


def test_a_key_that_is_not_ed25519_is_refused(tmp_path):
    refused(write_key(tmp_path, pem(ec.generate_private_key(ec.SECP256R1()))), "not Ed25519")


def test_the_rfc_9421_example_key_is_refused(tmp_path):
    jwk = {k: VECTORS["key"][k] for k in ("kty", "crv", "d", "x")}
    refused(write_key(tmp_path, json.dumps(jwk).encode()), "RFC 9421 example key")


def test_a_public_jwk_is_refused(tmp_path):
    jwk = public_jwk(Ed25519PrivateKey.generate())
    refused(write_key(tmp_path, json.dumps(jwk).encode()), "no private part")


def test_garbage_is_refused(tmp_path):
    refused(write_key(tmp_path, b"hello"), "not an unencrypted PKCS#8 PEM")


def test_a_generated_key_is_0600_and_loads_as_pem_and_as_jwk(tmp_path):
    path = tmp_path / "walsh.pem"
    key = generate_key(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert public_jwk(load_key(path)) == public_jwk(key)
    raw = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    jwk = {**public_jwk(key), "d": __import__("base64").urlsafe_b64encode(raw).decode().rstrip("=")}
    assert public_jwk(load_key(write_key(tmp_path, json.dumps(jwk).encode(), name="k.jwk"))) == (
        public_jwk(key)
    )
    with pytest.raises(FileExistsError):
        generate_key(path)  # never overwrites a key


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("WALSH_SIGNATURE_AGENT_FORM", "header", "use one of dictionary, origin, string"),
        ("WALSH_SIGNATURE_AGENT", "http://wal.sh/dir", "must be an https URL"),
        ("WALSH_SIGNATURE_TTL", "0", "between 10 and 86400"),
        ("WALSH_SIGNATURE_TTL", "2.5", "whole seconds"),
        ("WALSH_SIGNATURE_COMPONENTS", "@query", "not allowed"),
    ],
)
def test_signature_settings_that_cannot_work_are_refused(tmp_path, name, value, match):
    path = tmp_path / "k.pem"
    generate_key(path)
    settings = Settings({"ADDONS": {"scrapy_walsh_research.Addon": 0}})
    settings.set("WALSH_SIGNING_KEY", str(path))
    settings.set(name, value)
    with pytest.raises(WalshConfigurationError, match=match):
        check_settings(settings)


# -- every request on the wire is signed ------------------------------------------------


def signing_settings(server: Any, tmp_path: Path, **extra: Any) -> tuple[dict[str, Any], Signer]:
    path = tmp_path / "walsh.pem"
    key = generate_key(path)
    jwk = public_jwk(key)
    server.origin.verifier = Verifier({jwk["kid"]: jwk["x"]})
    settings = base_settings(server, tmp_path / "s", WALSH_SIGNING_KEY=str(path), **extra)
    return settings, Signer(key)


@pytest_twisted.ensureDeferred
async def test_every_request_the_origin_receives_is_signed_and_verifies(server, tmp_path):
    """Targets, robots.txt, the blocklist and its schema, a redirect hop and a
    retry: each verified at the origin, each with its own nonce."""
    server.origin.route("a.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route(
        "a.test", "/old", Reply(301, "", {"Location": server.url("a.test", "/new")})
    )
    server.origin.route("a.test", "/new", Reply(200, "moved here"))
    answers = iter([Reply(503, "busy", {"Retry-After": "1"}), Reply(200, "ok")])
    server.origin.route("a.test", "/busy", lambda hit: next(answers))
    settings, _ = signing_settings(server, tmp_path, DEFAULT_REQUEST_HEADERS={
        "Signature": "sig1=:AAAA:", "Signature-Input": 'sig1=("@authority");created=1',
    })  # fmt: skip
    result = await crawl(
        settings, [server.url("a.test", "/old"), server.url("a.test", "/busy")], tmp_path
    )
    assert {i["outcome"] for i in result.items} == {"fetched"}
    hits = server.origin.hits
    paths = [(h.host, h.path) for h in hits]
    for needed in [("a.test", "/robots.txt"), ("a.test", "/old"), ("a.test", "/new"),
                   (BLOCKLIST_HOST, "/.well-known/walsh-research/blocklist.json")]:  # fmt: skip
        assert needed in paths
    assert paths.count(("a.test", "/busy")) == 2
    assert [h.signature for h in hits] == ["verified"] * len(hits), [
        (h.path, h.signature) for h in hits
    ]
    assert len({h.headers["signature-input"] for h in hits}) == len(hits)
    assert {h.headers["signature-agent"] for h in hits} == {
        'sig1="https://wal.sh/.well-known/http-message-signatures-directory"'
    }
    assert result.stats["walsh/signing/signed"] == len(hits)


@pytest.mark.parametrize(
    ("form", "header"),
    [
        ("dictionary", 'sig1="https://wal.sh/.well-known/http-message-signatures-directory"'),
        ("origin", 'sig1="https://wal.sh"'),
        ("string", '"https://wal.sh"'),
    ],
)
@pytest_twisted.ensureDeferred
async def test_each_signature_agent_form_is_sent_covered_and_verifies(
    server, tmp_path, form, header
):
    server.origin.route("f.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("f.test", "/x", Reply(200, "x"))
    settings, _ = signing_settings(
        server, tmp_path, WALSH_SIGNATURE_AGENT_FORM=form,
        WALSH_SIGNATURE_COMPONENTS=["@method", "@path"],
    )  # fmt: skip
    await crawl(settings, [server.url("f.test", "/x")], tmp_path)
    hit = server.origin.hits_for("f.test", "/x")[0]
    assert hit.headers["signature-agent"] == header
    assert '"@method" "@path"' in hit.headers["signature-input"]
    assert hit.signature == "verified"


@pytest_twisted.ensureDeferred
async def test_a_request_that_cannot_be_signed_is_not_sent(server, tmp_path, monkeypatch):
    server.origin.route("n.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("n.test", "/x", Reply(200, "x"))
    settings, _ = signing_settings(server, tmp_path)
    real = Signer.sign_request

    def failing(self: Signer, method: str, url: str, headers: Any, **kw: Any) -> None:
        if url.endswith("/x"):
            raise ValueError("no key today")
        real(self, method, url, headers, **kw)

    monkeypatch.setattr(Signer, "sign_request", failing)
    result = await crawl(settings, [server.url("n.test", "/x")], tmp_path)
    assert server.origin.hits_for("n.test", "/x") == []
    (record,) = result.items
    assert record["outcome"] == "failed"
    assert "could not be signed" in record["reason"]
    assert result.stats["walsh/signing/failed"] == 1


@pytest_twisted.ensureDeferred
async def test_without_a_key_requests_are_unsigned(server, tmp_path):
    server.origin.verifier = Verifier({})
    server.origin.route("u.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("u.test", "/x", Reply(200, "x"))
    await crawl(base_settings(server, tmp_path / "s"), [server.url("u.test", "/x")], tmp_path)
    assert {h.signature for h in server.origin.hits} == {"unsigned"}


# -- what the operator publishes --------------------------------------------------------

PROJECT = Path(__file__).parent.parent / "example_project"


def scrapy(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [str(Path(sys.executable).parent / "scrapy"), *args],
        cwd=PROJECT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if ok:
        assert run.returncode == 0, run.stderr[-2000:]
    return run


def test_walsh_keys_generate_writes_a_private_key_only_its_owner_reads(tmp_path):
    run = scrapy("walsh-keys", "generate", str(tmp_path / "k.pem"))
    key = load_key(tmp_path / "k.pem")
    assert os.stat(tmp_path / "k.pem").st_mode & 0o777 == 0o600
    assert public_jwk(key)["kid"] in run.stdout
    again = scrapy("walsh-keys", "generate", str(tmp_path / "k.pem"), ok=False)
    assert again.returncode != 0 and "never overwritten" in again.stderr


def in_a_fresh_folder(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "scrapy"), *args],
        cwd=folder, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_readmes_walsh_keys_generate_makes_the_keys_folder(tmp_path):
    run = in_a_fresh_folder(tmp_path, "walsh-keys", "generate", "keys/walsh.pem")
    assert run.returncode == 0, run.stderr[-2000:]
    assert os.stat(tmp_path / "keys").st_mode & 0o777 == 0o700
    assert os.stat(tmp_path / "keys" / "walsh.pem").st_mode & 0o777 == 0o600
    load_key(tmp_path / "keys" / "walsh.pem")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("walsh-keys", "generate", "a-file/walsh.pem"), "cannot write a key to a-file/walsh.pem"),
        (("walsh-keys", "directory", "-s", "WALSH_SIGNING_KEY=nope.pem"), "cannot be read"),
    ],
)
def test_a_slip_with_walsh_keys_is_one_clear_line_and_no_traceback(tmp_path, args, says):
    (tmp_path / "a-file").write_text("")
    run = in_a_fresh_folder(tmp_path, *args)
    assert run.returncode != 0
    assert says in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert len([line for line in run.stderr.splitlines() if "error" in line]) == 1, run.stderr


def test_the_directory_publishes_public_keys_whose_kid_is_the_keyid_signed_by_each_key(tmp_path):
    new, old = tmp_path / "new.pem", tmp_path / "old.pem"
    generate_key(new), generate_key(old)
    scrapy("walsh-keys", "directory", "--also", str(old), "--out", str(tmp_path / "pub"),
           "-s", f"WALSH_SIGNING_KEY={new}")  # fmt: skip
    body = (tmp_path / "pub" / "http-message-signatures-directory").read_bytes()
    headers = dict(
        line.split(": ", 1)
        for line in (tmp_path / "pub" / "http-message-signatures-directory.headers")
        .read_text()
        .splitlines()
    )
    jwks = json.loads(body)
    assert all("d" not in k for k in jwks["keys"])
    assert [k["kid"] for k in jwks["keys"]] == [Signer(load_key(p)).keyid for p in (new, old)]
    assert headers["Content-Type"] == "application/http-message-signatures-directory+json"
    assert headers["Content-Digest"] == (
        "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"
    )
    # each key's possession signature verifies, checked here from the bytes sent
    inputs = parse_dictionary(headers["Signature-Input"])
    signatures = parse_dictionary(headers["Signature"])
    assert len(inputs) == 2
    for label, (_, params, raw) in inputs.items():
        assert params["tag"] == "http-message-signatures-directory"
        x = {k["kid"]: k["x"] for k in jwks["keys"]}[params["keyid"]]
        base = (
            f'"@authority";req: wal.sh\n"content-digest": {headers["Content-Digest"]}\n'
            f'"@signature-params": {raw}'
        )
        Ed25519PublicKey.from_public_bytes(_b64url_decode(x)).verify(
            signatures[label][0], base.encode()
        )


def test_a_signed_attestation_verifies_against_the_published_keys_and_fails_once_a_byte_changes(
    tmp_path,
):
    signing, attesting = tmp_path / "s.pem", tmp_path / "a.pem"
    generate_key(signing), generate_key(attesting)
    keys = ("-s", f"WALSH_SIGNING_KEY={signing}", "-s", f"WALSH_ATTESTATION_KEY={attesting}")
    token = scrapy("walsh-attest", "--sign", *keys).stdout.strip()
    (tmp_path / "att.jws").write_text(token)
    (tmp_path / "keys.json").write_text(scrapy("walsh-keys", "attestation-keys", *keys).stdout)
    run = scrapy("walsh-attest", "--verify", str(tmp_path / "att.jws"),
                 "--jwks", str(tmp_path / "keys.json"))  # fmt: skip
    doc = json.loads(run.stdout)
    assert doc["identity"]["signed"] is True
    assert doc["identity"]["keyid"] == Signer(load_key(signing)).keyid
    head, payload, sig = token.split(".")
    changed = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).replace(
        b'"signed":true', b'"signed":fals'
    )
    forged = ".".join([head, base64.urlsafe_b64encode(changed).decode().rstrip("="), sig])
    (tmp_path / "forged.jws").write_text(forged)
    bad = scrapy("walsh-attest", "--verify", str(tmp_path / "forged.jws"),
                 "--jwks", str(tmp_path / "keys.json"), ok=False)  # fmt: skip
    assert bad.returncode == 1 and "NOT VERIFIED" in bad.stderr


def test_the_attestation_key_must_not_be_the_request_signing_key(tmp_path):
    generate_key(tmp_path / "k.pem")
    run = scrapy("walsh-attest", "--sign", "-s", f"WALSH_SIGNING_KEY={tmp_path / 'k.pem'}",
                 "-s", f"WALSH_ATTESTATION_KEY={tmp_path / 'k.pem'}", ok=False)  # fmt: skip
    assert run.returncode != 0 and "not reused across purposes" in run.stderr


def test_an_unsigned_configuration_is_attested_as_unsigned():
    doc = json.loads(scrapy("walsh-attest").stdout)
    assert doc["identity"]["signed"] is False
    assert "WALSH_SIGNING_KEY" in doc["identity"]["reason"]


# -- the signer's template is the library's output, byte for byte -------------------

_label = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12).filter(
    lambda s: not s.startswith("-") and not s.endswith("-")
)
_segment = st.lists(
    st.one_of(
        st.text("abcdefghijklmnopqrstuvwxyzABC0123456789-._~!$&'()*+,;=:@", min_size=1),
        st.sampled_from(["%20", "%2F", "%e2%82%ac"]),  # escapes as Scrapy writes them
    ),
    max_size=4,
).map("".join)


@st.composite
def urls(draw: Any) -> str:
    scheme = draw(st.sampled_from(["http", "https"]))
    host = ".".join(draw(st.lists(_label, min_size=1, max_size=3)))
    port = draw(st.one_of(st.none(), st.integers(1, 65535)))
    path = "".join("/" + s for s in draw(st.lists(_segment, max_size=4)))
    query = draw(st.one_of(st.none(), st.text("abc=&xyz0-9", max_size=12)))
    url = f"{scheme}://{host}" + (f":{port}" if port else "") + path
    return url + (f"?{query}" if query is not None else "")


_KEY = Ed25519PrivateKey.generate()


@settings(max_examples=200, deadline=None)
@given(
    url=urls(),
    method=st.sampled_from(["GET", "HEAD", "POST"]),  # Scrapy upper-cases methods
    form=st.sampled_from(["dictionary", "origin", "string"]),
    extra=st.lists(st.sampled_from(["@method", "@path", "@target-uri"]), unique=True),
)
def test_the_fast_signature_equals_the_librarys_for_any_request(url, method, form, extra):
    signer = Signer(_KEY, form=form, extra=tuple(extra))
    fast: dict[str, str] = {}
    fast["Signature-Input"], fast["Signature"] = signer._fast_sign(method, url, 1795000000, "n0")
    library: dict[str, str] = {"Signature-Agent": signer.agent_header}
    signer._library_sign(method, url, library, 1795000000, "n0")
    assert fast["Signature-Input"] == library["Signature-Input"]
    assert fast["Signature"] == library["Signature"]


@pytest_twisted.ensureDeferred
async def test_behind_a_forward_proxy_the_signature_names_the_target_authority(
    server, tmp_path, monkeypatch
):
    from tests.support.proxy import RecordingProxy

    proxy = RecordingProxy(server.port).start()
    for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy.url)
    try:
        server.origin.route("p.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
        server.origin.route("p.test", "/x", Reply(200, "x"))
        settings, _ = signing_settings(server, tmp_path)
        await crawl(settings, [server.url("p.test", "/x")], tmp_path)
    finally:
        await proxy.stop()
    assert server.url("p.test", "/x") in proxy.seen  # it did go through the proxy
    assert {h.signature for h in server.origin.hits} == {"verified"}
    assert len(server.origin.hits_for("p.test")) == 3  # robots.txt, tdmrep.json, /x
