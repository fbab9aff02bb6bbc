"""The coordination store contract, run against both implementations: ``MemoryStore``
and ``ZooKeeperStore`` on a real ZooKeeper (one server per test session, a chroot per
test). Then what only one of them can show: a real session expiry and a ZooKeeper
restart for ``ZooKeeperStore``; ``MemoryStore``'s failure switches and its tree shared
by stores on different loops.

No asyncio plugin here: each test runs its coroutine with ``asyncio.run`` (``run``),
which also closes every store the test opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.client import KazooClient

from odradek.server.cluster.store import (
    BadVersionError,
    CoordinationStore,
    MemoryStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionState,
    StoreError,
    StoreUnavailableError,
)
from odradek.server.cluster.zookeeper import ZooKeeperStore
from tests.zookeeper import ZooKeeperServer

CONNECTED, SUSPENDED, LOST = SessionState.CONNECTED, SessionState.SUSPENDED, SessionState.LOST

OpenStore = Callable[[], Awaitable[CoordinationStore]]


@dataclass
class Backend:
    name: str
    new_store: Callable[[], CoordinationStore]  # one more client of the same ensemble


@pytest.fixture(params=["memory", "zookeeper"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        tree = MemoryStore.Tree()
        return Backend("memory", lambda: MemoryStore(tree))
    connect = request.getfixturevalue("zk_connect")  # starts ZooKeeper only when needed
    return Backend("zookeeper", lambda: ZooKeeperStore(
        connect, session_timeout_ms=6000, connection_timeout_ms=2000))


def run(new_store: Callable[[], CoordinationStore],
        body: Callable[[OpenStore], Awaitable[None]], timeout_s: float = 30.0) -> None:
    """Run ``body(open_store)`` on a fresh loop; every store it opened is closed after."""

    async def main() -> None:
        stores: list[CoordinationStore] = []

        async def open_store() -> CoordinationStore:
            store = new_store()
            await store.start(10.0)
            stores.append(store)
            return store

        try:
            await asyncio.wait_for(body(open_store), timeout_s)
        finally:
            for store in stores:
                await store.close()

    asyncio.run(main())


class Recorder:
    """A callback that keeps its calls, checks each comes on the loop's thread, and lets
    a test wait for a condition on them."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.thread = threading.get_ident()
        self.off_loop = 0
        self._changed = asyncio.Event()

    def __call__(self, *args: Any) -> None:
        if threading.get_ident() != self.thread:
            self.off_loop += 1
        self.calls.append(args[0] if len(args) == 1 else args)
        self._changed.set()

    async def until(self, predicate: Callable[[list[Any]], bool],
                    timeout_s: float = 10.0) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                while not predicate(self.calls):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"not seen within {timeout_s}s; calls: {self.calls}") from None

    async def until_last(self, value: Any, timeout_s: float = 10.0) -> None:
        await self.until(lambda calls: bool(calls) and calls[-1] == value, timeout_s)


# --- the contract ----------------------------------------------------------------------


def test_create_get_set_delete_with_versions(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        store = await open_store()
        assert await store.create("/a", b"one") == "/a"
        assert await store.get("/a") == (b"one", 0)
        assert await store.exists("/a") == 0
        assert await store.set("/a", b"two") == 1  # -1: unconditional
        assert await store.set("/a", b"three", version=1) == 2
        with pytest.raises(BadVersionError):
            await store.set("/a", b"stale", version=1)
        assert await store.get("/a") == (b"three", 2)
        with pytest.raises(BadVersionError):
            await store.delete("/a", version=1)
        await store.delete("/a", version=2)
        assert await store.exists("/a") is None
        with pytest.raises(NoNodeError):
            await store.get("/a")
        with pytest.raises(NoNodeError):
            await store.set("/a", b"x")
        with pytest.raises(NoNodeError):
            await store.delete("/a")
        assert await store.ephemeral_owner("/") is None

    run(backend.new_store, body)


def test_create_errors_makepath_and_ensure_path(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        store = await open_store()
        await store.create("/b", b"")
        with pytest.raises(NodeExistsError):
            await store.create("/b", b"again")
        with pytest.raises(NoNodeError):
            await store.create("/x/y/z", b"")
        assert await store.create("/x/y/z", b"deep", makepath=True) == "/x/y/z"
        assert await store.get("/x/y/z") == (b"deep", 0)
        assert await store.get("/x") == (b"", 0)
        await store.ensure_path("/p/q/r")
        await store.ensure_path("/p/q/r")  # no error when there
        await store.ensure_path("/x")
        assert await store.get("/x/y/z") == (b"deep", 0)
        for name in ["c", "a", "b"]:
            await store.create(f"/p/{name}")
        assert await store.get_children("/p") == ["a", "b", "c", "q"]
        with pytest.raises(NoNodeError):
            await store.get_children("/missing")

    run(backend.new_store, body)


def test_sequence_nodes(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        store = await open_store()
        first = await store.create("/queue/item-", b"1", sequence=True, makepath=True)
        second = await store.create("/queue/item-", b"2", sequence=True)
        third = await store.create("/queue/e-", b"3", sequence=True, ephemeral=True)
        assert (first, second, third) == (
            "/queue/item-0000000000", "/queue/item-0000000001", "/queue/e-0000000002")
        assert await store.get(second) == (b"2", 0)
        assert await store.get_children("/queue") == [
            "e-0000000002", "item-0000000000", "item-0000000001"]
        assert await store.ephemeral_owner(third) == store.session_id

    run(backend.new_store, body)


def test_delete_not_empty_and_recursive(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        store = await open_store()
        await store.create("/d/x/y", b"", makepath=True)
        await store.create("/d/z", b"")
        with pytest.raises(NotEmptyError):
            await store.delete("/d")
        with pytest.raises(BadVersionError):
            await store.delete("/d", version=7, recursive=True)
        assert await store.get_children("/d") == ["x", "z"]
        await store.delete("/d", version=0, recursive=True)
        assert await store.exists("/d") is None
        assert await store.exists("/d/x/y") is None
        with pytest.raises(NoNodeError):
            await store.delete("/d", recursive=True)

    run(backend.new_store, body)


def test_multi_is_all_or_nothing(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        store = await open_store()
        await store.create("/m", b"0")
        await store.multi([Op.create("/m/a", b"a"), Op.set("/m", b"1", version=0),
                           Op.check("/m", 1)])
        assert await store.get("/m") == (b"1", 1)
        assert await store.get_children("/m") == ["a"]

        # Later ops see the earlier ones: the set makes /m version 2, so the check fails,
        # and neither the create nor the set happens.
        with pytest.raises(BadVersionError):
            await store.multi([Op.create("/m/b", b"b"), Op.set("/m", b"2"), Op.check("/m", 1)])
        with pytest.raises(NodeExistsError):
            await store.multi([Op.delete("/m/a"), Op.create("/m/a"), Op.create("/m/a")])
        with pytest.raises(NoNodeError):
            await store.multi([Op.set("/m", b"x"), Op.delete("/m/missing")])
        with pytest.raises(NotEmptyError):
            await store.multi([Op.set("/m/a", b"x"), Op.delete("/m")])
        assert await store.get("/m") == (b"1", 1)
        assert await store.get("/m/a") == (b"a", 0)
        assert await store.get_children("/m") == ["a"]

        await store.multi([Op.check("/m", 1), Op.delete("/m/a", version=0),
                           Op.create("/m/e", b"", ephemeral=True)])
        assert await store.get_children("/m") == ["e"]
        assert await store.ephemeral_owner("/m/e") == store.session_id
        await store.multi([])

    run(backend.new_store, body)


def test_ephemeral_nodes_go_with_their_store(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        broker, observer = await open_store(), await open_store()
        assert broker.session_id is not None and observer.session_id is not None
        assert broker.session_id != observer.session_id
        await broker.ensure_path("/brokers/ids")
        path = await broker.create("/brokers/ids/1", b"broker 1", ephemeral=True)
        assert await observer.ephemeral_owner(path) == broker.session_id
        assert await observer.ephemeral_owner("/brokers/ids") is None
        with pytest.raises(StoreError):  # ZooKeeper: ephemeral nodes have no children
            await broker.create(f"{path}/child", b"")

        data, children = Recorder(), Recorder()
        observer.watch_data(path, data)
        observer.watch_children("/brokers/ids", children)
        await data.until_last((b"broker 1", 0))
        await children.until_last(["1"])

        await broker.close()
        assert broker.session_id is None
        await data.until_last((None, -1))
        await children.until_last([])
        assert await observer.exists(path) is None
        assert data.off_loop == children.off_loop == 0
        with pytest.raises(StoreUnavailableError):
            await broker.get("/brokers/ids")

    run(backend.new_store, body)


def test_watch_data_follows_a_node_from_before_its_creation(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        store, writer = await open_store(), await open_store()
        seen = Recorder()
        watch = store.watch_data("/controller", seen)
        await seen.until_last((None, -1))
        await writer.create("/controller", b"1")
        await seen.until_last((b"1", 0))
        await writer.set("/controller", b"2")
        await seen.until_last((b"2", 1))
        await writer.delete("/controller")
        await seen.until_last((None, -1))
        await store.create("/controller", b"3")  # the watching store's own writes too
        await seen.until_last((b"3", 0))
        assert seen.calls == [(None, -1), (b"1", 0), (b"2", 1), (None, -1), (b"3", 0)]
        assert seen.off_loop == 0

        watch.cancel()
        # A second watch on the same node is the barrier: once it has seen the change,
        # the cancelled one would have too.
        barrier = Recorder()
        store.watch_data("/controller", barrier)
        await barrier.until_last((b"3", 0))
        await writer.set("/controller", b"4")
        await barrier.until_last((b"4", 1))
        assert seen.calls[-1] == (b"3", 0)

    run(backend.new_store, body)


def test_watch_children(backend: Backend) -> None:
    async def body(open_store: OpenStore) -> None:
        store, writer = await open_store(), await open_store()
        seen = Recorder()
        watch = store.watch_children("/brokers/topics", seen)  # missing: it is created
        await seen.until_last([])
        assert await writer.exists("/brokers/topics") == 0
        await writer.create("/brokers/topics/b", b"")
        await seen.until_last(["b"])
        await writer.create("/brokers/topics/a", b"")
        await seen.until_last(["a", "b"])
        await writer.set("/brokers/topics/a", b"data is no child change")
        await writer.delete("/brokers/topics/b")
        await seen.until_last(["a"])
        assert seen.calls == [[], ["b"], ["a", "b"], ["a"]]

        # Deleted: [] and the watch goes on; it reports the children when it is back.
        await writer.delete("/brokers", recursive=True)
        await seen.until_last([])
        await writer.create("/brokers/topics/c", b"", makepath=True)
        await seen.until_last(["c"])
        assert seen.off_loop == 0

        watch.cancel()
        barrier = Recorder()
        store.watch_children("/brokers/topics", barrier)
        await barrier.until_last(["c"])
        await writer.create("/brokers/topics/d", b"")
        await barrier.until_last(["c", "d"])
        assert seen.calls[-1] == ["c"]

    run(backend.new_store, body)


# --- ZooKeeper only --------------------------------------------------------------------


def zk_store(connect: str, session_timeout_ms: int, connection_timeout_ms: int = 2000,
             ) -> Callable[[], CoordinationStore]:
    return lambda: ZooKeeperStore(connect, session_timeout_ms=session_timeout_ms,
                                  connection_timeout_ms=connection_timeout_ms)


async def expire_session(store: ZooKeeperStore, server: ZooKeeperServer,
                         states: Recorder) -> None:
    """Make ZooKeeper expire ``store``'s session for real (its ephemeral nodes go):
    another client takes the session over with its id and password (the server drops
    the store's connection) and closes it. The store learns when it reconnects: LOST,
    then CONNECTED with a new session. (Stopping or pausing the server does not do
    it: ZooKeeper restores sessions at startup with a fresh timeout, and the store
    reconnects long before that runs out.)"""
    assert store._client is not None and store._client.client_id is not None
    session_id, password = store._client.client_id

    def take_over_and_close() -> None:
        other = KazooClient(server.connect_string, client_id=(session_id, password))
        other.start(5)
        other.stop()
        other.close()

    loop = asyncio.get_running_loop()
    for _ in range(3):
        await loop.run_in_executor(None, take_over_and_close)
        # If the store reconnected between the take-over and the close, it has the
        # session back (and ours was not closed): try again.
        try:
            await states.until(lambda calls: LOST in calls, timeout_s=3.0)
            return
        except AssertionError:
            continue
    raise AssertionError(f"the session did not expire; states: {states.calls}")


def test_zookeeper_session_expiry(zookeeper: ZooKeeperServer, zk_connect: str) -> None:
    async def body(open_store: OpenStore) -> None:
        store, observer = await open_store(), await open_store()
        assert isinstance(store, ZooKeeperStore)
        states = Recorder()
        store.on_session(states)
        path = await store.create("/brokers/ids/1", b"me", ephemeral=True, makepath=True)
        await store.create("/config", b"c")
        mine, config, theirs = Recorder(), Recorder(), Recorder()
        store.watch_data(path, mine)
        store.watch_data("/config", config)
        observer.watch_data(path, theirs)
        for recorder, state in [(mine, (b"me", 0)), (config, (b"c", 0)), (theirs, (b"me", 0))]:
            await recorder.until_last(state)
        old_session = store.session_id

        await expire_session(store, zookeeper, states)
        await states.until_last(CONNECTED)
        # kazoo sees the connection drop first (SUSPENDED), then the expiry.
        assert states.calls in ([SUSPENDED, LOST, CONNECTED], [LOST, CONNECTED])
        assert store.session_id not in (None, old_session)
        await theirs.until_last((None, -1))  # the ephemeral node went with the session
        await mine.until_last((None, -1))
        # A new session: every watch reports again, changed or not.
        await config.until(lambda calls: len(calls) == 2)
        assert config.calls == [(b"c", 0), (b"c", 0)]

        # The store goes on in its new session: the broker registers again.
        await store.create(path, b"me again", ephemeral=True)
        assert await observer.ephemeral_owner(path) == store.session_id
        await theirs.until_last((b"me again", 0))
        assert states.off_loop == mine.off_loop == config.off_loop == 0

    run(zk_store(zk_connect, session_timeout_ms=4000), body)


def test_zookeeper_server_stopped_then_restarted_keeps_the_session(
        zookeeper: ZooKeeperServer, zk_connect: str) -> None:
    async def body(open_store: OpenStore) -> None:
        store = await open_store()
        states = Recorder()
        store.on_session(states)
        await store.create("/e", b"x", ephemeral=True)
        session = store.session_id
        seen = Recorder()
        store.watch_data("/w", seen)
        await seen.until_last((None, -1))
        loop = asyncio.get_running_loop()

        await loop.run_in_executor(None, zookeeper.stop)
        await states.until_last(SUSPENDED, timeout_s=5.0)
        for operation in (store.get("/e"), store.create("/new", b""),
                          store.multi([Op.check("/e", 0)])):
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError):
                await operation
            assert time.monotonic() - started < 3.0  # connection_timeout_ms=500, and slack
        await store.multi([])  # nothing to send: no error

        await loop.run_in_executor(None, zookeeper.start)
        # kazoo retries at least once a second; the slack is for a loaded machine (a
        # run of the whole suite once saw nothing within 10 s).
        await states.until_last(CONNECTED, timeout_s=30.0)
        assert states.calls == [SUSPENDED, CONNECTED]
        assert store.session_id == session  # ZooKeeper kept the session over its restart
        assert await store.get("/e") == (b"x", 0)
        assert await store.ephemeral_owner("/e") == session
        await store.create("/w", b"1")  # the watch was set again after the reconnect
        await seen.until_last((b"1", 0))
        assert seen.calls == [(None, -1), (b"1", 0)]

    # A long session: under a loaded machine (a full CI run) ZooKeeper's restart and
    # kazoo's reconnect took more than 10 s twice, and a 10 s session expired meanwhile.
    # The whole body's bound covers its own waits (ZooKeeper's JVM start alone may take
    # 30 s, and the reconnect after it): a CI run once hit the old 30 s bound here.
    run(zk_store(zk_connect, session_timeout_ms=60_000, connection_timeout_ms=500), body,
        timeout_s=120.0)


def test_zookeeper_start_fails_within_its_timeout_and_can_be_retried(
        zookeeper: ZooKeeperServer, zk_connect: str) -> None:
    async def body() -> None:
        store = ZooKeeperStore(zk_connect, session_timeout_ms=4000, connection_timeout_ms=500)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, zookeeper.stop)
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError):
                await store.start(0.5)
            assert time.monotonic() - started < 3.0
            with pytest.raises(StoreUnavailableError):
                await store.get("/")
        finally:
            await loop.run_in_executor(None, zookeeper.start)
        # A broker retries start() until ZooKeeper is there.
        await store.start(10.0)
        try:
            assert await store.get_children("/") == []  # the chroot, created by start()
        finally:
            await store.close()
        with pytest.raises(StoreUnavailableError):
            await store.get("/")

    asyncio.run(body())


# --- MemoryStore only ------------------------------------------------------------------


def test_memory_disconnect_reconnect_and_expiry() -> None:
    tree = MemoryStore.Tree()

    async def body(open_store: OpenStore) -> None:
        store, other = await open_store(), await open_store()
        assert isinstance(store, MemoryStore)
        states, seen = Recorder(), Recorder()
        store.on_session(states)
        await store.create("/e", b"mine", ephemeral=True)
        store.watch_data("/x", seen)
        await seen.until_last((None, -1))

        store.disconnect()
        await states.until_last(SUSPENDED)
        with pytest.raises(StoreUnavailableError):
            await store.get("/e")
        assert await other.get("/e") == (b"mine", 0)  # the session lives on
        await other.create("/x", b"while away")
        await asyncio.sleep(0.05)
        assert seen.calls == [(None, -1)]  # a disconnected client hears nothing
        store.reconnect()
        await states.until_last(CONNECTED)
        await seen.until_last((b"while away", 0))  # it reads what it missed
        session = store.session_id

        store.expire_session()
        await states.until(lambda calls: len(calls) == 4)
        assert states.calls == [SUSPENDED, CONNECTED, LOST, CONNECTED]
        assert store.session_id not in (None, session)
        assert await other.exists("/e") is None
        await seen.until(lambda calls: len(calls) == 3)  # a new session: reported again
        assert seen.calls[-1] == (b"while away", 0)

        # Expired while disconnected: the nodes go at once, the client hears at reconnect.
        await store.create("/e", b"again", ephemeral=True)
        store.disconnect()
        store.expire_session()
        assert await other.exists("/e") is None
        await asyncio.sleep(0.05)
        assert states.calls[-1] == SUSPENDED
        store.reconnect()
        await states.until_last(CONNECTED)
        assert states.calls[-3:] == [SUSPENDED, LOST, CONNECTED]

    run(lambda: MemoryStore(tree), body)


def test_memory_stores_on_different_loops_share_one_tree() -> None:
    tree = MemoryStore.Tree()
    ready, done = threading.Event(), threading.Event()
    other_thread: dict[str, Any] = {}

    async def other_broker() -> None:
        store = MemoryStore(tree)
        await store.start(1.0)
        seen = Recorder()
        store.watch_data("/shared", seen)
        await seen.until_last((None, -1))
        ready.set()
        await seen.until_last((b"hello", 0))
        other_thread.update(calls=list(seen.calls), off_loop=seen.off_loop,
                            thread=threading.get_ident())
        await store.close()
        done.set()

    thread = threading.Thread(target=asyncio.run, args=(other_broker(),))
    thread.start()
    try:
        assert ready.wait(10)

        async def body(open_store: OpenStore) -> None:
            store = await open_store()
            await store.create("/shared", b"hello")

        run(lambda: MemoryStore(tree), body)
        assert done.wait(10)
    finally:
        thread.join(10)
    assert other_thread["calls"] == [(None, -1), (b"hello", 0)]
    assert other_thread["off_loop"] == 0
    assert other_thread["thread"] != threading.get_ident()


def test_a_cancelled_watch_ends_even_when_its_read_swallows_the_cancellation() -> None:
    # Python 3.11's asyncio.wait_for (in ZooKeeperStore's requests) can swallow a
    # cancellation whose answer arrives in the same loop step: the read then returns
    # as if nothing happened. The watch's task must still end, not wait unreferenced
    # for a poke no one sends (the garbage collector then destroys it pending).
    from odradek.server.cluster.store import RefreshingWatch

    async def body() -> None:
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reading = asyncio.Event()
        delivered: list[int] = []

        async def read(first: bool) -> tuple[int, int]:
            reading.set()
            with contextlib.suppress(asyncio.CancelledError):  # swallowed, as wait_for may
                await answer
            return 1, 1

        async def available() -> None:
            return None

        watch = RefreshingWatch("/w", read, delivered.append, available, lambda w: None)
        await reading.wait()
        watch.cancel()
        await asyncio.wait_for(asyncio.shield(watch._task), 2)
        assert watch._task.done() and delivered == []

    asyncio.run(body())
