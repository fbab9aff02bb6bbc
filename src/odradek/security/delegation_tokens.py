"""Delegation tokens (KIP-48): the rules, with no I/O.

A token is a random id and an HMAC-SHA512 of that id keyed by the cluster's
``delegation.token.secret.key``; a client that holds both logs in with SCRAM (the id as
user name, the base64 HMAC as password, ``tokenauth=true``) as the token's owner, until
the token expires. Only its information (``TokenInfo``) is stored; every broker
recomputes the HMAC from the shared secret, as Kafka's do.

The decisions are Kafka 4.4's (its controller's DelegationTokenControlManager and the
broker's DelegationTokenManager.filterToken):

- create: the lifetime is ``delegation.token.max.lifetime.ms``, or less if asked; the
  token expires ``delegation.token.expiry.time.ms`` after issue (not past its maximum);
- renew (its owner or a renewer, before it expires): the expiry moves to now + the
  renew period asked (at most the expiry time setting), never past the maximum;
- expire (its owner or a renewer): a negative period removes it now; otherwise its
  expiry becomes now + the period (not past the maximum) — refused if it has expired;
- describe: owners and renewers see their tokens; others need DESCRIBE on the token or
  DESCRIBE_TOKENS on its owner; an owner filter keeps the tokens those principals own or
  renew.
"""

from __future__ import annotations

import base64
import hmac
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

# Kafka's error codes for the outcomes (kio's ErrorCode values; this layer has no kio).
NONE = 0
DELEGATION_TOKEN_NOT_FOUND = 62
DELEGATION_TOKEN_OWNER_MISMATCH = 63
DELEGATION_TOKEN_EXPIRED = 66
INVALID_PRINCIPAL_TYPE = 67

USER_TYPE = "User"


def token_hmac(secret: str, token_id: str) -> bytes:
    """The token's HMAC (its password): HMAC-SHA512 of the id keyed by the secret."""
    return hmac.digest(secret.encode(), token_id.encode(), "sha512")


def new_token_id() -> str:
    """A random id as Kafka writes one (its Uuid: 16 random bytes in URL-safe base64,
    never starting with '-', so that it cannot be taken for a command-line option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def hmac_text(mac: bytes) -> str:
    """The HMAC as a client types it (``sasl.jaas.config``'s password): base64."""
    return base64.b64encode(mac).decode()


@dataclass(frozen=True, slots=True)
class TokenInfo:
    token_id: str
    owner: str  # a principal, "User:alice"
    requester: str  # who created it (KIP-373: may differ from the owner)
    renewers: tuple[str, ...]
    issued_ms: int
    expiry_ms: int
    max_ms: int

    def owner_or_renewer(self, principal: str) -> bool:
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        return self.max_ms < now_ms or self.expiry_ms < now_ms

    def to_json(self) -> dict[str, Any]:
        return {"owner": self.owner, "requester": self.requester,
                "renewers": list(self.renewers), "issued_ms": self.issued_ms,
                "expiry_ms": self.expiry_ms, "max_ms": self.max_ms}

    @classmethod
    def from_json(cls, token_id: str, data: dict[str, Any]) -> TokenInfo:
        return cls(token_id, data["owner"], data["requester"], tuple(data["renewers"]),
                   int(data["issued_ms"]), int(data["expiry_ms"]), int(data["max_ms"]))


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """``delegation.token.max.lifetime.ms`` and ``delegation.token.expiry.time.ms``."""

    max_lifetime_ms: int
    expiry_time_ms: int


def principal_type(principal: str) -> str:
    return principal.partition(":")[0]


def create(owner: str, requester: str, renewers: Sequence[str], max_lifetime_ms: int,
           now_ms: int, lifetimes: Lifetimes) -> tuple[int, TokenInfo | None]:
    """(error, the new token): renewers must be users (INVALID_PRINCIPAL_TYPE)."""
    if any(principal_type(r) != USER_TYPE for r in renewers):
        return INVALID_PRINCIPAL_TYPE, None
    lifetime = lifetimes.max_lifetime_ms
    if max_lifetime_ms > 0:
        lifetime = min(lifetime, max_lifetime_ms)
    max_ms = now_ms + lifetime
    expiry_ms = min(max_ms, now_ms + lifetimes.expiry_time_ms)
    return NONE, TokenInfo(new_token_id(), owner, requester, tuple(renewers), now_ms,
                           expiry_ms, max_ms)


def renew(token: TokenInfo | None, principal: str, renew_period_ms: int, now_ms: int,
          lifetimes: Lifetimes) -> tuple[int, TokenInfo | None]:
    """(error, the renewed token)."""
    if token is None:
        return DELEGATION_TOKEN_NOT_FOUND, None
    if token.expired(now_ms):
        return DELEGATION_TOKEN_EXPIRED, None
    if not token.owner_or_renewer(principal):
        return DELEGATION_TOKEN_OWNER_MISMATCH, None
    period = lifetimes.expiry_time_ms
    if renew_period_ms > 0:
        period = min(period, renew_period_ms)
    return NONE, replace(token, expiry_ms=min(token.max_ms, now_ms + period))


def expire(token: TokenInfo | None, principal: str, expiry_period_ms: int, now_ms: int
           ) -> tuple[int, TokenInfo | None, int]:
    """(error, the token as it stays - None: removed -, the expiry to answer)."""
    if token is None:
        return DELEGATION_TOKEN_NOT_FOUND, None, -1
    if not token.owner_or_renewer(principal):
        return DELEGATION_TOKEN_OWNER_MISMATCH, None, -1
    if expiry_period_ms < 0:
        return NONE, None, now_ms
    if token.expired(now_ms):
        return DELEGATION_TOKEN_EXPIRED, None, -1
    expiry_ms = min(token.max_ms, now_ms + expiry_period_ms)
    return NONE, replace(token, expiry_ms=expiry_ms), expiry_ms


def visible(token: TokenInfo, requester: str, owners: Sequence[str] | None,
            may_describe_token: Callable[[str], bool],
            may_describe_owner: Callable[[str], bool]) -> bool:
    """Whether DescribeDelegationToken shows ``token`` to ``requester`` (``owners``:
    the request's filter; None: every owner)."""
    if owners is not None and not any(token.owner_or_renewer(o) for o in owners):
        return False
    return (token.owner_or_renewer(requester) or may_describe_token(token.token_id)
            or may_describe_owner(token.owner))
