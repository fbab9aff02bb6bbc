"""A real cluster for the cluster and fault tiers: ``odradek serve`` processes sharing a
real ZooKeeper, each on its own port and data directory, that a test can stop, kill -9,
pause (SIGSTOP) and restart on the same port. Given a ``NetworkCuts`` (tests/netcut.py:
``run_cluster(..., cuts=cuts)``), each broker runs in a cgroup of its own, and a test can
cut one off the other brokers and/or ZooKeeper (``isolate``) and ``heal`` it.

Starting, stopping and waiting for the brokers is ``odradek.devcluster.DevCluster``'s
(the launcher ``odradek cluster up`` and ``odradek.testing`` use); ``Cluster`` adds the
faults, what ZooKeeper says, and failures as failed tests with the brokers' output.

Brokers run with short timeouts so failures are noticed in seconds:
``zookeeper.session.timeout.ms`` (a dead or paused broker's registration goes),
``replica.lag.time.max.ms`` (a stalled follower leaves the ISR), and few internal-topic
partitions (each is a log to create and replicate).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kazoo.client import KazooClient

from odradek import devcluster
from tests.interop.conftest import STOP_TIMEOUT, BrokerProcess
from tests.zookeeper import ZooKeeperServer

if TYPE_CHECKING:
    from tests.netcut import NetworkCuts

# odradek.testing's fast settings (odradek.devcluster), and three replicas by default.
FAST_SETTINGS = {**devcluster.FAST_SETTINGS, "num.partitions": 1,
                 "default.replication.factor": 3}
SESSION_TIMEOUT_MS: int = FAST_SETTINGS["zookeeper.session.timeout.ms"]


@contextlib.contextmanager
def _failing() -> Iterator[None]:
    """A broker that cannot start or stop cleanly fails the test, with its log."""
    try:
        yield
    except devcluster.ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)


class Cluster(devcluster.DevCluster):
    """N brokers (``FAST_SETTINGS`` under ``settings``, ``node_settings`` over them for
    one broker: broker.rack) on a chroot of their own of ``zookeeper``, node ids 1..N,
    data in ``root``/broker-N, output in ``root``/broker-N.stdout and .stderr. Use as a
    context manager (``run_cluster``). ``client_settings`` are the librdkafka settings of
    the clients this helper makes (a secured cluster's login)."""

    zookeeper: ZooKeeperServer
    brokers: dict[int, BrokerProcess]

    def __init__(self, zookeeper: ZooKeeperServer, root: Path, size: int = 3,
                 settings: dict[str, Any] | None = None, *, chroot: str = "",
                 cuts: NetworkCuts | None = None,
                 node_settings: dict[int, dict[str, Any]] | None = None,
                 client_settings: dict[str, str] | None = None) -> None:
        super().__init__(root, size, zookeeper=zookeeper, base_port=0,
                         chroot=chroot or f"/odradek-{time.monotonic_ns()}",
                         defaults=FAST_SETTINGS, settings=settings,
                         node_settings=node_settings)
        self.stop_timeout_s = STOP_TIMEOUT
        self.cuts = cuts  # each broker in a cgroup of its own: isolate()/heal()
        self.client_settings = dict(client_settings or {})

    def make_broker(self, node: int) -> BrokerProcess:
        """Its output beside its data directory, stdout and stderr apart (this start's:
        ``output()``; its banner: ``metrics_url()``)."""
        data_dir = self.root / f"broker-{node}"
        return BrokerProcess(node, data_dir, data_dir.with_name(f"broker-{node}.stdout"),
                             stderr_path=data_dir.with_name(f"broker-{node}.stderr"))

    def broker_args(self, node: int) -> list[str]:
        """``odradek serve`` options (after --listen and --data-dir) of broker ``node``,
        for a test that starts one itself."""
        settings = {**self.broker_settings(node), "node.id": node}
        return [f"--override={k}={v}" for k, v in settings.items()]

    def start(self, interrupted: Callable[[], bool] = lambda: False,
              on_zookeeper: Callable[[], None] | None = None) -> None:
        """Every broker, until each lists every other."""
        with _failing():
            super().start(interrupted, on_zookeeper)

    def start_broker(self, node: int, *, wait: bool = True,
                     everywhere: bool = False) -> BrokerProcess:
        """Start broker ``node`` (again: same port and data) and, with ``wait``, until it
        serves (it has registered in ZooKeeper; the other brokers may not know yet:
        some may be paused or cut off)."""
        if self.cuts is not None:
            self.brokers[node].argv_prefix = self.cuts.prefix(_group_name(node))
        with _failing():
            return super().start_broker(node, wait=wait, everywhere=everywhere)

    def metadata_brokers(self, node: int) -> set[int]:
        """The brokers ``node``'s own Metadata answer lists, through librdkafka with
        ``client_settings`` (a secured cluster's login); none if it does not answer."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.client_settings,
                             "bootstrap.servers": self.brokers[node].bootstrap,
                             "socket.timeout.ms": 5000})
        try:
            return set(admin.list_topics(timeout=5).brokers)
        except Exception:  # not answering yet: asked again
            return set()

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

    def stop_broker(self, node: int) -> int | None:
        """SIGTERM and a clean exit (code 0), unless the test killed it."""
        with _failing():
            return super().stop_broker(node)

    def kill(self, node: int) -> None:
        """kill -9: no shutdown, no flush, the registration stays until the session ends."""
        self.brokers[node].kill()

    def pause(self, node: int) -> None:
        os.kill(self.brokers[node].pid, signal.SIGSTOP)

    def resume(self, node: int) -> None:
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

    def close(self, on_stop: Callable[[int, int | None], None] | None = None,
              hurry: Callable[[], bool] = lambda: False) -> None:
        """Heal every cut, then stop every broker still running, the controller last,
        each whatever happened to the others; ClusterError (after all are stopped) if
        one did not exit 0 and the test had not killed it."""
        if self.cuts is not None:  # a test that failed mid-cut: stop brokers that can talk
            with contextlib.suppress(Exception):
                self.cuts.heal_all()
        super().close(on_stop, hurry)

    # --- what ZooKeeper says ------------------------------------------------------------

    @contextlib.contextmanager
    def zk(self) -> Iterator[KazooClient]:
        client = KazooClient(hosts=self.zookeeper_connect, timeout=10)
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
                self.stop_broker(node)
        for p in range(partitions):
            copies = {node: self.log_bytes(node, topic, p) for node in self.brokers}
            lengths = {node: len(data) for node, data in copies.items()}
            assert len(set(copies.values())) == 1, f"{topic}-{p}: replicas differ {lengths}"

    def output(self) -> str:
        """Every broker's output of its last start (a stopped one's too)."""
        parts = []
        for node, broker in self.brokers.items():
            if broker.log_path.exists():
                pid = "stopped" if broker.process is None else f"pid {broker.process.pid}"
                parts.append(f"=== broker {node} ({pid}) ===\n" + broker.output()[-20000:])
        return "\n".join(parts)


def _group_name(node: int) -> str:
    return f"broker-{node}"


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
                      node_settings=node_settings, client_settings=client_settings)
    try:
        cluster.start()
        yield cluster
    finally:
        with _failing():
            cluster.close()
