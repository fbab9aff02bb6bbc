"""SCRAM-SHA-256 / SCRAM-SHA-512 credentials and the server side of one SCRAM exchange
(RFC 5802, RFC 7677; Kafka's KIP-84 and KIP-554), on the ``scramp`` library.

A credential is what Kafka stores for a user and mechanism: a salt, StoredKey, ServerKey
and the iteration count - never the password. It is made from a password
(``odradek users add``) or, as AlterUserScramCredentials sends it, from the salted
password a client derived (KIP-554: the password never crosses the wire). Its text form
is Kafka's (``salt=...,stored_key=...,server_key=...,iterations=4096``, base64), as
Kafka keeps it in ZooKeeper's ``/config/users/<name>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

# Kafka's ScramMechanism: the mechanisms, their hash, and the iteration bounds it accepts.
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # KIP-554's enum
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class AuthenticationFailed(Exception):
    """The exchange failed: SASL_AUTHENTICATION_FAILED, with this message."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's form: ``salt=B64,stored_key=B64,server_key=B64,iterations=N``."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, mechanism: str, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(","))
        return cls(mechanism, base64.b64decode(fields["salt"]),
                   base64.b64decode(fields["stored_key"]),
                   base64.b64decode(fields["server_key"]), int(fields["iterations"]))


def check_mechanism(mechanism: str, iterations: int) -> None:
    if mechanism not in MECHANISMS:
        raise ValueError(f"unsupported SCRAM mechanism {mechanism!r}; "
                         f"one of {', '.join(MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and "
                         f"{MAX_ITERATIONS} for {mechanism}, got {iterations}")


def from_password(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                  salt: bytes | None = None) -> ScramCredential:
    check_mechanism(mechanism, iterations)
    salt_, stored_key, server_key, i = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt or os.urandom(32))
    return ScramCredential(mechanism, salt_, stored_key, server_key, i)


def from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                         iterations: int) -> ScramCredential:
    """The credential of AlterUserScramCredentials' upsertion: RFC 5802's ClientKey /
    StoredKey / ServerKey from the SaltedPassword the client computed (scramp derives
    them from a password only)."""
    check_mechanism(mechanism, iterations)
    name = MECHANISMS[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", name)
    return ScramCredential(mechanism, salt, hashlib.new(name, client_key).digest(),
                           hmac.digest(salted_password, b"Server Key", name), iterations)


def split_extensions(client_first: str) -> tuple[str, dict[str, str]]:
    """(the client-first message without Kafka's SCRAM extensions, the extensions).

    Kafka's clients append extensions to the client-first message as ``,key=value``
    attributes after the nonce (``tokenauth=true`` for a delegation token, KIP-48);
    RFC 5802's attributes are one letter, and scramp refuses longer names."""
    header, sep, bare = client_first.partition(",")
    authzid, sep2, bare = bare.partition(",")
    attributes = bare.split(",")
    kept = [a for a in attributes if len(a.partition("=")[0]) == 1]
    extensions = dict(a.split("=", 1) for a in attributes
                      if len(a.partition("=")[0]) > 1 and "=" in a)
    return f"{header}{sep}{authzid}{sep2}{','.join(kept)}", extensions


class ScramExchange:
    """The server side of one SCRAM authentication: ``first`` takes the client-first
    message and returns the server-first, ``final`` takes the client-final and returns
    the server-final; either raises ``AuthenticationFailed``. ``lookup(user)`` returns
    the user's credential for this mechanism, or None; with ``tokenauth=true`` among
    Kafka's extensions the name is a delegation token's id and ``token_lookup(token_id)``
    gives the credential instead (None without it: refused)."""

    def __init__(self, mechanism: str,
                 lookup: Callable[[str], ScramCredential | None],
                 token_lookup: Callable[[str], ScramCredential | None] | None = None
                 ) -> None:
        self.mechanism = mechanism
        self.user: str | None = None
        self.extensions: dict[str, str] = {}
        self._unknown: str | None = None  # scramp wraps auth_info's exception

        def auth_info(user: str) -> tuple[bytes, bytes, bytes, int]:
            if self.token_auth:
                credential = token_lookup(user) if token_lookup is not None else None
            else:
                credential = lookup(user)
            if credential is None:
                self._unknown = f"unknown user {user!r}"
                raise AuthenticationFailed(self._unknown)
            self.user = user
            return (credential.salt, credential.stored_key, credential.server_key,
                    credential.iterations)

        self._server = ScramMechanism(mechanism).make_server(auth_info)

    @property
    def token_auth(self) -> bool:
        """Whether the client logs in with a delegation token (Kafka's ``tokenauth``
        extension, read as Java's Boolean.parseBoolean does)."""
        return self.extensions.get("tokenauth", "").lower() == "true"

    def first(self, client_first: bytes) -> bytes:
        try:
            text = client_first.decode()
            plain, self.extensions = split_extensions(text)
            self._server.set_client_first(plain)
            # The client's proof covers the message it sent, extensions included.
            self._server.client_first_bare = text.split(",", 2)[2]
            return self._server.get_server_first().encode()
        except (ScramException, UnicodeDecodeError, ValueError, KeyError,
                IndexError) as exc:
            raise AuthenticationFailed(self._unknown or str(exc)) from None

    def final(self, client_final: bytes) -> bytes:
        try:
            text = client_final.decode()
            # Kafka's ScramSaslServer accepts a final nonce that *ends with* the server's
            # (client nonce + server nonce); librdkafka before 2.1 sends the client nonce
            # twice in front of it, and Kafka brokers accept that. scramp wants equality,
            # so the nonce it checks against becomes the one sent when Kafka's rule holds
            # (the proof is computed over the message as sent either way).
            sent = next((a[2:] for a in text.split(",") if a.startswith("r=")), None)
            expected = getattr(self._server, "nonce", None)  # a scramp Nonce
            if sent and expected and sent != str(expected) and sent.endswith(str(expected)):
                self._server.nonce = type(expected)(sent)
            self._server.set_client_final(text)
            return self._server.get_server_final().encode()
        except (ScramException, UnicodeDecodeError, ValueError, KeyError) as exc:
            raise AuthenticationFailed(str(exc)) from None
