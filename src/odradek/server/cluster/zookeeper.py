"""The coordination store on a real ZooKeeper ensemble, through ``kazoo``.

``ZooKeeperStore`` implements ``odradek.server.cluster.store.CoordinationStore`` (read its module
docstring for the contract). This module owns the bridge between kazoo's threads and the
broker's event loop, and kazoo's gaps:

- Requests go out as kazoo's ``*_async`` calls (they only queue the request and wake
  kazoo's connection thread) and their results come back to an asyncio future through
  ``loop.call_soon_threadsafe``: the loop never blocks on ZooKeeper. Only ``start`` and
  ``close`` (kazoo's blocking connect and disconnect) run on the loop's default executor.
- Bounded waits: kazoo queues a request made while it is reconnecting until it is back
  (however long that takes). Here a request first waits at most
  ``connection_timeout_ms`` for a connection, then at most ``session_timeout_ms`` for
  its answer (a live connection answers or is declared dead well within that), and
  raises StoreUnavailableError otherwise.
- Watches: kazoo does not re-register watches when it reconnects (no SetWatches): on
  every lost connection it fires them all with a NONE event and forgets them. Its
  DataWatch recipe also reports only changes of mzxid, so nothing after a new session,
  and its ChildrenWatch stops for good once its znode is deleted. So the watches here
  are our own (``RefreshingWatch``, shared with ``MemoryStore``) over raw one-shot
  watches: any firing, NONE included, means "read again", and a new session forces the
  next reading to be reported.
- ``zookeeper.connect`` strings with a chroot ("host:2181,host2:2181/kafka"): the chroot
  is created first, with a client outside it, as Kafka does; a chrooted client cannot
  create its own root.
- Logging: kazoo logs each failed reconnect attempt as a WARNING (every second while
  ZooKeeper is down) and each connect at INFO. Those are demoted/held back; this module
  logs each session change once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.retry import KazooRetry

from odradek.server.cluster.store import (
    BadVersionError,
    ChildrenCallback,
    CoordinationStore,
    DataCallback,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    Reader,
    RefreshingWatch,
    SessionCallback,
    SessionState,
    StoreError,
    StoreUnavailableError,
    Watch,
    call_session_callbacks,
    child_path,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_KAZOO_LOG = logging.getLogger("kazoo")
if _KAZOO_LOG.level == logging.NOTSET:
    # kazoo says INFO at every connect and close: routine for a broker, noise in its log.
    _KAZOO_LOG.setLevel(logging.WARNING)


class _QuietReconnects(logging.LoggerAdapter):
    """kazoo's logger, with its routine reconnect warnings demoted to INFO (so hidden at
    kazoo's WARNING level): the store reports SUSPENDED/LOST itself, once."""

    ROUTINE = ("Connection dropped", "Connection time-out", "Transition to CONNECTING",
               "Session has expired")

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level == logging.WARNING and isinstance(msg, str) and msg.startswith(self.ROUTINE):
            level = logging.INFO
        super().log(level, msg, *args, **kwargs)


_KAZOO_CLIENT_LOG = _QuietReconnects(logging.getLogger("kazoo.client"), {})

_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}

_ERRORS: dict[type[Exception], type[StoreError]] = {
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
    # The outcome is unknown for all of these.
    kz.ConnectionLoss: StoreUnavailableError,
    kz.SessionExpiredError: StoreUnavailableError,  # ConnectionClosedError too (subclass)
    kz.ConnectionDropped: StoreUnavailableError,
    kz.OperationTimeoutError: StoreUnavailableError,
    kz.RequestTimeoutError: StoreUnavailableError,
    kz.SessionMovedError: StoreUnavailableError,
    kz.CancelledError: StoreUnavailableError,
    KazooTimeoutError: StoreUnavailableError,
}


def _translate(exc: BaseException, path: str) -> BaseException:
    """kazoo's exception as the store's (others pass through unchanged)."""
    for kazoo_type, ours in _ERRORS.items():
        if isinstance(exc, kazoo_type):
            error = ours(f"{path} ({type(exc).__name__})")
            error.__cause__ = exc
            return error
    if isinstance(exc, kz.KazooException):
        error = StoreError(f"{path} ({type(exc).__name__})")
        error.__cause__ = exc
        return error
    return exc


def split_connect(connect: str) -> tuple[str, str]:
    """Kafka's ``zookeeper.connect`` as (hosts, chroot); chroot "" when there is none."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


class ZooKeeperStore(CoordinationStore):
    """``CoordinationStore`` on ZooKeeper. ``connect`` is Kafka's ``zookeeper.connect``;
    ``session_timeout_ms`` is asked of the server (which clamps it to its
    [minSessionTimeout, maxSessionTimeout]); ``connection_timeout_ms`` bounds how long
    ``start`` and any request wait for a connection."""

    def __init__(self, connect: str, *, session_timeout_ms: int,
                 connection_timeout_ms: int) -> None:
        self.connect = connect
        self._hosts, self._chroot = split_connect(connect)
        self._session_timeout_s = session_timeout_ms / 1000
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False
        self._state: SessionState | None = None  # as last reported on the loop
        # Set (and replaced) at every state change kazoo reports: what waits for a
        # connection waits on it and then asks kazoo again.
        self._state_changed = asyncio.Event()
        self._watches: set[RefreshingWatch] = set()
        self._session_callbacks: list[SessionCallback] = []

    def _new_client(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self._session_timeout_s,
            handler=SequentialThreadingHandler(),
            # Reconnect forever, at least once a second: kazoo's default backoff grows to
            # an hour, and a broker must be back soon after ZooKeeper is.
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0,
                                        max_jitter=0.1),
            logger=_KAZOO_CLIENT_LOG,
        )

    # lifecycle

    async def start(self, timeout_s: float) -> None:
        if self._started or self._closed:
            raise RuntimeError("ZooKeeperStore: start() after start() or close()")
        loop = self._loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout_s
        if self._chroot:
            await loop.run_in_executor(None, self._create_chroot, timeout_s)
        client = self._client = self._new_client(self.connect)
        client.add_listener(self._kazoo_state)
        try:
            await loop.run_in_executor(
                None, client.start, max(deadline - time.monotonic(), 0.001))
        except KazooTimeoutError as exc:
            # kazoo has stopped that client already; start() may be called again.
            self._client = None
            raise StoreUnavailableError(
                f"no ZooKeeper session with {self.connect} within {timeout_s}s") from exc
        self._started = True
        self._state = SessionState.CONNECTED
        log.info("ZooKeeper session 0x%x with %s", self.session_id or 0, self.connect)

    def _create_chroot(self, timeout_s: float) -> None:
        """(On an executor thread.) A chrooted client cannot create its own root."""
        deadline = time.monotonic() + timeout_s
        client = self._new_client(self._hosts)
        try:
            client.start(timeout_s)
            client.ensure_path_async(self._chroot).get(
                timeout=max(deadline - time.monotonic(), 0.001))
        except (kz.KazooException, KazooTimeoutError) as exc:
            raise StoreUnavailableError(
                f"could not create the chroot {self._chroot} on {self._hosts}: "
                f"{type(exc).__name__} {exc}") from exc
        finally:
            client.stop()
            client.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for watch in list(self._watches):
            watch.cancel()
        client = self._client
        if client is not None and self._loop is not None:
            # stop() sends CloseSession (the server drops our ephemeral nodes at once)
            # and joins kazoo's connection thread: blocking, so off the loop — on a daemon
            # thread of its own rather than the loop's executor, which asyncio.run waits
            # for without a bound: with ZooKeeper unreachable, kazoo's connection thread
            # may take its time, and a stopping broker must not wait on it.
            done = self._loop.create_future()
            loop = self._loop

            def settle() -> None:  # on the loop
                if not done.done():
                    done.set_result(None)

            def stop() -> None:
                try:
                    _stop_client(client)
                finally:
                    # The loop may be closed already: close() waited CLOSE_TIMEOUT_S
                    # and went on, and nobody is listening any more.
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(settle)

            threading.Thread(target=stop, name="zookeeper-close", daemon=True).start()
            try:
                await asyncio.wait_for(done, CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("closing the ZooKeeper session took over %.0f s; going on",
                            CLOSE_TIMEOUT_S)

    @property
    def session_id(self) -> int | None:
        client = self._client
        if client is None or self._closed or client.client_id is None:
            return None
        return int(client.client_id[0])

    # kazoo -> loop

    def _call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        """From a kazoo thread: run ``callback`` on the store's loop."""
        loop = self._loop
        if loop is None:
            return
        # RuntimeError: the loop is closed, so nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(callback, *args)

    def _kazoo_state(self, state: KazooState) -> None:
        # kazoo's connection thread, which must not block: hop to the loop.
        self._call_soon(self._on_state, _STATES[state])

    def _on_state(self, state: SessionState) -> None:
        changed, self._state_changed = self._state_changed, asyncio.Event()
        changed.set()
        if self._closed or state == self._state:
            return
        self._state = state
        if not self._started:
            return  # start() reports the first connection by returning
        if state is SessionState.CONNECTED:
            log.info("ZooKeeper: connected (session 0x%x)", self.session_id or 0)
            for watch in list(self._watches):
                watch.poke()
        elif state is SessionState.SUSPENDED:
            log.warning("ZooKeeper: connection lost; reconnecting to %s", self._hosts)
        else:
            log.warning("ZooKeeper: session expired; its ephemeral nodes are gone")
            for watch in list(self._watches):
                watch.poke(force=True)  # the new session's first reading is reported
        call_session_callbacks(self._session_callbacks, state)

    # requests

    def _require_client(self) -> KazooClient:
        if self._closed:
            raise StoreUnavailableError("store closed")
        if self._client is None or not self._started:
            raise StoreUnavailableError("store not started")
        return self._client

    async def _until_connected(self, timeout_s: float | None) -> None:
        client = self._require_client()
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        # kazoo's own flag is the truth; the loop hears of changes one hop later.
        while not client.connected:
            if self._closed:
                raise StoreUnavailableError("store closed")
            changed = self._state_changed
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise StoreUnavailableError(
                    f"not connected to ZooKeeper ({self._hosts}) within {timeout_s}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    async def _request(self, path: str, send: Callable[[KazooClient], Any]) -> Any:
        """Send one request (``send`` calls a kazoo ``*_async`` method) and await its
        result on the loop."""
        client = self._require_client()
        await self._until_connected(self._connection_timeout_s)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any) -> None:  # on the loop
            if future.done():
                return
            if result.successful():
                future.set_result(result.value)
            else:
                future.set_exception(_translate(result.exception, path))

        try:
            async_result = send(client)
        except kz.KazooException as exc:
            raise _translate(exc, path) from exc
        async_result.rawlink(lambda result: self._call_soon(settle, result))
        try:
            return await asyncio.wait_for(future, self._session_timeout_s)
        except TimeoutError:
            raise StoreUnavailableError(
                f"{path}: no answer from ZooKeeper within {self._session_timeout_s}s; "
                "the request may or may not have been applied") from None

    async def get(self, path: str) -> tuple[bytes, int]:
        data, stat = await self._request(path, lambda c: c.get_async(path))
        return data, stat.version

    async def exists(self, path: str) -> int | None:
        stat = await self._request(path, lambda c: c.exists_async(path))
        return None if stat is None else stat.version

    async def get_children(self, path: str) -> list[str]:
        return sorted(await self._request(path, lambda c: c.get_children_async(path)))

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        return await self._request(path, lambda c: c.create_async(
            path, bytes(data), ephemeral=ephemeral, sequence=sequence, makepath=makepath))

    async def ensure_path(self, path: str) -> None:
        await self._request(path, lambda c: c.ensure_path_async(path))

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        stat = await self._request(path, lambda c: c.set_async(path, bytes(data), version))
        return stat.version

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        if recursive:
            # kazoo's recursive delete is blocking only; this is the same walk, async.
            # Not atomic (neither is kazoo's nor Kafka's): the version is checked first,
            # then descendants go, then the node itself (under the version again).
            if version != -1:
                current = await self.exists(path)
                if current is None:
                    raise NoNodeError(path)
                if current != version:
                    raise BadVersionError(path)
            await self._delete_below(path)
        await self._request(path, lambda c: c.delete_async(path, version))

    async def _delete_below(self, path: str) -> None:
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return
        for name in children:
            child = child_path(path, name)
            await self._delete_below(child)

            def send(c: KazooClient, child: str = child) -> Any:
                return c.delete_async(child)

            # NoNodeError: gone already (an ephemeral node whose session ended, say).
            with contextlib.suppress(NoNodeError):
                await self._request(child, send)

    async def multi(self, ops: list[Op]) -> None:
        def send(client: KazooClient) -> Any:
            transaction = client.transaction()
            for op in ops:
                if op.kind == "check":
                    transaction.check(op.path, op.version)
                elif op.kind == "create":
                    transaction.create(op.path, bytes(op.data), ephemeral=op.ephemeral)
                elif op.kind == "set":
                    transaction.set_data(op.path, bytes(op.data), op.version)
                elif op.kind == "delete":
                    transaction.delete(op.path, op.version)
                else:
                    raise ValueError(f"unknown op {op.kind!r}")
            return transaction.commit_async()

        if not ops:
            return
        results = await self._request(ops[0].path, send)
        # A failed multi answers an error per op: RolledBackError for those before the
        # failing one, RuntimeInconsistency after it, the real error at it.
        for op, result in zip(ops, results, strict=False):
            if isinstance(result, Exception) and not isinstance(
                    result, kz.RolledBackError | kz.RuntimeInconsistency):
                raise _translate(result, op.path)
        if any(isinstance(result, Exception) for result in results):
            raise StoreError(f"multi failed: {results!r}")

    async def ephemeral_owner(self, path: str) -> int | None:
        stat = await self._request(path, lambda c: c.exists_async(path))
        if stat is None:
            raise NoNodeError(path)
        return stat.ephemeralOwner or None

    # watches

    def watch_data(self, path: str, callback: DataCallback) -> Watch:
        def fired(event: WatchedEvent) -> None:  # kazoo's callback thread
            self._call_soon(poke)

        async def read(first: bool) -> tuple[Hashable, tuple[bytes | None, int]]:
            while True:
                try:
                    data, stat = await self._request(path, lambda c: c.get_async(path, fired))
                    return (stat.version, stat.mzxid), (data, stat.version)
                except NoNodeError:
                    # Watch for its creation instead.
                    stat = await self._request(path, lambda c: c.exists_async(path, fired))
                    if stat is None:
                        return None, (None, -1)
                    # Created between the two requests: read it.

        watch = self._watch(path, read, lambda state: callback(*state))
        poke = watch.poke  # bound before the watch's task first runs (and sets a watch)
        return watch

    def watch_children(self, path: str, callback: ChildrenCallback) -> Watch:
        def fired(event: WatchedEvent) -> None:  # kazoo's callback thread
            self._call_soon(poke)

        async def read(first: bool) -> tuple[Hashable, list[str]]:
            if first:
                await self.ensure_path(path)  # a child watch needs its znode
            while True:
                try:
                    children, stat = await self._request(
                        path, lambda c: c.get_children_async(path, fired, include_data=True))
                    children = sorted(children)
                    return (stat.cversion, tuple(children)), children
                except NoNodeError:
                    # Deleted since: no children, and watch for its return.
                    stat = await self._request(path, lambda c: c.exists_async(path, fired))
                    if stat is None:
                        return None, []

        watch = self._watch(path, read, callback)
        poke = watch.poke  # bound before the watch's task first runs (and sets a watch)
        return watch

    def _watch(self, path: str, read: Reader[T],
               deliver: Callable[[T], None]) -> RefreshingWatch[T]:
        self._require_client()
        watch: RefreshingWatch[T] = RefreshingWatch(
            path, read, deliver, lambda: self._until_connected(None), self._watches.discard)
        self._watches.add(watch)
        return watch

    def on_session(self, callback: SessionCallback) -> None:
        self._session_callbacks.append(callback)


# How long a closing store waits for kazoo to end the session and its threads.
CLOSE_TIMEOUT_S = 5.0


def _stop_client(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()
