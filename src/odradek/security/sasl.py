"""The server side of SASL mechanisms, one exchange at a time, with no I/O: PLAIN
(RFC 4616, users from the listener's JAAS line, Kafka's ``user_NAME="password"``
entries) and SCRAM-SHA-256/512 (``scram.ScramExchange`` over stored credentials).

An authenticator takes the client's tokens in order (``step``) and answers each with the
server's token; once it returns a principal the client is authenticated. A failure is
``AuthenticationFailed`` whose message is what the client is told (Kafka's wording; it
never says whether the user exists).
"""

from __future__ import annotations

import functools
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

from odradek.security.scram import AuthenticationFailed, ScramCredential, ScramExchange

PLAIN = "PLAIN"
# Kafka's messages for a failed login (SaslAuthenticate's error_message).
PLAIN_FAILED = "Authentication failed: Invalid username or password"


def scram_failed(mechanism: str) -> str:
    return ("Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module class, options) of one JAAS entry as Kafka's
    ``sasl.jaas.config`` takes it: ``<class> required key="value" ...;``."""
    text = text.strip()
    match = re.match(r"([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if match is None:
        raise ValueError("a JAAS line starts with a login module class and a flag "
                         "(e.g. 'org.apache.kafka.common.security.plain.PlainLoginModule "
                         "required')")
    options: dict[str, str] = {}
    rest = text[match.end():]
    while rest.strip() not in ("", ";"):
        m = _JAAS_OPTION.match(rest)
        if m is None:
            raise ValueError(f"cannot read the JAAS options from {rest.strip()[:40]!r}")
        value = m.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[m.group(1)] = value
        rest = rest[m.end():]
    return match.group(1), options


@functools.lru_cache(maxsize=16)
def plain_users(jaas: str) -> dict[str, str]:
    """The ``user_NAME="password"`` entries of a PlainLoginModule JAAS line (parsed once
    per line, not per login; callers must not change the dict)."""
    _, options = parse_jaas(jaas)
    return {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}


class PlainAuthenticator:
    """PLAIN: one client token ``authzid NUL authcid NUL password``, no server token."""

    mechanism = PLAIN

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(PLAIN_FAILED) from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        expected = self._users.get(user)
        # compare_digest: the time taken does not tell how much of the password matched.
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed(PLAIN_FAILED)
        return b"", user


@dataclass(frozen=True, slots=True)
class TokenLogin:
    """What a delegation token logs in as (KIP-48): its SCRAM credential for the
    mechanism, its owner's user name (the session's principal) and when it expires."""

    credential: ScramCredential
    owner: str
    expires_at_ms: int


class ScramAuthenticator:
    """SCRAM: client-first -> server-first, client-final -> server-final (done).

    ``tokens(token_id)`` finds a live delegation token for a client that logs in with
    one (Kafka's ``tokenauth=true`` extension); the session is then its owner's, marked
    ``token_authenticated`` (such sessions may not manage tokens) and expiring with the
    token (``credential_expires_at_ms``, as an OAUTHBEARER token's)."""

    def __init__(self, mechanism: str,
                 lookup: Callable[[str], ScramCredential | None],
                 tokens: Callable[[str], TokenLogin | None] | None = None) -> None:
        self.mechanism = mechanism
        self.token_authenticated = False
        self.credential_expires_at_ms: int | None = None
        self._token: TokenLogin | None = None

        def token_credential(token_id: str) -> ScramCredential | None:
            self._token = tokens(token_id) if tokens is not None else None
            return self._token.credential if self._token is not None else None

        self._exchange = ScramExchange(mechanism, lookup, token_credential)
        self._step = 0

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        self._step += 1
        try:
            if self._step == 1:
                return self._exchange.first(token), None
            if self._step == 2:
                answer = self._exchange.final(token)
                assert self._exchange.user is not None
                if self._token is not None:
                    self.token_authenticated = True
                    self.credential_expires_at_ms = self._token.expires_at_ms
                    return answer, self._token.owner
                return answer, self._exchange.user
        except AuthenticationFailed as exc:
            # The client is told Kafka's words only; the cause stays for the broker's log.
            raise AuthenticationFailed(scram_failed(self.mechanism)) from exc
        raise AuthenticationFailed(f"Unexpected SASL token after the {self.mechanism} "
                                   "exchange completed")

