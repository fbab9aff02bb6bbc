"""SASL/OAUTHBEARER (RFC 7628) with the broker-side JWT validation of Kafka's
``OAuthBearerValidatorCallbackHandler`` (KIP-768): the client's bearer token is a JWT
signed by an identity provider whose public keys the broker reads from a JWKS
(``sasl.oauthbearer.jwks.endpoint.url``: https, http or a ``file:`` path).

What a token must be, as Kafka's ``ValidatorAccessTokenValidator`` (jose4j) checks it:
three base64url sections; signed with an asymmetric algorithm (RS*, PS*, ES*, EdDSA; never
``none`` or a shared-secret HS*) by a key of the JWKS (its ``kid``; without one, any key
that fits the algorithm); ``exp`` and ``iat`` present, ``exp``/``nbf`` within
``sasl.oauthbearer.clock.skew.seconds``; ``aud`` one of
``sasl.oauthbearer.expected.audience`` when that is set (and, as jose4j does, no ``aud``
at all when it is not); ``iss`` equal to ``sasl.oauthbearer.expected.issuer`` when set;
the ``sasl.oauthbearer.sub.claim.name`` claim a non-blank string: the principal,
``User:<sub>``. The scope claim (``sasl.oauthbearer.scope.claim.name``) is read, not
enforced.

The exchange (Kafka's ``OAuthBearerSaslServer``): the client's first message is
``n,[a=authzid],\\x01auth=Bearer <jwt>\\x01[key=value\\x01...]\\x01``. A valid token ends
it with an empty server message. An invalid one is answered - not failed - with
``{"status":"invalid_token"}``; the client then sends ``\\x01`` and that fails, with the
same JSON as the message the client sees (the reason is kept for the broker's log only).
A malformed first message fails at once with Kafka's generic message.

Keys: ``JwksKeys`` fetches the JWKS (PyJWT's ``PyJWKClient``) in a thread - the first
time a client asks for OAUTHBEARER, then again when ``sasl.oauthbearer.jwks.endpoint.
refresh.ms`` has passed (in the background, the old keys serving meanwhile), and early
when a token names a ``kid`` the set lacks (at most once a minute per kid, as Kafka's
``RefreshingHttpsJwks``; that token fails). Validating a token is CPU only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import jwt
from jwt import PyJWK, PyJWKClient

from odradek.security.scram import AuthenticationFailed

log = logging.getLogger(__name__)

OAUTHBEARER = "OAUTHBEARER"
# The server's answer to an invalid token (RFC 7628 section 3.2.2, Kafka's wording).
INVALID_TOKEN = '{"status":"invalid_token"}'
# What a client is told for a malformed exchange (Kafka's SaslException message).
FAILED = ("Authentication failed during authentication due to invalid credentials with "
          f"SASL mechanism {OAUTHBEARER}")
# Signature algorithms a broker accepts: public-key ones only (a JWKS holds public keys;
# "none" and the HMAC ones would let whoever knows the key material forge tokens).
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                        "ES256", "ES384", "ES512", "ES256K", "EdDSA"})
_KEY_TYPES = {"R": "RSA", "P": "RSA", "E": "EC"}  # algorithm's first letter -> JWK kty

# Kafka's RFC 7628 grammar (OAuthBearerClientInitialResponse).
_SEP = "\x01"
_KVPAIRS = r"(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*"
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # ASCII but "," and "=" escaped
_INITIAL = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01"
                      rf"(?P<kvpairs>{_KVPAIRS})\x01", re.DOTALL)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")

MISSING_KID_INTERVAL = 60.0  # Kafka's MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
MISSING_KID_MAX = 16  # Kafka's MISSING_KEY_ID_CACHE_MAX_ENTRIES
BACKOFF_MIN, BACKOFF_MAX = 0.1, 10.0  # Kafka's jwks.endpoint.retry.backoff(.max).ms defaults
FETCH_TIMEOUT = 10.0
# Fetches (unknown kids among them: any client can send new ones) at most this often.
EXPEDITE_MIN_INTERVAL = 1.0


class InvalidToken(Exception):
    """Why a token was refused (for the broker's log; the client sees invalid_token)."""


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """The ``sasl.oauthbearer.*`` settings of one listener."""

    jwks_url: str = ""
    audience: tuple[str, ...] = ()
    issuer: str = ""
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    refresh_ms: int = 3_600_000
    # The JWKS endpoint's TLS: Kafka's JAAS options on the OAUTHBEARER login module
    # (``ssl.truststore.location`` of a PEM file, ``ssl.endpoint.identification.algorithm``);
    # without a truststore the system's CAs are trusted.
    jwks_truststore: str = ""
    jwks_check_hostname: bool = True

    @classmethod
    def from_lookup(cls, get: Callable[[str], Any],
                    jaas_options: dict[str, str] | None = None) -> OAuthSettings:
        """From Kafka's setting names; ``get(name)`` gives a setting's value,
        ``jaas_options`` are the options of the listener's OAUTHBEARER JAAS line."""
        p = "sasl.oauthbearer."
        options = jaas_options or {}
        truststore_type = options.get("ssl.truststore.type", "PEM").upper()
        if truststore_type != "PEM":
            raise ValueError(f"oauthbearer.sasl.jaas.config: ssl.truststore.type="
                             f"{truststore_type}: only PEM truststores are read")
        return cls(
            jwks_truststore=options.get("ssl.truststore.location", ""),
            jwks_check_hostname=options.get("ssl.endpoint.identification.algorithm",
                                            "https").lower() == "https",
            jwks_url=str(get(p + "jwks.endpoint.url") or ""),
            audience=tuple(a.strip() for a in str(get(p + "expected.audience") or "")
                           .split(",") if a.strip()),
            issuer=str(get(p + "expected.issuer") or ""),
            sub_claim=str(get(p + "sub.claim.name") or "sub"),
            scope_claim=str(get(p + "scope.claim.name") or "scope"),
            clock_skew_s=int(get(p + "clock.skew.seconds")),
            refresh_ms=int(get(p + "jwks.endpoint.refresh.ms")),
        )


@dataclass(frozen=True, slots=True)
class BearerToken:
    """A validated token (Kafka's ``BasicOAuthBearerToken``)."""

    value: str
    principal: str
    scopes: frozenset[str]
    expires_at_ms: int
    issued_at_ms: int | None
    claims: dict[str, Any]


def parse_initial_response(message: bytes) -> tuple[str, str, dict[str, str]]:
    """(token, authorization id, extensions) of a client's first OAUTHBEARER message;
    ValueError if it is not RFC 7628's (Kafka's ``OAuthBearerClientInitialResponse``)."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise ValueError("Invalid OAUTHBEARER client first message: not UTF-8") from None
    match = _INITIAL.fullmatch(text)
    if match is None:
        raise ValueError("Invalid OAUTHBEARER client first message")
    authzid = (match.group("authzid") or "").replace("=2C", ",").replace("=3D", "=")
    properties: dict[str, str] = {}
    for pair in match.group("kvpairs").split(_SEP):
        if pair:
            key, _, value = pair.partition("=")
            properties[key] = value
    auth = properties.pop("auth", None)
    if auth is None:
        raise ValueError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise ValueError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if auth_match.group("scheme").lower() != "bearer":
        raise ValueError("Invalid scheme in OAUTHBEARER client first message: "
                         f"{auth_match.group('scheme')}")
    return auth_match.group("token"), authzid, properties


def initial_response(token: str, authzid: str = "",
                     extensions: dict[str, str] | None = None) -> bytes:
    """A client's first message (for tests and tools)."""
    ext = "".join(f"{_SEP}{k}={v}" for k, v in (extensions or {}).items())
    gs2 = f"a={authzid.replace('=', '=3D').replace(',', '=2C')}" if authzid else ""
    return f"n,{gs2},{_SEP}auth=Bearer {token}{ext}{_SEP}{_SEP}".encode()


class JwksKeys:
    """The identity provider's public keys, fetched from ``url`` (https, http, file) and
    kept; refreshed every ``refresh_ms``, on an unknown ``kid``, never on the caller's
    thread once there are keys (see the module docstring)."""

    def __init__(self, url: str, refresh_ms: int, *, timeout: float = FETCH_TIMEOUT,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if not url.lower().startswith(("https://", "http://", "file:")):
            raise ValueError("sasl.oauthbearer.jwks.endpoint.url must be an https://, "
                             f"http:// or file: URL, got {url!r}")
        self.url = url
        self.refresh_s = refresh_ms / 1000
        # PyJWKClient speaks http(s) only; a file: JWKS is read here (Kafka's
        # JwksFileVerificationKeyResolver reads it too, once; here every refresh.ms).
        self._file = (Path(url2pathname(urlparse(url).path))
                      if url.lower().startswith("file:") else None)
        self._client = (None if self._file is not None
                        else PyJWKClient(url, cache_jwk_set=False, timeout=timeout,
                                         ssl_context=ssl_context))
        self._keys: list[tuple[PyJWK, dict[str, Any]]] | None = None
        self._fetched_at = 0.0  # monotonic, of the last successful fetch
        self._generation = 0  # successful fetches so far
        self._next_attempt = 0.0  # monotonic; after a failed fetch, backing off
        self._backoff = BACKOFF_MIN
        self._expedite = False  # a token named a kid we lack
        self._missing: dict[str, float] = {}  # kid -> when it was last asked for
        self._fetch_lock = threading.Lock()  # one fetch at a time
        self._state_lock = threading.Lock()
        self._background: threading.Thread | None = None
        self.last_error: str | None = None

    @property
    def keys(self) -> list[PyJWK] | None:
        return None if self._keys is None else [k for k, _ in self._keys]

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if now < self._next_attempt:
            return False
        age = now - self._fetched_at
        return (self._keys is None or age >= self.refresh_s
                or (self._expedite and age >= EXPEDITE_MIN_INTERVAL))

    def refresh(self, *, force: bool = False) -> None:
        """Fetch the JWKS if due (``force``: now) - blocking, so off the event loop;
        failures are logged and kept in ``last_error``, the old keys stay."""
        generation = self._generation
        with self._fetch_lock:
            # Another thread fetched while we waited, or failed and is backing off
            # (connections arriving together must not each wait out a dead endpoint).
            if not force and (self._generation != generation or not self.due()):
                return
            try:
                keys = _usable_keys(self._fetch())
            except Exception as exc:  # any failure: keep the old keys
                self.last_error = f"cannot read the JWKS from {self.url}: {exc}"
                self._next_attempt = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, BACKOFF_MAX)
                log.warning("OAUTHBEARER: %s (retrying in %.1f s)", self.last_error,
                            self._next_attempt - time.monotonic())
                return
            self._keys = keys
            self._fetched_at = time.monotonic()
            self._generation += 1
            self._expedite = False
            self._backoff = BACKOFF_MIN
            self._next_attempt = 0.0
            self.last_error = None
            log.info("OAUTHBEARER: read %d key(s) from %s", len(keys), self.url)

    def _fetch(self) -> Any:
        if self._file is not None:
            return json.loads(self._file.read_text())
        assert self._client is not None
        return self._client.fetch_data()

    def refresh_in_background(self) -> None:
        """Start a fetch in a thread of its own if one is due (or asked for by an unknown
        kid: then as soon as allowed) and none is running."""
        if not (self.due() or self._expedite):
            return
        with self._state_lock:  # not _fetch_lock: a fetch may hold that for seconds
            if self._background is not None and self._background.is_alive():
                return
            self._background = threading.Thread(target=self._refresh_when_allowed,
                                                 daemon=True, name="odradek-jwks-refresh")
            self._background.start()

    def _refresh_when_allowed(self) -> None:
        now = time.monotonic()
        wait = max(self._next_attempt - now,
                   self._fetched_at + EXPEDITE_MIN_INTERVAL - now, 0.0)
        time.sleep(min(wait, BACKOFF_MAX))
        self.refresh()

    async def ensure(self) -> None:
        """Have keys: the first time, wait (in a thread) for the fetch; afterwards start
        a due refresh in the background and go on with the keys there are."""
        if self._keys is None and self.due():
            await asyncio.to_thread(self.refresh)
        else:
            self.refresh_in_background()

    def candidates(self, kid: str | None, algorithm: str) -> list[PyJWK]:
        """The keys that may have signed a token with this header; InvalidToken if none
        (an unknown kid also asks for an early refresh)."""
        if self._keys is None:
            raise InvalidToken(self.last_error or f"no keys read from {self.url} yet")
        kty = _KEY_TYPES.get(algorithm[0], "OKP")
        fits = [k for k, raw in self._keys
                if (kid is None or raw.get("kid") == kid) and raw.get("kty") == kty
                and raw.get("alg") in (None, algorithm)]
        if not fits:
            if kid is not None:
                self._ask_for(kid)
            raise InvalidToken(f"no key in the JWKS from {self.url} for a token with kid "
                               f"{kid!r} and alg {algorithm}")
        return fits

    def _ask_for(self, kid: str) -> None:
        now = time.monotonic()
        kid = kid[:1000]  # Kafka's MISSING_KEY_ID_MAX_KEY_LENGTH
        if now - self._missing.get(kid, -MISSING_KID_INTERVAL) < MISSING_KID_INTERVAL:
            return
        self._missing[kid] = now
        while len(self._missing) > MISSING_KID_MAX:
            self._missing.pop(next(iter(self._missing)))
        self._expedite = True
        self.refresh_in_background()


class JwtValidator:
    """Kafka's broker-side JWT checks (see the module docstring) against ``keys``."""

    def __init__(self, settings: OAuthSettings, keys: JwksKeys) -> None:
        self.settings = settings
        self.keys = keys

    def validate(self, token: str) -> BearerToken:
        s = self.settings
        if token.count(".") != 2:
            raise InvalidToken("Malformed JWT provided; expected three sections (header, "
                               "payload, and signature)")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"cannot read the JWT header: {exc}") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise InvalidToken(f"JWT algorithm {algorithm!r} is not accepted (one of "
                               f"{', '.join(sorted(ALGORITHMS))})")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("JWT kid header is not a string")
        claims: dict[str, Any] | None = None
        error: Exception | None = None
        for key in self.keys.candidates(kid, algorithm):
            try:
                claims = jwt.decode(
                    token, key.key, algorithms=[algorithm],
                    audience=list(s.audience) or None, issuer=s.issuer or None,
                    leeway=s.clock_skew_s,
                    options={"require": ["exp", "iat"], "verify_aud": True,
                             "verify_iss": bool(s.issuer), "verify_sub": False,
                             "verify_jti": False})
                break
            except jwt.InvalidSignatureError as exc:
                error = exc  # another key of the same kid/type may fit
            except jwt.PyJWTError as exc:
                raise InvalidToken(f"Could not validate the access token: {exc}") from None
        if claims is None:
            raise InvalidToken(f"Could not validate the access token: {error}")
        sub = claims.get(s.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise InvalidToken(f"{s.sub_claim} value must be a non-blank string")
        exp, iat = claims["exp"], claims["iat"]
        if exp < 0 or iat < 0:
            raise InvalidToken("exp and iat must be non-negative")
        raw_scope = claims.get(s.scope_claim)
        scopes = ([raw_scope] if isinstance(raw_scope, str)
                  else raw_scope if isinstance(raw_scope, list) else [])
        if not all(isinstance(x, str) and x.strip() for x in scopes):
            raise InvalidToken(f"{s.scope_claim} values must be non-blank strings")
        if len({x.strip() for x in scopes}) != len(scopes):
            raise InvalidToken(f"{s.scope_claim} value must not contain duplicates")
        return BearerToken(token, sub.strip(), frozenset(x.strip() for x in scopes),
                           int(exp * 1000), int(iat * 1000), claims)


def _usable_keys(jwks: Any) -> list[tuple[PyJWK, dict[str, Any]]]:
    """The signature keys of a JWKS document, each with its JSON (kid, kty, alg); keys
    PyJWT cannot use (unknown kty, a missing parameter) are left out, as jose4j does."""
    if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
        raise ValueError("not a JWKS (a JSON object with a 'keys' list)")
    out = []
    for raw in jwks["keys"]:
        if not isinstance(raw, dict) or raw.get("use", "sig") != "sig":
            continue
        try:
            out.append((PyJWK(raw), raw))
        except jwt.PyJWTError as exc:
            log.info("OAUTHBEARER: JWKS key %r left out: %s", raw.get("kid"), exc)
    if not out:
        raise ValueError("the JWKS has no usable signature key")
    return out


_VALIDATORS: dict[OAuthSettings, JwtValidator] = {}
_VALIDATORS_LOCK = threading.Lock()


def validator_for(settings: OAuthSettings) -> JwtValidator:
    """The validator (and its key cache) for these settings, made once per process:
    listeners with the same settings share one JWKS cache."""
    with _VALIDATORS_LOCK:
        validator = _VALIDATORS.get(settings)
        if validator is None:
            context = None
            if settings.jwks_truststore or not settings.jwks_check_hostname:
                context = ssl.create_default_context(cafile=settings.jwks_truststore or None)
                context.check_hostname = settings.jwks_check_hostname
            validator = JwtValidator(settings, JwksKeys(settings.jwks_url, settings.refresh_ms,
                                                        ssl_context=context))
            _VALIDATORS[settings] = validator
        return validator


class OAuthBearerAuthenticator:
    """The server side of one OAUTHBEARER exchange (Kafka's ``OAuthBearerSaslServer``).

    ``validator`` None: no ``sasl.oauthbearer.jwks.endpoint.url`` - every token is refused
    (Kafka would fall back to its unsecured, unsigned-token validator; that is not
    offered). After success ``token`` is the validated token and
    ``credential_expires_at_ms`` its expiry, which bounds the session as in Kafka."""

    mechanism = OAUTHBEARER

    def __init__(self, validator: JwtValidator | None) -> None:
        self._validator = validator
        self._error: InvalidToken | None = None
        self.token: BearerToken | None = None
        self.extensions: dict[str, str] = {}

    @property
    def credential_expires_at_ms(self) -> int | None:
        return None if self.token is None else self.token.expires_at_ms

    async def ready(self) -> None:
        """Have the keys before the tokens come (fetches off the event loop)."""
        if self._validator is not None:
            await self._validator.keys.ensure()

    def step(self, message: bytes) -> tuple[bytes, str | None]:
        if message == b"\x01" and self._error is not None:
            # The client acknowledges our error: the exchange fails (RFC 7628 3.2.3).
            raise AuthenticationFailed(INVALID_TOKEN) from self._error
        self._error = None
        if self.token is not None:
            raise AuthenticationFailed(FAILED) from ValueError(
                "unexpected SASL token after the OAUTHBEARER exchange completed")
        try:
            value, authzid, extensions = parse_initial_response(message)
        except ValueError as exc:
            raise AuthenticationFailed(FAILED) from exc
        try:
            if self._validator is None:
                raise InvalidToken("sasl.oauthbearer.jwks.endpoint.url is not set: no "
                                   "token can be validated")
            token = self._validator.validate(value)
        except InvalidToken as exc:
            self._error = exc
            return INVALID_TOKEN.encode(), None
        if authzid and authzid != token.principal:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({token.principal})")
        self.token = token
        self.extensions = extensions  # Kafka's default handler accepts every extension
        return b"", token.principal
