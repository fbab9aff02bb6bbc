"""A real cluster for the cluster and fault tiers: ``odradek serve`` processes sharing a
real ZooKeeper, each on its own port and data directory, that a test can stop, kill -9,
pause (SIGSTOP) and restart on the same port. Given a ``NetworkCuts`` (tests/netcut.py:
``run_cluster(..., cuts=cuts)``), each broker runs in a cgroup of its own, and a test can
cut one off the other brokers and/or ZooKeeper (``isolate``) and ``heal`` it.

Brokers run with short timeouts so failures are noticed in seconds:
``zookeeper.session.timeout.ms`` (a dead or paused broker's registration goes),
``replica.lag.time.max.ms`` (a stalled follower leaves the ISR), and few internal-topic
partitions (each is a log to create and replicate).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from odradek import devcluster
from tests.interop.conftest import BrokerProcess, start_broker
from tests.zookeeper import ZooKeeperServer

if TYPE_CHECKING:
    from tests.netcut import NetworkCuts

# odradek.testing's fast settings (odradek.devcluster), and three replicas by default.
FAST_SETTINGS = {**devcluster.FAST_SETTINGS, "num.partitions": 1,
                 "default.replication.factor": 3}
SESSION_TIMEOUT_MS: int = FAST_SETTINGS["zookeeper.session.timeout.ms"]


@dataclass
class ClusterBroker:
    node_id: int
    data_dir: Path
    port: int = 0  # 0 until first started; restarts reuse it
    process: BrokerProcess | None = None
    _context: Any = None
    stopped_by_test: bool = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.process.poll() is None


@dataclass
class Cluster:
    """N brokers on one ZooKeeper chroot. Use as a context manager (``run_cluster``)."""

    zookeeper: ZooKeeperServer
    root: Path
    size: int = 3
    settings: dict[str, Any] = field(default_factory=dict)
    chroot: str = ""
    brokers: dict[int, ClusterBroker] = field(default_factory=dict)
    cuts: NetworkCuts | None = None  # each broker in a cgroup of its own: isolate()/heal()
    # Settings of one broker only (node id -> settings), over ``settings``: broker.rack.
    node_settings: dict[int, dict[str, Any]] = field(default_factory=dict)
    # librdkafka settings of the clients this helper makes (a secured cluster's login).
    client_settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.chroot = self.chroot or f"/odradek-{time.monotonic_ns()}"
        for node in range(1, self.size + 1):
            self.brokers[node] = ClusterBroker(node, self.root / f"broker-{node}")

    @property
    def connect(self) -> str:
        return f"{self.zookeeper.connect_string}{self.chroot}"

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.port)

    def broker_args(self, broker: ClusterBroker) -> list[str]:
        """`odradek serve` options (after --listen and --data-dir) of ``broker``."""
        settings = {**FAST_SETTINGS, **self.settings,
                    **self.node_settings.get(broker.node_id, {}), "node.id": broker.node_id,
                    "zookeeper.connect": self.connect}
        args = [f"--override={k}={v}" for k, v in settings.items()]
        if broker.port:
            args.append(f"--listen=127.0.0.1:{broker.port}")
        return args

    def start(self, node: int) -> ClusterBroker:
        broker = self.brokers[node]
        assert not broker.running, f"broker {node} is running"
        broker.data_dir.mkdir(parents=True, exist_ok=True)
        prefix = None if self.cuts is None else self.cuts.prefix(_group_name(node))
        broker._context = start_broker(broker.data_dir, *self.broker_args(broker),
                                       argv_prefix=prefix)
        broker.process = broker._context.__enter__()
        broker.port = broker.process.port
        broker.stopped_by_test = False
        return broker

    def start_all(self) -> None:
        for node in self.brokers:
            self.start(node)
        self.wait_for(lambda: len(self.live_brokers()) == self.size, 60,
                      "every broker registered")
        # ... and every broker has seen every registration (its own watch can lag
        # ZooKeeper by a moment; CreateTopics there would find too few brokers).
        self.wait_for(lambda: all(self.brokers_seen_by(n) == self.size for n in self.brokers),
                      30, "every broker seeing every other")

    def add_broker(self) -> ClusterBroker:
        """Start one more broker (the next node id) and wait until it is registered."""
        node = max(self.brokers) + 1
        self.brokers[node] = ClusterBroker(node, self.root / f"broker-{node}")
        self.start(node)
        self.wait_for(lambda: node in self.live_brokers(), 60, f"broker {node} registered")
        # And known to every broker's Metadata answer: librdkafka sends a broker resource's
        # configs to that broker, and one it has not heard of from the broker it asked it
        # waits for until its next metadata refresh (minutes) - the CI flake of
        # test_reassignment's controller failover.
        count = len(self.live_brokers())
        self.wait_for(lambda: all(self.brokers_seen_by(n) == count
                                  for n in self.live_brokers()), 60,
                      f"every broker listing broker {node}")
        return self.brokers[node]

    def brokers_seen_by(self, node: int) -> int:
        """How many brokers ``node``'s own Metadata answer lists."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.client_settings,
                             "bootstrap.servers": self.brokers[node].bootstrap,
                             "socket.timeout.ms": 5000})
        return len(admin.list_topics(timeout=5).brokers)

    def leaders_seen_by(self, node: int, topic: str) -> dict[int, int]:
        """Partition -> leader as ``node``'s own Metadata answer has them (-1: none yet;
        empty: it does not know the topic). The project's client, which asks exactly
        that broker (plaintext clusters only)."""
        from odradek.client.metadata import fetch_metadata

        found = fetch_metadata(self.brokers[node].bootstrap, topics=[topic],
                               timeout_s=5).topics.get(topic)
        return {} if found is None else {p.partition: p.leader for p in found.partitions}

    def wait_for_topic_everywhere(self, topic: str, partitions: int,
                                  timeout_s: float = 30) -> None:
        """Until every running broker's Metadata lists ``topic`` with a leader for each
        partition (as Kafka's TestUtils.createTopic waits for the metadata to reach every
        broker): the controller has elected them, the others hear of it through their
        ZooKeeper watches a moment later. A client starting in that moment learns of a
        topic without partitions from whichever broker it asks first."""
        assert not self.client_settings, "a secured cluster: ask through a logged-in client"

        def known() -> bool:
            for node, broker in self.brokers.items():
                if broker.running:
                    leaders = self.leaders_seen_by(node, topic)
                    if len(leaders) != partitions or min(leaders.values()) < 0:
                        return False
            return True

        self.wait_for(known, timeout_s, f"every broker's metadata for {topic}")

    def stop(self, node: int) -> None:
        """SIGTERM and a clean exit (code 0), as start_broker checks."""
        broker = self.brokers[node]
        if broker._context is not None:
            context, broker._context = broker._context, None
            context.__exit__(None, None, None)
        broker.stopped_by_test = True

    def kill(self, node: int) -> None:
        """kill -9: no shutdown, no flush, the registration stays until the session ends."""
        broker = self.brokers[node]
        assert broker.process is not None
        broker.process.kill()
        self.stop(node)

    def pause(self, node: int) -> None:
        import os
        import signal

        os.kill(self.brokers[node].pid, signal.SIGSTOP)

    def resume(self, node: int) -> None:
        import os
        import signal

        os.kill(self.brokers[node].pid, signal.SIGCONT)

    # --- network partitions (with cuts) ----------------------------------------------------

    def _group(self, node: int) -> str:
        if self.cuts is None:
            raise RuntimeError("network cuts need run_cluster(..., cuts=NetworkCuts())")
        return self.cuts.group_for(_group_name(node))

    def isolate(self, node: int, *, from_brokers: bool = True,
                from_zookeeper: bool = True) -> None:
        """Cut broker ``node`` off the other brokers (both ways: nothing it sends to their
        ports, nothing they send to its port, gets through) and/or from ZooKeeper (what it
        sends to ZooKeeper's port). Clients still reach every broker."""
        group = self._group(node)
        assert self.cuts is not None
        port = self.brokers[node].port
        assert port, f"broker {node} has never been started"
        if from_brokers:
            for other, broker in self.brokers.items():
                if other != node and broker.port:
                    self.cuts.cut(group, broker.port)
                    self.cuts.cut(self._group(other), port)
        if from_zookeeper:
            self.cuts.cut(group, self.zookeeper.port)

    def heal(self, node: int) -> None:
        """Undo ``isolate(node)``: every cut between it and the others and ZooKeeper."""
        group = self._group(node)
        assert self.cuts is not None
        port = self.brokers[node].port
        for other, broker in self.brokers.items():
            if other != node and broker.port:
                self.cuts.heal(group, broker.port)
                self.cuts.heal(self._group(other), port)
        self.cuts.heal(group, self.zookeeper.port)

    def close(self) -> None:
        """Stop every broker still running, each whatever happened to the others (a
        broker that does not exit 0 fails the test, after the rest are stopped)."""
        if self.cuts is not None:  # a test that failed mid-cut: stop brokers that can talk
            with contextlib.suppress(Exception):
                self.cuts.heal_all()
        first: BaseException | None = None
        for node, broker in self.brokers.items():
            if broker._context is not None:
                try:
                    if broker.running and _is_stopped(broker.pid):
                        self.resume(node)
                    self.stop(node)
                except BaseException as exc:  # pytest.fail is a BaseException
                    first = first or exc
        if first is not None:
            raise first

    # --- what ZooKeeper says ------------------------------------------------------------

    @contextlib.contextmanager
    def zk(self) -> Iterator[KazooClient]:
        client = KazooClient(hosts=self.connect, timeout=10)
        client.start(timeout=10)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def live_brokers(self) -> list[int]:
        with self.zk() as client:
            if not client.exists("/brokers/ids"):
                return []
            return sorted(int(c) for c in client.get_children("/brokers/ids"))

    def controller(self) -> int:
        with self.zk() as client:
            if not client.exists("/controller"):
                return -1
            return int(json.loads(client.get("/controller")[0])["brokerid"])

    def state(self, topic: str, partition: int) -> dict[str, Any] | None:
        with self.zk() as client:
            path = f"/brokers/topics/{topic}/partitions/{partition}/state"
            if not client.exists(path):
                return None
            return json.loads(client.get(path)[0])

    def leader(self, topic: str, partition: int = 0) -> int:
        state = self.state(topic, partition)
        return -1 if state is None else int(state["leader"])

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        state = self.state(topic, partition)
        return [] if state is None else sorted(state["isr"])

    def replicas(self, topic: str) -> dict[int, list[int]]:
        """Each partition's assigned replicas, in order: the first is the preferred leader."""
        with self.zk() as client:
            data = json.loads(client.get(f"/brokers/topics/{topic}")[0])
        return {int(p): list(r) for p, r in data["partitions"].items()}

    def led_by_preferred(self, topic: str) -> bool:
        """Every partition of ``topic`` led by its preferred (first) replica."""
        return all(self.leader(topic, p) == replicas[0]
                   for p, replicas in self.replicas(topic).items())

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except Exception:  # ZooKeeper briefly unreachable, a znode mid-change
                pass
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}\n"
                             + self.output())

    # --- what the clients and the disks say -----------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, rf: int = 3, **configs: str) -> None:
        """CreateTopics through a real client (it waits for the partitions' leaders)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, rf, config=configs)],
                                      operation_timeout=30)
        futures[name].result(timeout=60)

    def wait_for_full_isr(self, topic: str, partitions: int, timeout_s: float = 60) -> None:
        everyone = sorted(self.brokers)
        self.wait_for(lambda: all(self.isr(topic, p) == everyone for p in range(partitions)),
                      timeout_s, f"every replica of {topic} in sync")

    def log_bytes(self, node: int, topic: str, partition: int) -> bytes:
        directory = self.brokers[node].data_dir / f"{topic}-{partition}"
        return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))

    def stop_all_and_compare_replicas(self, topic: str, partitions: int) -> None:
        """Stop every broker cleanly, then require each partition's log bytes to be the
        same on every replica (segments concatenated: replicas may roll differently)."""
        for node in self.brokers:
            if self.brokers[node].running:
                self.stop(node)
        for p in range(partitions):
            copies = {node: self.log_bytes(node, topic, p) for node in self.brokers}
            lengths = {node: len(data) for node, data in copies.items()}
            assert len(set(copies.values())) == 1, f"{topic}-{p}: replicas differ {lengths}"

    def output(self) -> str:
        parts = []
        for node, broker in self.brokers.items():
            if broker.process is not None:
                parts.append(f"=== broker {node} (pid {broker.process.pid}) ===\n"
                             + broker.process.output()[-20000:])
        return "\n".join(parts)


def _group_name(node: int) -> str:
    return f"broker-{node}"


def _is_stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("T")
    except OSError:
        return False


@contextlib.contextmanager
def run_cluster(zookeeper: ZooKeeperServer, root: Path, size: int = 3, *,
                cuts: NetworkCuts | None = None,
                node_settings: dict[int, dict[str, Any]] | None = None,
                client_settings: dict[str, str] | None = None,
                **settings: Any) -> Iterator[Cluster]:
    """Start ``size`` brokers on ``zookeeper`` (a chroot of their own); stop each cleanly
    at the end (a broker that does not exit 0 fails the test). With ``cuts``, each broker
    runs in a cgroup of its own (``Cluster.isolate``/``heal``); the caller owns ``cuts``
    (its ``with`` block must outlast this one). ``node_settings`` gives brokers settings
    of their own (``{1: {"broker.rack": "a"}, ...}``); ``client_settings`` are librdkafka
    settings for the clients the helper makes (a secured cluster's login)."""
    cluster = Cluster(zookeeper, root, size, settings, cuts=cuts,
                      node_settings=node_settings or {},
                      client_settings=client_settings or {})
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.close()
