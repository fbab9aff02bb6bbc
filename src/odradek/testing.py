"""Odradek for your own test suites: a real broker on a free port in a temporary
directory, no Docker, no JVM.

    from odradek.testing import running_broker

    with running_broker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

or, with pytest, the ``odradek_broker`` fixture (registered as a pytest plugin when
Odradek is installed). Settings go by their Kafka names:
``running_broker(**{"num.partitions": 3})``.

A replicated cluster (a private ZooKeeper, from Debian's ``zookeeper`` package, and N
``odradek serve`` processes; see ``odradek.devcluster``):

    from odradek.testing import running_cluster

    with running_cluster(brokers=3) as cluster:
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
        cluster.brokers[2].stop()  # a controlled shutdown; .start() brings it back

or the ``odradek_cluster`` fixture (three brokers).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from odradek.devcluster import FAST_SETTINGS, BrokerProcess, DevCluster
from odradek.server.broker import Broker
from odradek.server.config import load_config
from odradek.server.run import BrokerThread

TEST_OFFSETS_TOPIC_PARTITIONS = 4
TEST_TRANSACTION_STATE_PARTITIONS = 4


@dataclass(frozen=True)
class RunningBroker:
    bootstrap: str  # "127.0.0.1:PORT", for bootstrap.servers
    host: str
    port: int
    data_dir: str
    broker: Broker


@contextmanager
def running_broker(data_dir: str | None = None, **settings: Any) -> Iterator[RunningBroker]:
    """Start a broker on 127.0.0.1 and a free port; stop it (cleanly) on exit."""
    # A test broker starts and stops fast: __consumer_offsets, __transaction_state and
    # __share_group_state get a few partitions rather than Kafka's 50 (each is a log to
    # create, open and close), unless a test asks.
    settings.setdefault("offsets.topic.num.partitions", TEST_OFFSETS_TOPIC_PARTITIONS)
    settings.setdefault("transaction.state.log.num.partitions",
                        TEST_TRANSACTION_STATE_PARTITIONS)
    settings.setdefault("share.coordinator.state.topic.num.partitions",
                        TEST_TRANSACTION_STATE_PARTITIONS)
    with tempfile.TemporaryDirectory(prefix="odradek-test-") as tmp:
        config = load_config(listen="127.0.0.1:0", data_dir=data_dir or tmp,
                             overrides=settings, environ={})
        thread = BrokerThread(config)
        broker = thread.start()
        try:
            yield RunningBroker(f"127.0.0.1:{broker.port}", "127.0.0.1", broker.port,
                                config.data_dir, broker)
        finally:
            thread.stop()


class ClusterBroker:
    """One broker of a ``running_cluster``, node ``node_id``."""

    def __init__(self, cluster: DevCluster, node_id: int) -> None:
        self._cluster = cluster
        self.node_id = node_id

    @property
    def _process(self) -> BrokerProcess:
        return self._cluster.brokers[self.node_id]

    @property
    def bootstrap(self) -> str:
        return self._process.bootstrap

    @property
    def port(self) -> int:
        return self._process.port

    @property
    def data_dir(self) -> str:
        return str(self._process.data_dir)

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process.running

    def stop(self) -> None:
        """SIGTERM: the broker moves its leadership to the others (a controlled
        shutdown), deregisters and exits; ClusterError unless it exits 0."""
        self._cluster.stop_broker(self.node_id)

    def kill(self) -> None:
        """SIGKILL, as a crash would: its registration stays until its ZooKeeper session
        expires (``zookeeper.session.timeout.ms``)."""
        self._process.kill()

    def start(self) -> None:
        """Start it again (same port and data) and wait until every broker sees it."""
        self._cluster.start_broker(self.node_id)

    def output(self) -> str:
        """Everything it printed, every start's."""
        return self._process.output()


class RunningCluster:
    """A cluster of ``running_cluster``: ``bootstrap`` for clients, ``brokers`` by node id
    (1..N), ``zookeeper_connect`` (with its chroot) for ZooKeeper tools."""

    def __init__(self, cluster: DevCluster) -> None:
        self._cluster = cluster
        self.brokers = {node: ClusterBroker(cluster, node) for node in cluster.brokers}

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated (stopped ones too: clients skip them)."""
        return self._cluster.bootstrap

    @property
    def zookeeper_connect(self) -> str:
        return self._cluster.zookeeper_connect

    @property
    def cluster_id(self) -> str | None:
        return self._cluster.cluster_id

    @property
    def data_dir(self) -> str:
        return str(self._cluster.root)

    def controller(self) -> int:
        """The controller's node id, as a running broker says (-1: none)."""
        return self._cluster.controller()

    def wait_for_brokers(self, timeout_s: float = 60.0) -> None:
        """Until every running broker's Metadata lists every running broker."""
        self._cluster.wait_registered(timeout_s)

    def output(self) -> str:
        """Every broker's log, for a failure report."""
        return "\n".join(f"=== broker {node} ===\n{broker.output()}"
                         for node, broker in self.brokers.items())


@contextmanager
def running_cluster(brokers: int = 3, *, zookeeper: str | None = None,
                    data_dir: str | None = None, **settings: Any) -> Iterator[RunningCluster]:
    """Start a private ZooKeeper (unless ``zookeeper`` is a connect string to use) and
    ``brokers`` brokers on free ports of 127.0.0.1, data in ``data_dir`` (default: a
    temporary directory); stop them at the end, the controller last, then ZooKeeper.
    ClusterError if something cannot start, or a broker did not stop cleanly (exit 0)
    unless the test killed it.

    Settings go by their Kafka names, for every broker. Replication defaults to
    ``min(3, brokers)`` replicas (internal topics too) and ``min.insync.replicas`` 2
    where there are 3; a dead broker is noticed in 4 s (``zookeeper.session.timeout.ms``)
    and the internal topics have 4 partitions, so tests stay quick."""
    with tempfile.TemporaryDirectory(prefix="odradek-cluster-",
                                     ignore_cleanup_errors=True) as tmp:
        cluster = DevCluster(data_dir or tmp, brokers, zookeeper=zookeeper, base_port=0,
                             settings={**FAST_SETTINGS, **settings})
        cluster.start()
        try:
            yield RunningCluster(cluster)
        finally:
            cluster.close()


try:
    import pytest
except ImportError:  # pragma: no cover - pytest is optional for users of the module
    pass
else:

    @pytest.fixture
    def odradek_broker() -> Iterator[RunningBroker]:
        """A fresh broker for one test."""
        with running_broker() as broker:
            yield broker

    @pytest.fixture
    def odradek_cluster() -> Iterator[RunningCluster]:
        """A fresh cluster of three brokers and a private ZooKeeper for one test."""
        with running_cluster(brokers=3) as cluster:
            yield cluster
