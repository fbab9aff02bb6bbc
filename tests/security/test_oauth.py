"""SASL/OAUTHBEARER's JWT validation (odradek.security.oauth), as Kafka's broker does it
(KIP-768's OAuthBearerValidatorCallbackHandler, OAuthBearerSaslServer): tokens signed by
a test identity provider's RSA (and EC) keys, checked against its JWKS read from a file:
URL or a local HTTP server.

- A valid token gives its sub (or the configured claim) as the principal and an empty
  server message; the client's first message is RFC 7628's, extensions and authzid too.
- Expired (beyond the clock skew), not yet valid, without exp/iat, the wrong audience or
  issuer, another key, alg none, HS256 with the public key, garbage: refused - the server
  answers {"status":"invalid_token"}, and the client's \\x01 after it fails the exchange.
- The JWKS is fetched off the caller's thread, kept, read again after refresh.ms or for an
  unknown kid (at most once a minute per kid), and an unreachable one is retried with
  back-off while the old keys keep serving.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from odradek.security.oauth import (
    FAILED,
    INVALID_TOKEN,
    InvalidToken,
    JwksKeys,
    JwtValidator,
    OAuthBearerAuthenticator,
    OAuthSettings,
    initial_response,
    parse_initial_response,
)
from odradek.security.scram import AuthenticationFailed
from odradek.server.config import load_config
from odradek.server.settings import ConfigError

AUDIENCE = "odradek"
ISSUER = "https://idp.example.com"


class IdentityProvider:
    """A test identity provider: signing keys (RSA, optionally EC), its JWKS, tokens."""

    def __init__(self, kid: str = "key-1", *, curve: bool = False) -> None:
        self.keys: dict[str, Any] = {kid: rsa.generate_private_key(public_exponent=65537,
                                                                  key_size=2048)}
        self.kid = kid
        if curve:
            self.keys["ec-1"] = ec.generate_private_key(ec.SECP256R1())

    def add_key(self, kid: str) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid, key in self.keys.items():
            algo = (jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey)
                    else jwt.algorithms.ECAlgorithm)
            jwk = json.loads(algo.to_jwk(key.public_key()))
            jwk.update(kid=kid, use="sig")
            out.append(jwk)
        return {"keys": out}

    def token(self, sub: str = "alice", *, lifetime: float = 600, kid: str | None = None,
              alg: str = "RS256", key: Any = None, omit: tuple[str, ...] = (),
              headers: dict[str, Any] | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": sub, "iat": now, "exp": int(now + lifetime), "aud": AUDIENCE,
                "iss": ISSUER, "scope": "produce consume", **claims}
        for name in omit:
            body.pop(name, None)
        kid = kid or self.kid
        return jwt.encode(body, key if key is not None else self.keys[kid], algorithm=alg,
                          headers={"kid": kid, **(headers or {})})


class JwksServer:
    """The provider's JWKS over HTTP on 127.0.0.1 (a thread), counting requests; over
    HTTPS with ``tls`` (a PEM keystore: key and certificate chain)."""

    def __init__(self, idp: IdentityProvider, tls: Path | None = None) -> None:
        self.idp = idp
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                body = json.dumps(owner.idp.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> JwksServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def idp() -> IdentityProvider:
    return IdentityProvider(curve=True)


@pytest.fixture(scope="module")
def jwks_file(idp: IdentityProvider, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps(idp.jwks()))
    return path


def make_validator(url: str, **settings: Any) -> JwtValidator:
    options = OAuthSettings(jwks_url=url, audience=(AUDIENCE,), issuer=ISSUER)
    options = OAuthSettings(**{**{f: getattr(options, f) for f in options.__slots__},
                               **settings})
    keys = JwksKeys(options.jwks_url, options.refresh_ms)
    asyncio.run(keys.ensure())
    return JwtValidator(options, keys)


@pytest.fixture
def validator(jwks_file: Path) -> JwtValidator:
    return make_validator(jwks_file.as_uri())


def login(validator: JwtValidator | None, token: str) -> tuple[bytes, str | None]:
    return OAuthBearerAuthenticator(validator).step(initial_response(token))


# --- valid tokens --------------------------------------------------------------------


def test_a_valid_token_gives_its_subject_and_an_empty_server_message(validator, idp):
    auth = OAuthBearerAuthenticator(validator)
    token = idp.token("alice", lifetime=120)
    assert auth.step(initial_response(token)) == (b"", "alice")
    assert auth.token is not None and auth.token.scopes == {"produce consume"}
    assert abs(auth.credential_expires_at_ms - (time.time() + 120) * 1000) < 3000


def test_kafkas_client_message_with_extensions_and_authzid(validator, idp):
    token = idp.token("alice")
    # Kafka's OAuthBearerClientInitialResponse.toBytes(), byte for byte.
    message = f"n,a=alice,\x01auth=Bearer {token}\x01traceId=42\x01\x01".encode()
    auth = OAuthBearerAuthenticator(validator)
    assert auth.step(message) == (b"", "alice")
    assert auth.extensions == {"traceId": "42"}
    assert parse_initial_response(message) == (token, "alice", {"traceId": "42"})
    assert parse_initial_response(initial_response("a.b.c", "x,y=z")) == ("a.b.c", "x,y=z",
                                                                           {})
    with pytest.raises(AuthenticationFailed, match="different from the token's principal"):
        OAuthBearerAuthenticator(validator).step(initial_response(token, authzid="bob"))


def test_list_audience_ec_keys_and_other_claim_names(jwks_file, idp):
    validator = make_validator(jwks_file.as_uri(), audience=("other", AUDIENCE),
                               sub_claim="client_id", scope_claim="scp")
    token = idp.token(client_id="svc-orders", aud=["x", AUDIENCE], scp=["a", "b"])
    assert validator.validate(token).principal == "svc-orders"
    assert validator.validate(token).scopes == {"a", "b"}
    ec_token = idp.token(client_id="svc", kid="ec-1", alg="ES256")
    assert validator.validate(ec_token).principal == "svc"
    with pytest.raises(InvalidToken, match="client_id"):
        validator.validate(idp.token("alice"))  # no client_id claim


def test_expiry_within_the_clock_skew_is_accepted(validator, idp):
    assert validator.validate(idp.token(lifetime=-10)).principal == "alice"  # skew 30 s
    strict = make_validator(validator.settings.jwks_url, clock_skew_s=0)
    with pytest.raises(InvalidToken, match="expired"):
        strict.validate(idp.token(lifetime=-10))


# --- refused tokens -------------------------------------------------------------------


def other_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def refused_tokens(idp: IdentityProvider) -> dict[str, tuple[str, str]]:
    """name -> (token, what the broker's log reason says)"""
    now = int(time.time())
    public_pem = idp.keys[idp.kid].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    unsigned = jwt.encode({"sub": "alice", "iat": now, "exp": now + 600, "aud": AUDIENCE,
                           "iss": ISSUER}, None, algorithm="none",
                          headers={"kid": idp.kid})
    return {
        "expired": (idp.token(lifetime=-120), "expired"),
        "not yet valid": (idp.token(nbf=now + 300), "not yet valid"),
        "issued in the future": (idp.token(iat=now + 300), "not yet valid"),
        "no exp": (idp.token(omit=("exp",)), "exp"),
        "no iat": (idp.token(omit=("iat",)), "iat"),
        "wrong audience": (idp.token(aud="someone-else"), "audience"),
        "no audience": (idp.token(omit=("aud",)), "aud"),
        "wrong issuer": (idp.token(iss="https://evil.example.com"), "issuer"),
        "no issuer": (idp.token(omit=("iss",)), "iss"),
        "other key, same kid": (idp.token(key=other_rsa_key()), "Signature verification"),
        "unknown kid": (idp.token(key=other_rsa_key(), kid="nope"), "no key"),
        "alg none": (unsigned, "'none' is not accepted"),
        # The public key as an HMAC secret: the classic algorithm confusion.
        "HS256 with the public key": (_hs256(public_pem, idp.kid), "HS256"),
        "blank sub": (idp.token(" "), "sub"),
        "sub not a string": (idp.token(sub=7), "sub"),  # type: ignore[arg-type]
        "garbage": ("garbage", "three sections"),
        "garbage sections": ("a.b.c", "header"),
    }


def _hs256(secret: bytes, kid: str) -> str:
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64(json.dumps({"sub": "alice", "iat": now, "exp": now + 600, "aud": AUDIENCE,
                           "iss": ISSUER}).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


REFUSED = ["expired", "not yet valid", "issued in the future", "no exp", "no iat",
           "wrong audience", "no audience", "wrong issuer", "no issuer",
           "other key, same kid", "unknown kid", "alg none", "HS256 with the public key",
           "blank sub", "sub not a string", "garbage", "garbage sections"]


@pytest.mark.parametrize("case", REFUSED)
def test_refused_tokens_get_invalid_token_then_fail(validator, idp, case):
    token, reason = refused_tokens(idp)[case]
    with pytest.raises(InvalidToken) as refused:
        validator.validate(token)
    assert reason.lower() in str(refused.value).lower()
    auth = OAuthBearerAuthenticator(validator)
    try:
        answer, user = auth.step(initial_response(token))
    except AuthenticationFailed as exc:  # tokens the RFC 6750 grammar refuses already
        assert str(exc) == FAILED
        return
    assert (answer, user) == (INVALID_TOKEN.encode(), None)
    assert json.loads(answer) == {"status": "invalid_token"}
    with pytest.raises(AuthenticationFailed) as failed:
        auth.step(b"\x01")  # the client's acknowledgement (RFC 7628 3.2.3)
    assert str(failed.value) == INVALID_TOKEN  # what Kafka tells the client
    assert isinstance(failed.value.__cause__, InvalidToken)  # the reason, for the log


def test_audience_in_a_token_without_expected_audience_is_refused(jwks_file, idp):
    validator = make_validator(jwks_file.as_uri(), audience=(), issuer="")
    assert validator.validate(idp.token(omit=("aud", "iss"))).principal == "alice"
    with pytest.raises(InvalidToken, match="audience"):  # as jose4j (Kafka) refuses it
        validator.validate(idp.token())


@pytest.mark.parametrize("message", [
    b"", b"\x01", b"garbage", b"\xff\xfe", b"n,,\x01auth=Bearer\x01\x01",
    b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01user=x\x01\x01", b"p=x,,\x01auth=Bearer a\x01\x01",
])
def test_malformed_messages_fail_at_once(validator, message):
    with pytest.raises(AuthenticationFailed) as failed:
        OAuthBearerAuthenticator(validator).step(message)
    assert str(failed.value) == FAILED


def test_a_new_token_after_an_error_is_tried_again(validator, idp):
    auth = OAuthBearerAuthenticator(validator)
    assert auth.step(initial_response(idp.token(lifetime=-300)))[1] is None
    assert auth.step(initial_response(idp.token())) == (b"", "alice")


def test_without_a_jwks_url_every_token_is_refused(idp):
    auth = OAuthBearerAuthenticator(None)
    assert auth.step(initial_response(idp.token()))[1] is None
    with pytest.raises(AuthenticationFailed) as failed:
        auth.step(b"\x01")
    assert "jwks.endpoint.url is not set" in str(failed.value.__cause__)


# --- the JWKS: fetching and refreshing ----------------------------------------------------


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_jwks_over_http_is_fetched_once_then_refreshed_when_due():
    idp = IdentityProvider()
    with JwksServer(idp) as server:
        validator = make_validator(server.url, refresh_ms=1500)
        assert server.requests == 1
        for _ in range(20):  # validation is CPU only: no fetch
            assert validator.validate(idp.token()).principal == "alice"
            asyncio.run(validator.keys.ensure())
        assert server.requests == 1
        time.sleep(1.6)
        asyncio.run(validator.keys.ensure())  # due: fetched in the background
        wait_for(lambda: server.requests == 2)
        asyncio.run(validator.keys.ensure())
        assert server.requests == 2


def test_a_rotated_key_is_fetched_early_at_most_once_a_minute_per_kid():
    idp = IdentityProvider()
    with JwksServer(idp) as server:
        validator = make_validator(server.url)
        idp.add_key("key-2")
        token = idp.token(kid="key-2")
        with pytest.raises(InvalidToken, match="no key"):
            validator.validate(token)  # fails, and asks for the JWKS again
        wait_for(lambda: validator.keys.keys is not None and len(validator.keys.keys) == 2)
        assert validator.validate(token).principal == "alice"
        assert server.requests == 2
        unknown = idp.token(key=other_rsa_key(), kid="forged")
        for _ in range(5):
            with pytest.raises(InvalidToken):
                validator.validate(unknown)
        wait_for(lambda: server.requests == 3)
        time.sleep(0.2)
        assert server.requests == 3  # the same unknown kid: once


def test_an_unreachable_jwks_refuses_tokens_and_is_retried_with_backoff(tmp_path):
    idp = IdentityProvider()
    missing = tmp_path / "jwks.json"
    keys = JwksKeys(missing.as_uri(), 3_600_000)
    validator = JwtValidator(OAuthSettings(jwks_url=missing.as_uri(), audience=(AUDIENCE,),
                                           issuer=ISSUER), keys)
    asyncio.run(keys.ensure())
    with pytest.raises(InvalidToken, match="cannot read the JWKS"):
        validator.validate(idp.token())
    assert not keys.due()  # backing off
    missing.write_text(json.dumps(idp.jwks()))
    wait_for(keys.due, timeout=2)
    asyncio.run(keys.ensure())
    assert validator.validate(idp.token()).principal == "alice"
    missing.write_text("not json")
    keys.refresh(force=True)  # a bad document keeps the old keys
    assert keys.last_error and validator.validate(idp.token()).principal == "alice"


def test_connections_arriving_together_share_one_fetch_of_a_dead_endpoint():
    with socket.create_server(("127.0.0.1", 0), backlog=64) as silent:  # never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/jwks.json"
        keys = JwksKeys(url, 3_600_000, timeout=0.5)

        async def many() -> None:
            await asyncio.gather(*(keys.ensure() for _ in range(20)))

        start = time.monotonic()
        asyncio.run(many())
        assert time.monotonic() - start < 2.5  # one timed-out attempt, not 20 in a row
    assert keys.keys is None and "cannot read the JWKS" in (keys.last_error or "")


def test_ensure_does_not_block_the_event_loop_once_there_are_keys():
    idp = IdentityProvider()
    release = threading.Event()
    with JwksServer(idp) as server:
        keys = JwksKeys(server.url, 1)
        keys.refresh()
        original = keys._fetch

        def slow() -> Any:
            release.wait(10)
            return original()

        keys._fetch = slow  # type: ignore[method-assign]
        time.sleep(0.01)

        async def main() -> float:
            start = time.monotonic()
            await keys.ensure()  # due, but served from the old keys meanwhile
            return time.monotonic() - start

        assert asyncio.run(main()) < 0.5
        release.set()
        wait_for(lambda: server.requests == 2)


# --- settings ---------------------------------------------------------------------------


def test_settings_broker_wide_and_per_listener():
    config = load_config(environ={}, overrides={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": "https://idp.example.com/jwks",
        "sasl.oauthbearer.expected.audience": "a, b",
        "listener.name.sasl_plaintext.sasl.oauthbearer.expected.issuer": "https://idp",
        "listener.name.sasl_plaintext.sasl.oauthbearer.clock.skew.seconds": "5",
    })
    settings = OAuthSettings.from_lookup(
        lambda name: config.for_listener("SASL_PLAINTEXT", name))
    assert settings == OAuthSettings("https://idp.example.com/jwks", ("a", "b"),
                                     "https://idp", "sub", "scope", 5, 3_600_000)
    with pytest.raises(ConfigError, match=r"jwks\.endpoint\.url"):
        load_config(environ={}, overrides={"sasl.oauthbearer.jwks.endpoint.url": "ftp://x"})
    with pytest.raises(ConfigError, match=r"clock\.skew"):
        load_config(environ={}, overrides={
            "listener.name.x.sasl.oauthbearer.clock.skew.seconds": "-1"})
