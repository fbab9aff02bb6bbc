"""The broker's delegation tokens (KIP-48): their information in the ``delegation-tokens``
document (server.security.documents: ``delegation-tokens.json`` in the data directory,
or the cluster's znode, so a token made through one broker logs in on all), the HMACs
recomputed from ``delegation.token.secret.key`` (every broker of a cluster must have the
same, as in Kafka), the SCRAM credentials a token logs in with, and the sweep that
removes expired tokens every ``delegation.token.expiry.check.interval.ms``.

The rules (lifetimes, who may renew, expire or see a token) are
``security.delegation_tokens``'; the Create/Renew/Expire/DescribeDelegationToken
handlers (server.handlers.delegation_tokens) apply them through this store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from odradek.security.delegation_tokens import Lifetimes, TokenInfo, hmac_text, token_hmac
from odradek.security.sasl import TokenLogin
from odradek.security.scram import MECHANISMS, ScramCredential, from_password
from odradek.server.security.documents import Document

log = logging.getLogger(__name__)

DOCUMENT = "delegation-tokens"
FILE_MODE = 0o600  # token ids and owners: whoever reads them can still not log in,
# but that is nobody else's business either


def now_ms() -> int:
    return int(time.time() * 1000)


class TokenStore:
    """Every live token; ``enabled`` only with a secret key (else the APIs answer
    DELEGATION_TOKEN_AUTH_DISABLED and no token logs in)."""

    def __init__(self, document: Document, secret: str, lifetimes: Lifetimes,
                 check_interval_ms: int) -> None:
        self.document = document
        self.secret = secret
        self.lifetimes = lifetimes
        self._check_interval_s = check_interval_ms / 1000
        self._tokens: dict[str, TokenInfo] = {}
        self._by_hmac: dict[bytes, str] = {}
        # Per token and mechanism, made at its first login: a salted hash of the HMAC
        # text (as Kafka's cache prepares one per mechanism), never stored.
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        self._sweeper: asyncio.Task[None] | None = None
        document.on_change = self._load
        self._load(document.value)

    @property
    def enabled(self) -> bool:
        return bool(self.secret)

    def _load(self, value: dict[str, Any]) -> None:
        self._tokens = {token_id: TokenInfo.from_json(token_id, data)
                        for token_id, data in value.get("tokens", {}).items()}
        self._by_hmac = ({self.hmac(t): t for t in self._tokens} if self.enabled else {})
        self._credentials = {k: c for k, c in self._credentials.items()
                             if k[0] in self._tokens}

    def hmac(self, token_id: str) -> bytes:
        return token_hmac(self.secret, token_id)

    def tokens(self) -> list[TokenInfo]:
        return list(self._tokens.values())

    def by_hmac(self, mac: bytes) -> TokenInfo | None:
        token_id = self._by_hmac.get(bytes(mac))
        return self._tokens.get(token_id) if token_id is not None else None

    def login(self, token_id: str, mechanism: str) -> TokenLogin | None:
        """What token ``token_id`` logs in as with SCRAM ``mechanism``: None when there
        is no such live token (expired ones are refused before the sweep removes
        them)."""
        token = self._tokens.get(token_id)
        if not self.enabled or token is None or token.expired(now_ms()):
            return None
        credential = self._credentials.get((token_id, mechanism))
        if credential is None and mechanism in MECHANISMS:
            credential = from_password(mechanism, hmac_text(self.hmac(token_id)))
            self._credentials[(token_id, mechanism)] = credential
        if credential is None:
            return None
        return TokenLogin(credential, token.owner.partition(":")[2], token.expiry_ms)

    async def put(self, token: TokenInfo) -> None:
        """Store a new or changed token (in force on this broker when it returns)."""
        def change(value: dict[str, Any]) -> dict[str, Any]:
            tokens = dict(value.get("tokens", {}))
            tokens[token.token_id] = token.to_json()
            return {"tokens": tokens}
        await self.document.update(change)

    async def remove(self, token_ids: list[str]) -> None:
        if not token_ids:
            return

        def change(value: dict[str, Any]) -> dict[str, Any]:
            tokens = {t: data for t, data in value.get("tokens", {}).items()
                      if t not in token_ids}
            return {"tokens": tokens}
        await self.document.update(change)

    # --- the expiry sweep ------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    async def sweep(self) -> list[str]:
        """Remove the tokens past their expiry or maximum; their ids."""
        now = now_ms()
        expired = [t.token_id for t in self._tokens.values() if t.expired(now)]
        for token_id in expired:
            log.info("delegation token %s of %s expired: removed", token_id,
                     self._tokens[token_id].owner)
        await self.remove(expired)
        return expired

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval_s)
            try:
                await self.sweep()
            except Exception:  # the next sweep tries again
                log.exception("the delegation token sweep failed")
