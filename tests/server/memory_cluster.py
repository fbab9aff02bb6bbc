"""A replicated cluster in one process: N real brokers on one event loop (the test's),
joined through a shared in-memory coordination store instead of ZooKeeper, each on its
own 127.0.0.1 port and data directory. Replication, elections and the controller run
as in production (brokers fetch from each other over TCP); what the in-memory store
adds is speed (a 3-broker cluster starts in about a second) and control: a broker's
ZooKeeper session can be expired or its connection dropped on cue
(``MemoryStore.expire_session`` / ``disconnect``).

The process tiers (tests/faults) run the real thing: ``odradek serve`` processes and
Debian's ZooKeeper, killed and paused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from odradek.devcluster import FAST_SETTINGS, cluster_defaults
from odradek.server.broker import Broker
from odradek.server.cluster.store import MemoryStore, MemoryTree
from odradek.server.config import load_config


class MemoryCluster:
    """``size`` brokers, node ids 1..size, data under ``root``/broker-N (and with
    ``log_dirs`` > 1 that many log directories, ``root``/broker-N/disk-I: JBOD)."""

    def __init__(self, root: Path, size: int = 3, *, log_dirs: int = 1,
                 **settings: Any) -> None:
        self.root = root
        self.size = size
        self.log_dirs = log_dirs
        self.tree = MemoryTree()
        self.settings = {**FAST_SETTINGS, **cluster_defaults(size),
                         "zookeeper.connect": "memory", **settings}
        self.brokers: dict[int, Broker] = {}
        self.stores: dict[int, MemoryStore] = {}
        self._ports: dict[int, int] = {}

    async def start(self) -> None:
        await asyncio.gather(*(self.start_broker(n) for n in range(1, self.size + 1)))
        await self.wait_for(lambda: all(
            len(b.cluster.metadata.brokers) == self.size for b in self.running()),
            "every broker sees every other")

    async def start_broker(self, node_id: int) -> Broker:
        """Start broker ``node_id`` (again: same port and data directory)."""
        port = self._ports.get(node_id, 0)
        data_dir = self.root / f"broker-{node_id}"
        disks = {"log.dirs": ",".join(str(data_dir / f"disk-{i}")
                                      for i in range(self.log_dirs))
                 } if self.log_dirs > 1 else {}
        config = load_config(listen=f"127.0.0.1:{port}", data_dir=str(data_dir),
                             environ={}, overrides={**self.settings, **disks,
                                                    "node.id": node_id})
        store = self.stores[node_id] = MemoryStore(self.tree)
        broker = Broker(config, store=store)
        await broker.start()
        self.brokers[node_id] = broker
        self._ports[node_id] = broker.port
        return broker

    async def stop_broker(self, node_id: int) -> None:
        """A clean stop: leadership moves away first (controlled shutdown)."""
        broker = self.brokers.pop(node_id)
        await broker.stop()

    async def stop(self) -> None:
        await asyncio.gather(*(b.stop() for b in self.brokers.values()),
                             return_exceptions=True)
        self.brokers.clear()

    def running(self) -> list[Broker]:
        return list(self.brokers.values())

    def address(self, node_id: int) -> tuple[str, int]:
        return "127.0.0.1", self._ports[node_id]

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader as the store says (-1: none)."""
        any_broker = next(iter(self.brokers.values()))
        assert any_broker.cluster is not None
        state = any_broker.cluster.metadata.states.get((topic, partition))
        return state.leader if state is not None else -1

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                           configs: dict[str, str] | None = None) -> None:
        """Create the topic and wait until every running broker has taken up its role
        for every partition (the leader leads, each follower follows)."""
        broker = next(iter(self.brokers.values()))
        await broker.topology.create_topic(name, partitions, replication_factor, configs)

        def ready() -> bool:
            for p in range(partitions):
                leader = self.leader(name, p)
                if leader not in self.brokers:
                    return False
                lead = self.brokers[leader].cluster
                if lead is None or (name, p) not in lead.replicas.leaders:
                    return False
            return True

        await self.wait_for(ready, f"{name}'s leaders to take up their roles")

    async def wait_for(self, check: Callable[[], bool], what: str, timeout_s: float = 20.0
                       ) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                while not check():
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise AssertionError(f"{timeout_s:.0f} s without {what}") from None


async def with_cluster(root: Path, body: Callable[[MemoryCluster], Awaitable[None]],
                       size: int = 3, *, log_dirs: int = 1, **settings: Any) -> None:
    """Run ``body`` against a started cluster; stop every broker afterwards."""
    cluster = MemoryCluster(root, size, log_dirs=log_dirs, **settings)
    try:
        await cluster.start()
        await body(cluster)
    finally:
        await cluster.stop()
