"""The coordination store: the interface the cluster keeps its shared state behind, and
an in-memory implementation of it.

Kafka's ZooKeeper-era design, as ZooKeeper shapes it: a tree of znodes, each with bytes
and a ``dataVersion`` (0 after create, +1 per set) that conditional writes name; ephemeral
znodes that live as long as the session that created them; sequence znodes; atomic
multi-operations; and watches. Every piece of cluster code talks to
``CoordinationStore``; ``odradek.server.cluster.zookeeper.ZooKeeperStore`` is the real thing and
``MemoryStore`` (here) stands in for it in tests, several brokers sharing one
``MemoryStore.Tree``. ``tests/server/test_store.py`` runs one contract against both.

The rules both keep:

- Everything is asynchronous and runs on the event loop that called ``start()``; every
  callback (watches, session changes) is called on that loop, one at a time.
- A watch reports *states*, not events. ZooKeeper's watches fire once and say only "this
  changed", so a watch reads the current state again after each one and reports it if it
  differs from the last it reported: two quick changes may be reported as one (the
  latest). Code must act on what the callback says now, never count calls.
- ``StoreUnavailableError`` means the outcome is unknown: the connection dropped (or the
  session ended, or the store was closed) with the request sent or not. A write that
  raised it may have happened; the caller reads back before retrying.
- Sessions: ``SUSPENDED`` is a lost connection (the session may still be alive: ephemeral
  nodes are still there, the store reconnects by itself), ``LOST`` is an expired session
  (its ephemeral nodes are gone; the store goes on with a new session and reports
  ``CONNECTED``). After a new session every watch reports its state again, changed or
  not, so code that re-registers itself (a broker's ephemeral znode) can hang that on
  either callback.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import itertools
import logging
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import ClassVar, Generic, Literal, TypeVar

log = logging.getLogger(__name__)


class StoreError(Exception):
    """Base of the store's errors. Its message starts with the znode's path (for a
    transaction, the path of the operation that failed)."""

    def at(self, path: str) -> bool:
        """Whether this error is about ``path`` (which operation of a transaction
        failed)."""
        message = str(self)
        return message == path or message.startswith(path + " ")


class NoNodeError(StoreError):
    """The znode (or, for a create, its parent) does not exist."""


class NodeExistsError(StoreError):
    """The znode to create exists already."""


class BadVersionError(StoreError):
    """A conditional write named a version the znode no longer has."""


class NotEmptyError(StoreError):
    """A znode with children cannot be deleted (without ``recursive``)."""


class StoreUnavailableError(StoreError):
    """No answer: connection lost, session expired, or the store closed. A write that
    raised this may or may not have happened."""


class SessionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost; the session (and its ephemeral nodes) may live
    LOST = "lost"  # the session expired: its ephemeral nodes are gone


@dataclass(frozen=True)
class Op:
    """One operation of ``multi``: build with ``Op.check``/``create``/``set``/``delete``."""

    kind: Literal["check", "create", "set", "delete"]
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False

    @classmethod
    def check(cls, path: str, version: int) -> Op:
        """Fails the multi unless ``path`` has ``version`` (-1: unless it exists)."""
        return cls("check", path, version=version)

    @classmethod
    def create(cls, path: str, data: bytes = b"", ephemeral: bool = False) -> Op:
        return cls("create", path, data=data, ephemeral=ephemeral)

    @classmethod
    def set(cls, path: str, data: bytes, version: int = -1) -> Op:
        return cls("set", path, data=data, version=version)

    @classmethod
    def delete(cls, path: str, version: int = -1) -> Op:
        return cls("delete", path, version=version)


class Watch(abc.ABC):
    """A subscription made by ``watch_data`` or ``watch_children``."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the watch; call it on the store's loop. Once it returns, the callback is
        not called again."""


DataCallback = Callable[[bytes | None, int], None]
ChildrenCallback = Callable[[list[str]], None]
SessionCallback = Callable[[SessionState], None]


class CoordinationStore(abc.ABC):
    """A ZooKeeper-like store. See the module docstring for the rules every
    implementation keeps."""

    @abc.abstractmethod
    async def start(self, timeout_s: float) -> None:
        """Connect and open a session; StoreUnavailableError if that takes longer than
        ``timeout_s``. The loop that calls this is the one every callback runs on."""

    @abc.abstractmethod
    async def close(self) -> None:
        """End the session (its ephemeral nodes go at once) and every watch. No callback
        is called after this returns, and operations raise StoreUnavailableError."""

    @property
    @abc.abstractmethod
    def session_id(self) -> int | None:
        """The current session's id (None before start and after close)."""

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, int]:
        """(data, version); NoNodeError."""

    @abc.abstractmethod
    async def exists(self, path: str) -> int | None:
        """The znode's version, or None if it does not exist."""

    @abc.abstractmethod
    async def get_children(self, path: str) -> list[str]:
        """The children's names, sorted; NoNodeError."""

    @abc.abstractmethod
    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        """Create a znode and return its path (with the sequence suffix, ten digits,
        when ``sequence``). NodeExistsError; NoNodeError if the parent is missing, unless
        ``makepath`` (missing parents are created, persistent)."""

    @abc.abstractmethod
    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents (persistent, empty) if missing."""

    @abc.abstractmethod
    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        """Replace the data if the version matches (-1: any); returns the new version.
        BadVersionError, NoNodeError."""

    @abc.abstractmethod
    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        """Delete a znode if the version matches (-1: any). NoNodeError, BadVersionError,
        NotEmptyError unless ``recursive`` (then its descendants go first; the version
        applies to ``path`` itself)."""

    @abc.abstractmethod
    async def multi(self, ops: list[Op]) -> None:
        """All of ``ops`` or none: raises the error of the first op that fails."""

    @abc.abstractmethod
    async def ephemeral_owner(self, path: str) -> int | None:
        """The session id that owns an ephemeral znode; None for a persistent one.
        NoNodeError."""

    @abc.abstractmethod
    def watch_data(self, path: str, callback: DataCallback) -> Watch:
        """Call ``callback(data, version)`` soon with the znode's state ((None, -1) if it
        does not exist: the znode need not exist), then after every change (create, set,
        delete), and again after each new session. Call on the store's loop, after
        ``start()``."""

    @abc.abstractmethod
    def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        """Call ``callback(sorted children)`` soon, then after every change of the
        children, and again after each new session. ``path`` is created (with its
        parents) if missing; if it is deleted later the callback gets [] and the watch
        goes on, reporting the children again if it comes back. Call on the store's loop,
        after ``start()``."""

    @abc.abstractmethod
    def on_session(self, callback: SessionCallback) -> None:
        """Call ``callback(state)`` at every session change after ``start()`` returns
        (the first connection is ``start()`` returning). An expiry is reported as LOST
        then CONNECTED (the new session), possibly after SUSPENDED."""


# --- the engine of both implementations' watches --------------------------------------

T = TypeVar("T")
_NOTHING: Hashable = object()

# A reading: (key, value). The value is delivered when the key differs from the last
# delivered one; the key holds what proves a change (ZooKeeper's mzxid / cversion), so a
# znode deleted and created again with the same data still counts as a change.
Reader = Callable[[bool], Awaitable[tuple[Hashable, T]]]


class RefreshingWatch(Watch, Generic[T]):
    """A watch as a task on the store's loop: read the state (which sets the watch
    again, as ZooKeeper's are one-shot), deliver it if it changed, wait to be poked.

    ``read(first)`` reads (``first`` is True until a reading succeeds: the children
    watch creates its path then). It raises StoreUnavailableError when there is no
    connection; the watch then waits for ``wait_available()`` and reads again. ``poke()``
    is called by the store (on the loop) when ZooKeeper fires the watch or the session
    changes; ``force`` asks for the next reading to be delivered even if unchanged (a
    new session)."""

    def __init__(self, path: str, read: Reader[T], deliver: Callable[[T], None],
                 wait_available: Callable[[], Awaitable[object]],
                 on_cancel: Callable[[RefreshingWatch[T]], None]) -> None:
        self.path = path
        self._read = read
        self._deliver = deliver
        self._wait_available = wait_available
        self._on_cancel = on_cancel
        self._poked = asyncio.Event()
        self._force = True  # the first reading is always delivered
        self._last = _NOTHING
        self.cancelled = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"watch {path}")

    def poke(self, *, force: bool = False) -> None:
        if self.cancelled:
            return
        self._force = self._force or force
        self._poked.set()

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self._task.cancel()
        # Also wake the task: on Python 3.11 asyncio.wait_for (inside a store request
        # the task may be awaiting) can swallow that cancellation when its answer
        # arrives in the same loop step, and the task would then wait for a poke that
        # never comes, unreferenced, until the garbage collector destroys it pending
        # ("Task was destroyed but it is pending!", seen with topics deleted while
        # their watches were reading). Set, the event lets the loop see ``cancelled``.
        self._poked.set()
        self._on_cancel(self)

    async def _run(self) -> None:
        first = True
        while not self.cancelled:
            self._poked.clear()  # before reading: a poke from now on means read again
            force, self._force = self._force, False
            try:
                key, value = await self._read(first)
            except StoreUnavailableError:
                self._force = self._force or force
                try:
                    await self._wait_available()
                except StoreUnavailableError:
                    return  # the store is closed
                # The state may flip back at once; do not spin on a flapping connection.
                await asyncio.sleep(0.02)
                continue
            except Exception:
                log.exception("watch on %s: reading failed; waiting for the next change",
                              self.path)
                self._force = self._force or force
                await self._poked.wait()
                continue
            first = False
            if (force or key != self._last) and not self.cancelled:
                self._last = key
                try:
                    self._deliver(value)
                except Exception:
                    log.exception("watch callback on %s failed", self.path)
            await self._poked.wait()


def call_session_callbacks(callbacks: Iterable[SessionCallback], state: SessionState) -> None:
    for callback in list(callbacks):
        try:
            callback(state)
        except Exception:
            log.exception("session callback failed (%s)", state.name)


def child_path(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


def parent_path(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


# --- in memory -------------------------------------------------------------------------


def _check_path(path: str) -> None:
    # The paths ZooKeeper accepts (kazoo raises ValueError for the rest, as this does).
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"path must start with '/': {path!r}")
    if path != "/" and (path.endswith("/") or "//" in path
                        or any(part in (".", "..") for part in path.split("/"))):
        raise ValueError(f"invalid path {path!r}")


class _Node:
    __slots__ = ("children", "cversion", "data", "mzxid", "owner", "version")

    def __init__(self, data: bytes, zxid: int, owner: int | None) -> None:
        self.data = data
        self.version = 0
        self.cversion = 0  # +1 per child created or deleted; names sequence nodes
        self.mzxid = zxid  # the transaction that last wrote it
        self.owner = owner  # session id of an ephemeral node
        self.children: set[str] = set()

    def copy(self) -> _Node:
        node = _Node(self.data, self.mzxid, self.owner)
        node.version = self.version
        node.cversion = self.cversion
        node.children = set(self.children)
        return node


class _Txn:
    """The events and undo log of one transaction (a single write or a multi)."""

    def __init__(self, nodes: dict[str, _Node], zxid: int) -> None:
        self.nodes = nodes
        self.zxid = zxid
        self.events: set[tuple[str, str]] = set()  # ("data" | "children", path)
        self._saved: dict[str, _Node | None] = {}

    def save(self, path: str) -> None:
        """Keep a node's state before its first change, to restore if the multi fails."""
        if path not in self._saved:
            node = self.nodes.get(path)
            self._saved[path] = node.copy() if node is not None else None

    def undo(self) -> None:
        for path, node in self._saved.items():
            if node is None:
                self.nodes.pop(path, None)
            else:
                self.nodes[path] = node
        self.events.clear()


class MemoryTree:
    """The znodes several ``MemoryStore``s share (a ZooKeeper ensemble's data). Any
    thread may call it; one lock guards it all. Writes tell every attached store which
    watches to poke, on that store's own loop."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, None)}
        self._zxid = 0
        self._session_ids = itertools.count(0x1_0000_0001)
        self._stores: set[MemoryStore] = set()

    # sessions and stores

    def new_session(self) -> int:
        with self.lock:
            return next(self._session_ids)

    def attach(self, store: MemoryStore) -> None:
        with self.lock:
            self._stores.add(store)

    def detach(self, store: MemoryStore) -> None:
        with self.lock:
            self._stores.discard(store)

    def end_session(self, session_id: int) -> None:
        """The session is over: its ephemeral nodes go."""
        with self.lock:
            txn = self._begin()
            for path in sorted((p for p, n in self._nodes.items() if n.owner == session_id),
                               reverse=True):
                self._delete(txn, path, -1)
            self._commit(txn)

    # reads

    def read(self, path: str) -> _Node:
        """The node itself (hold ``lock`` while looking at it); NoNodeError."""
        _check_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    def find(self, path: str) -> _Node | None:
        _check_path(path)
        return self._nodes.get(path)

    # writes

    def create(self, path: str, data: bytes, owner: int | None, *, sequence: bool = False,
               makepath: bool = False) -> str:
        with self.lock:
            txn = self._begin()
            try:
                if makepath:
                    self._ensure(txn, parent_path(path))
                created = self._create(txn, path, data, owner, sequence)
            except BaseException:
                txn.undo()
                raise
            self._commit(txn)
            return created

    def ensure_path(self, path: str) -> None:
        with self.lock:
            txn = self._begin()
            self._ensure(txn, path)
            self._commit(txn)

    def set(self, path: str, data: bytes, version: int) -> int:
        with self.lock:
            txn = self._begin()
            new_version = self._set(txn, path, data, version)
            self._commit(txn)
            return new_version

    def delete(self, path: str, version: int, recursive: bool) -> None:
        with self.lock:
            txn = self._begin()
            node = self.read(path)
            if version != -1 and node.version != version:
                raise BadVersionError(path)
            if recursive:
                below = [p for p in self._nodes if p.startswith(path.rstrip("/") + "/")]
                for descendant in sorted(below, key=lambda p: p.count("/"), reverse=True):
                    self._delete(txn, descendant, -1)
            self._delete(txn, path, version)
            self._commit(txn)

    def multi(self, ops: list[Op], owner: int) -> None:
        with self.lock:
            txn = self._begin()
            try:
                for op in ops:
                    if op.kind == "check":
                        node = self.read(op.path)
                        if op.version != -1 and node.version != op.version:
                            raise BadVersionError(op.path)
                    elif op.kind == "create":
                        self._create(txn, op.path, op.data, owner if op.ephemeral else None,
                                     False)
                    elif op.kind == "set":
                        self._set(txn, op.path, op.data, op.version)
                    elif op.kind == "delete":
                        self._delete(txn, op.path, op.version)
                    else:
                        raise ValueError(f"unknown op {op.kind!r}")
            except BaseException:
                txn.undo()
                raise
            self._commit(txn)

    def _begin(self) -> _Txn:
        self._zxid += 1
        return _Txn(self._nodes, self._zxid)

    def _commit(self, txn: _Txn) -> None:
        if txn.events:
            for store in list(self._stores):
                store._tree_changed(frozenset(txn.events))

    def _create(self, txn: _Txn, path: str, data: bytes, owner: int | None,
                sequence: bool) -> str:
        _check_path(path)
        if path == "/":
            raise NodeExistsError(path)
        parent_name = parent_path(path)
        parent = self._nodes.get(parent_name)
        if parent is None:
            raise NoNodeError(parent_name)
        if parent.owner is not None:
            # ZooKeeper's NoChildrenForEphemerals.
            raise StoreError(f"{parent_name} is ephemeral: it cannot have children")
        if sequence:
            path = f"{path}{parent.cversion:010d}"  # ZooKeeper numbers from the parent
        if path in self._nodes:
            raise NodeExistsError(path)
        txn.save(parent_name)
        txn.save(path)
        parent.children.add(path.rsplit("/", 1)[1])
        parent.cversion += 1
        self._nodes[path] = _Node(bytes(data), txn.zxid, owner)
        txn.events.update({("data", path), ("children", parent_name)})
        return path

    def _ensure(self, txn: _Txn, path: str) -> None:
        _check_path(path)
        missing = []
        while path not in self._nodes:
            missing.append(path)
            path = parent_path(path)
        for name in reversed(missing):
            self._create(txn, name, b"", None, False)

    def _set(self, txn: _Txn, path: str, data: bytes, version: int) -> int:
        node = self.read(path)
        if version != -1 and node.version != version:
            raise BadVersionError(path)
        txn.save(path)
        node = self._nodes[path]
        node.data, node.version, node.mzxid = bytes(data), node.version + 1, txn.zxid
        txn.events.add(("data", path))
        return node.version

    def _delete(self, txn: _Txn, path: str, version: int) -> None:
        node = self.read(path)
        if path == "/":
            raise StoreError("the root cannot be deleted")
        if version != -1 and node.version != version:
            raise BadVersionError(path)
        if node.children:
            raise NotEmptyError(path)
        parent_name = parent_path(path)
        txn.save(path)
        txn.save(parent_name)
        del self._nodes[path]
        parent = self._nodes[parent_name]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.cversion += 1
        # As ZooKeeper: a deletion fires the node's data and child watches and the
        # parent's child watches.
        txn.events.update({("data", path), ("children", path), ("children", parent_name)})


class MemoryStore(CoordinationStore):
    """The store in memory, for tests. One instance is one ZooKeeper client (one broker):
    its own session and loop; instances built on the same ``MemoryStore.Tree`` see the
    same znodes.

    For tests of failures (call these on the store's loop):
    ``disconnect()``/``reconnect()`` (SUSPENDED / CONNECTED; operations raise
    StoreUnavailableError meanwhile, ephemeral nodes stay, watches report what changed
    once back), ``expire_session()`` (the ephemeral nodes go at once; LOST then CONNECTED
    with a new session, at once or, if disconnected, at ``reconnect()``, as a ZooKeeper
    client learns of its expiry only when it reaches the server again).
    """

    Tree: ClassVar[type[MemoryTree]] = MemoryTree

    def __init__(self, tree: MemoryTree | None = None) -> None:
        self.tree = tree if tree is not None else MemoryTree()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: int | None = None
        self._connected = False
        self._closed = False
        self._expired_unseen = False  # expired while disconnected: LOST at reconnect
        self._available = asyncio.Event()
        self._watches: dict[tuple[str, str], list[RefreshingWatch]] = defaultdict(list)
        self._session_callbacks: list[SessionCallback] = []

    # lifecycle

    async def start(self, timeout_s: float) -> None:
        if self._closed:
            raise StoreUnavailableError("store closed")
        if self._loop is not None:
            raise RuntimeError("store already started")
        self._loop = asyncio.get_running_loop()
        self._session = self.tree.new_session()
        self._connected = True
        self._available.set()
        self.tree.attach(self)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._connected = False
        self._available.clear()
        for watches in list(self._watches.values()):
            for watch in list(watches):
                watch.cancel()
        self.tree.detach(self)
        if self._session is not None:
            self.tree.end_session(self._session)
        self._session = None

    @property
    def session_id(self) -> int | None:
        return self._session

    # failures, for tests

    def disconnect(self) -> None:
        if not self._connected:
            return
        self._connected = False
        self._available.clear()
        self._report(SessionState.SUSPENDED)

    def reconnect(self) -> None:
        if self._connected or self._closed or self._loop is None:
            return
        self._connected = True
        self._available.set()
        if self._expired_unseen:
            self._expired_unseen = False
            self._new_session()
        else:
            self._report(SessionState.CONNECTED)
            self._poke_all(force=False)

    def expire_session(self) -> None:
        if self._closed or self._session is None:
            return
        self.tree.end_session(self._session)
        if self._connected:
            self._new_session()
        else:
            self._expired_unseen = True

    def _new_session(self) -> None:
        self._session = self.tree.new_session()
        self._report(SessionState.LOST)
        self._report(SessionState.CONNECTED)
        self._poke_all(force=True)

    def _report(self, state: SessionState) -> None:
        # Scheduled, not called: a ZooKeeper client learns of these on its own thread,
        # never inside the caller's call.
        assert self._loop is not None
        self._loop.call_soon(call_session_callbacks, self._session_callbacks, state)

    # operations

    def _live_session(self) -> int:
        if self._closed or self._loop is None:
            raise StoreUnavailableError("store closed" if self._closed else "store not started")
        if not self._connected or self._session is None:
            raise StoreUnavailableError("disconnected")
        return self._session

    async def get(self, path: str) -> tuple[bytes, int]:
        self._live_session()
        with self.tree.lock:
            node = self.tree.read(path)
            return node.data, node.version

    async def exists(self, path: str) -> int | None:
        self._live_session()
        with self.tree.lock:
            node = self.tree.find(path)
            return None if node is None else node.version

    async def get_children(self, path: str) -> list[str]:
        self._live_session()
        with self.tree.lock:
            return sorted(self.tree.read(path).children)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        session = self._live_session()
        return self.tree.create(path, data, session if ephemeral else None, sequence=sequence,
                                makepath=makepath)

    async def ensure_path(self, path: str) -> None:
        self._live_session()
        self.tree.ensure_path(path)

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        self._live_session()
        return self.tree.set(path, data, version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        self._live_session()
        self.tree.delete(path, version, recursive)

    async def multi(self, ops: list[Op]) -> None:
        if ops:  # as ZooKeeperStore: nothing to send, nothing to fail
            self.tree.multi(list(ops), self._live_session())

    async def ephemeral_owner(self, path: str) -> int | None:
        self._live_session()
        with self.tree.lock:
            return self.tree.read(path).owner

    # watches

    def watch_data(self, path: str, callback: DataCallback) -> Watch:
        _check_path(path)

        async def read(first: bool) -> tuple[Hashable, tuple[bytes | None, int]]:
            self._live_session()
            with self.tree.lock:
                node = self.tree.find(path)
                if node is None:
                    return None, (None, -1)
                return (node.version, node.mzxid), (node.data, node.version)

        return self._watch("data", path, read, lambda state: callback(*state))

    def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        _check_path(path)

        async def read(first: bool) -> tuple[Hashable, list[str]]:
            self._live_session()
            if first:
                self.tree.ensure_path(path)
            with self.tree.lock:
                node = self.tree.find(path)
                if node is None:
                    return None, []
                children = sorted(node.children)
                return (node.cversion, tuple(children)), children

        return self._watch("children", path, read, callback)

    def _watch(self, kind: str, path: str, read: Reader[T],
               deliver: Callable[[T], None]) -> Watch:
        if self._loop is None or self._closed:
            raise StoreUnavailableError("store closed" if self._closed else "store not started")
        watch = RefreshingWatch(path, read, deliver, self._available.wait,
                                lambda w: self._forget(kind, w))
        self._watches[(kind, path)].append(watch)
        return watch

    def _forget(self, kind: str, watch: RefreshingWatch) -> None:
        watches = self._watches.get((kind, watch.path))
        if watches is not None and watch in watches:
            watches.remove(watch)
            if not watches:
                del self._watches[(kind, watch.path)]

    def _poke_all(self, *, force: bool) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.poke(force=force)

    def _tree_changed(self, events: frozenset[tuple[str, str]]) -> None:
        """Called by the tree, under its lock, from the writer's thread."""
        loop = self._loop
        if loop is None:
            return
        # RuntimeError: its loop is closed (the store was never closed); nobody listens.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._poke_watches, events)

    def _poke_watches(self, events: frozenset[tuple[str, str]]) -> None:
        # Disconnected, a ZooKeeper client hears of no change; reconnect() pokes every
        # watch, which reads what it missed.
        if not self._connected or self._closed:
            return
        for event in events:
            for watch in list(self._watches.get(event, ())):
                watch.poke()

    def on_session(self, callback: SessionCallback) -> None:
        self._session_callbacks.append(callback)
