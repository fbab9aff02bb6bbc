"""The broker's SCRAM credentials (KIP-554): per user and mechanism, the salted and hashed
form only (``security.scram.ScramCredential``), kept in ``scram-credentials.json`` in the
data directory, written whole and atomically (temporary file, fsync, rename) on every
change, as the metadata store is. What AlterUserScramCredentials, DescribeUserScramCredentials,
``odradek users`` and SCRAM logins read and write.
"""

from __future__ import annotations

import json
import os

from odradek.security.scram import ScramCredential
from odradek.storage.checkpoint import write_atomically

CREDENTIALS_FILE = "scram-credentials.json"


class CredentialStore:
    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, CREDENTIALS_FILE)
        self._users: dict[str, dict[str, ScramCredential]] = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                stored = json.load(f)
            for user, mechanisms in stored.get("users", {}).items():
                self._users[user] = {m: ScramCredential.from_text(m, text)
                                     for m, text in mechanisms.items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(m) for u, m in self._users.items()}

    def apply(self, upserts: list[tuple[str, ScramCredential]],
              deletions: list[tuple[str, str]]) -> None:
        """Delete (user, mechanism) pairs and upsert credentials, then save once."""
        for user, mechanism in deletions:
            self._users.get(user, {}).pop(mechanism, None)
            if not self._users.get(user, True):
                del self._users[user]
        for user, credential in upserts:
            self._users.setdefault(user, {})[credential.mechanism] = credential
        self._save()

    def _save(self) -> None:
        data = {"users": {u: {m: c.to_text() for m, c in sorted(ms.items())}
                          for u, ms in sorted(self._users.items())}}
        # 0600: hashes only, but still nobody else's business.
        write_atomically(self.path, json.dumps(data, indent=1).encode(), mode=0o600)
