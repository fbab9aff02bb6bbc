"""Where the broker keeps its security state — ACLs, SCRAM credentials, client quotas: one
JSON document each, read whole and written whole.

- On a single node the document is a file in the data directory, written atomically
  (temporary file, fsync, rename) on every change.
- In a cluster it is a znode of the cluster's ZooKeeper (``/odradek/acls``, ...): every
  broker watches it and applies a change as soon as ZooKeeper reports it, so an ACL,
  user or quota made through any broker is in force on all of them. A change is a
  read-modify-write conditional on the version read (retried when another broker wrote
  in between), and in force on the broker that made it before it answers.

Departure from Kafka's ZooKeeper layout (a znode per user, client and resource, plus
change notifications): one znode per kind keeps the change atomic and the code small;
its limit is ZooKeeper's ``jute.maxbuffer`` (1 MiB by default), some thousands of ACLs
or users, which is beyond what this broker targets.

``Document.value`` is the current content (a dict); ``on_change`` (set by the owner) is
called with it after each change, local or from another broker.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.storage.checkpoint import write_atomically

if TYPE_CHECKING:
    from odradek.server.cluster.store import CoordinationStore, Watch

log = logging.getLogger(__name__)

Content = dict[str, Any]
Change = Callable[[Content], Content]

DOCUMENTS_PATH = "/odradek"  # the znodes' parent in a cluster


class DocumentError(Exception):
    """The change could not be saved (the cause is in the message); nothing changed."""


class Document(abc.ABC):
    """One document; see the module docstring. Subclasses store it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: Content = {}
        self.on_change: Callable[[Content], None] | None = None

    async def start(self) -> None:  # noqa: B027 - a file document has nothing to start
        """Load the current content (before the broker serves)."""

    def stop(self) -> None:  # noqa: B027 - nor anything to stop
        """Stop following changes."""

    @abc.abstractmethod
    async def update(self, change: Change) -> Content:
        """Apply ``change`` (a function from the current content to the new one; it may
        raise to refuse) and save; returns the new content, already in force here."""

    def _changed(self, value: Content) -> None:
        """Put ``value`` in force; if the owner cannot load it, the old one stays."""
        old, self.value = self.value, value
        if self.on_change is not None:
            try:
                self.on_change(value)
            except BaseException:
                self.value = old
                raise


class FileDocument(Document):
    """A document in ``<data dir>/<name>.json``, loaded when made."""

    def __init__(self, data_dir: str, name: str, *, mode: int = 0o644) -> None:
        super().__init__(name)
        self.path = os.path.join(data_dir, f"{name}.json")
        self.mode = mode
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self.value = json.load(f)

    async def update(self, change: Change) -> Content:
        new = change(json.loads(json.dumps(self.value)))  # a copy the change may edit
        try:
            write_atomically(self.path, json.dumps(new, indent=1).encode(), mode=self.mode)
        except OSError as exc:
            raise DocumentError(f"cannot write {self.path}: {exc}") from None
        self._changed(new)
        return new


class StoreDocument(Document):
    """A document in the znode ``/odradek/<name>`` of the cluster's coordination store."""

    def __init__(self, store: CoordinationStore, name: str) -> None:
        super().__init__(name)
        self.store = store
        self.path = f"{DOCUMENTS_PATH}/{name}"
        self._watch: Watch | None = None
        self._loaded: asyncio.Event | None = None

    async def start(self, timeout_s: float = 30.0) -> None:
        self._loaded = asyncio.Event()
        self._watch = self.store.watch_data(self.path, self._on_data)
        async with asyncio.timeout(timeout_s):
            await self._loaded.wait()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _on_data(self, data: bytes | None, _version: int) -> None:
        # The znode is anyone's to write (an operator's zkCli, another program): content
        # this broker cannot load is logged once and ignored, the last good content stays
        # in force, and the watch goes on (a later good write is applied).
        try:
            value = self._readable(data or b"")
            if value != self.value:
                self._changed(value)
        except DocumentError as exc:
            log.error("ignoring it: %s (the content before it stays in force)", exc)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.error("ignoring %s: its content cannot be loaded (%s: %s); the content "
                      "before it stays in force", self.path, type(exc).__name__, exc)
        finally:
            if self._loaded is not None:
                self._loaded.set()

    def _readable(self, data: bytes) -> Content:
        """The stored content for a change to start from; DocumentError if the znode
        holds something else than a JSON object (written by someone else than a broker):
        the change is refused rather than built on it."""
        try:
            value = json.loads(data) if data else {}
        except ValueError as exc:
            raise DocumentError(f"{self.path} holds content that is not JSON ({exc}); "
                                "fix or delete the znode") from None
        if not isinstance(value, dict):
            raise DocumentError(f"{self.path} holds a JSON {type(value).__name__}, "
                                "not an object; fix or delete the znode")
        return value

    async def update(self, change: Change) -> Content:
        from odradek.server.cluster.store import (
            BadVersionError,
            NodeExistsError,
            NoNodeError,
            StoreError,
        )

        while True:
            try:
                try:
                    data, version = await self.store.get(self.path)
                except NoNodeError:
                    data, version = b"", -1
                new = change(self._readable(data))
                raw = json.dumps(new, separators=(",", ":"), sort_keys=True).encode()
                if version < 0:
                    await self.store.ensure_path(DOCUMENTS_PATH)
                    await self.store.create(self.path, raw)
                else:
                    await self.store.set(self.path, raw, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker wrote in between: read again
            except StoreError as exc:
                raise DocumentError(f"ZooKeeper: {exc}") from None
            self._changed(new)
            return new
