"""The broker's SCRAM credentials (KIP-554): per user and mechanism, the salted and hashed
form only (``security.scram.ScramCredential``), kept in the ``scram-credentials``
document (server.security.documents: ``scram-credentials.json`` in the data directory, or the
cluster's znode, so a user made through one broker logs in on all). What
AlterUserScramCredentials, DescribeUserScramCredentials, ``odradek users`` and SCRAM
logins read and write.
"""

from __future__ import annotations

from typing import Any

from odradek.security.scram import ScramCredential
from odradek.server.security.documents import Document

DOCUMENT = "scram-credentials"
FILE_MODE = 0o600  # hashes only, but still nobody else's business


class CredentialStore:
    def __init__(self, document: Document) -> None:
        self.document = document
        self._users: dict[str, dict[str, ScramCredential]] = {}
        document.on_change = self._load
        self._load(document.value)

    def _load(self, value: dict[str, Any]) -> None:
        self._users = {user: {m: ScramCredential.from_text(m, text)
                              for m, text in mechanisms.items()}
                       for user, mechanisms in value.get("users", {}).items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(m) for u, m in self._users.items()}

    async def apply(self, upserts: list[tuple[str, ScramCredential]],
                    deletions: list[tuple[str, str]]) -> None:
        """Delete (user, mechanism) pairs and upsert credentials, in one save."""
        if not upserts and not deletions:
            return

        def change(value: dict[str, Any]) -> dict[str, Any]:
            users: dict[str, dict[str, str]] = value.get("users", {})
            for user, mechanism in deletions:
                users.get(user, {}).pop(mechanism, None)
                if not users.get(user, True):
                    del users[user]
            for user, credential in upserts:
                users.setdefault(user, {})[credential.mechanism] = credential.to_text()
            return {"users": {u: dict(sorted(ms.items())) for u, ms in sorted(users.items())}}

        await self.document.update(change)
