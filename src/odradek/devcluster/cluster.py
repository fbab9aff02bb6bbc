"""ZooKeeper and N brokers started together, ready once every broker's own Metadata
lists every broker; a broker can be stopped and started again on the same port;
``close`` stops the brokers one at a time, the controller last (each does a controlled
shutdown), then ZooKeeper."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from odradek.devcluster.broker import (
    BROKER_START_TIMEOUT_S,
    BROKER_STOP_TIMEOUT_S,
    BrokerProcess,
)
from odradek.devcluster.processes import ClusterError, port_in_use
from odradek.devcluster.zookeeper import ZooKeeperServer

DEFAULT_BASE_PORT = 9092
DEFAULT_CHROOT = "/odradek"
REGISTER_TIMEOUT_S = 60.0  # every broker seeing every other

# Development clusters notice a dead broker in seconds rather than Kafka's 18 s, and
# keep few internal-topic partitions (each is a log per replica to create and move).
# ``odradek.testing`` starts from these; ``odradek cluster up`` keeps Kafka's.
FAST_SETTINGS: dict[str, Any] = {
    "zookeeper.session.timeout.ms": 4000,
    "zookeeper.connection.timeout.ms": 10000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 200,
    "replica.socket.timeout.ms": 5000,
    "offsets.topic.num.partitions": 4,
    "transaction.state.log.num.partitions": 4,
    "share.coordinator.state.topic.num.partitions": 4,
    "group.initial.rebalance.delay.ms": 0,
    "controlled.shutdown.retry.backoff.ms": 2000,
}


def cluster_defaults(brokers: int) -> dict[str, Any]:
    """The replication settings a cluster of ``brokers`` brokers should run with: Kafka's
    production values (3 replicas, 2 in sync for acks=all) where there are enough
    brokers, smaller where there are not (Kafka refuses to create its internal topics
    with fewer brokers than their replication factor)."""
    replicas = min(3, brokers)
    in_sync = max(1, min(2, replicas - 1))  # one replica may be down without refusing writes
    return {
        "default.replication.factor": replicas,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": in_sync,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": in_sync,
        "min.insync.replicas": in_sync,
    }


def host_racks(brokers: int, per_host: int) -> dict[int, dict[str, Any]]:
    """``broker.rack`` per node id for ``brokers`` brokers laid out ``per_host`` to a host:
    brokers 1..per_host in rack ``host-1``, the next ones in ``host-2``, and so on (the
    last host may hold fewer). One rack per host is what makes rack-aware placement keep
    a partition's replicas on different hosts, so that losing a host loses one replica
    of each partition (docs/operations.md, "Every core of a host")."""
    if per_host < 1:
        raise ValueError("a host holds at least one broker")
    return {node: {"broker.rack": f"host-{(node - 1) // per_host + 1}"}
            for node in range(1, brokers + 1)}


class DevCluster:
    """ZooKeeper and ``size`` brokers, node ids 1..size, data under ``root``:

        root/zookeeper/     zoo.cfg, data/, zookeeper.log
        root/broker-N/      broker N's data directory
        root/logs/broker-N.log

    ``zookeeper``: None, a ZooKeeper of the cluster's own, started and stopped with it;
    a ``ZooKeeperServer`` someone else runs (the test suite's, a benchmark's, shared by
    many clusters), neither started nor stopped here, the brokers in ``chroot`` of it;
    or a connect string ``HOST:PORT[,...][/CHROOT]`` used as it is.

    Ports: ``base_port``, ``base_port + 1``, ... (``base_port=0``: free ones). The same
    ``root`` again is the same cluster: ZooKeeper's data holds the cluster id the brokers'
    meta.properties remember.

    Settings: ``settings`` over ``defaults`` (default: ``cluster_defaults(size)``), and
    ``node_settings[N]`` over both for broker N only (``broker.rack``).

    Subclasses add what they need around this (tests/cluster_processes.py: faults;
    bench/cluster_bench.py: measurements): ``make_broker`` makes each broker's
    ``BrokerProcess``, ``metadata_brokers`` asks a broker which brokers it knows (a
    secured cluster's clients log in) and ``controller`` which is the controller."""

    def __init__(self, root: Path | str, size: int = 3, *,
                 zookeeper: str | ZooKeeperServer | None = None,
                 chroot: str = DEFAULT_CHROOT, base_port: int = DEFAULT_BASE_PORT,
                 settings: Mapping[str, Any] | None = None,
                 defaults: Mapping[str, Any] | None = None,
                 node_settings: Mapping[int, Mapping[str, Any]] | None = None,
                 zookeeper_tick_ms: int = 200, die_with_parent: bool = False) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one broker")
        self.root = Path(root)
        self.size = size
        self.base_port = base_port
        self.die_with_parent = die_with_parent
        self.chroot = chroot
        self.zookeeper: ZooKeeperServer | None = None
        self.owns_zookeeper = zookeeper is None  # started and stopped with the cluster
        self._zookeeper_connect: str | None = None
        if zookeeper is None:
            self.zookeeper = ZooKeeperServer(self.root / "zookeeper",
                                             tick_time_ms=zookeeper_tick_ms,
                                             die_with_parent=die_with_parent)
        elif isinstance(zookeeper, ZooKeeperServer):
            self.zookeeper = zookeeper
        else:
            self._zookeeper_connect = zookeeper
        self.settings = {**(cluster_defaults(size) if defaults is None else defaults),
                         **(settings or {})}
        self.node_settings = {node: dict(s) for node, s in (node_settings or {}).items()}
        self.stop_timeout_s = BROKER_STOP_TIMEOUT_S  # SIGTERM to SIGKILL, each broker
        self.brokers: dict[int, BrokerProcess] = {
            node: self.make_broker(node) for node in range(1, size + 1)}
        self.cluster_id: str | None = None
        self._lock: Any = None

    def make_broker(self, node: int) -> BrokerProcess:
        """Broker ``node``'s process (not started): data in root/broker-N, output in
        root/logs/broker-N.log, on base_port + N - 1 (or a free port)."""
        return BrokerProcess(
            node, self.root / f"broker-{node}", self.root / "logs" / f"broker-{node}.log",
            port=self.base_port + node - 1 if self.base_port else 0,
            die_with_parent=self.die_with_parent)

    @property
    def zookeeper_connect(self) -> str:
        """The ``zookeeper.connect`` the brokers use (with its chroot)."""
        if self._zookeeper_connect is not None:
            return self._zookeeper_connect
        assert self.zookeeper is not None
        return self.zookeeper.connect_string + self.chroot

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated, for ``bootstrap.servers``."""
        return ",".join(b.bootstrap for b in self.brokers.values() if b.port)

    def check_ports(self) -> None:
        """ClusterError naming every fixed broker port already in use."""
        taken = [b.port for b in self.brokers.values() if b.port and port_in_use(b.port)]
        if taken:
            ports = ", ".join(str(p) for p in taken)
            raise ClusterError(
                f"port{'s' if len(taken) > 1 else ''} {ports} of 127.0.0.1 "
                f"{'are' if len(taken) > 1 else 'is'} in use (another broker or cluster "
                "running?); stop it or choose other ports")

    def _lock_root(self) -> None:
        """Hold ``root/.lock`` while the cluster runs: two clusters on one directory
        would start two ZooKeepers on one data directory."""
        import fcntl

        if self._lock is not None:  # started again after its brokers were stopped
            return
        self.root.mkdir(parents=True, exist_ok=True)
        lock = open(self.root / ".lock", "a+")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise ClusterError(f"{self.root} is in use by another cluster (odradek cluster "
                               "up?); stop it or choose another data directory") from None
        self._lock = lock

    def _unlock_root(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # closing releases the lock

    def broker_settings(self, node: int) -> dict[str, Any]:
        """Broker ``node``'s ``--override`` settings (its ``node.id`` aside)."""
        return {**self.settings, **self.node_settings.get(node, {}),
                "zookeeper.connect": self.zookeeper_connect}

    def start(self, interrupted: Callable[[], bool] = lambda: False,
              on_zookeeper: Callable[[], None] | None = None) -> None:
        """Start ZooKeeper and every broker and wait until each broker sees all of them.
        On failure everything started is stopped again before ClusterError is raised."""
        self._lock_root()
        try:
            self.check_ports()
        except ClusterError:
            self._unlock_root()
            raise
        try:
            if self.zookeeper is not None and self.owns_zookeeper:
                self.zookeeper.start()
            if on_zookeeper is not None:
                on_zookeeper()
            for node in self.brokers:
                # Started together: each takes a second or two of interpreter start.
                self.start_broker(node, wait=False)
            deadline = time.monotonic() + BROKER_START_TIMEOUT_S
            for broker in self.brokers.values():
                broker.wait_ready(deadline, interrupted)
            self.wait_registered(interrupted=interrupted)
        except BaseException:
            with contextlib.suppress(ClusterError):
                self.close()
            raise

    def start_broker(self, node: int, *, wait: bool = True,
                     everywhere: bool = True) -> BrokerProcess:
        """Start broker ``node`` (again: on the port it had); with ``wait``, until it
        serves (it has registered in ZooKeeper) and, with ``everywhere``, until every
        running broker lists it too."""
        broker = self.brokers[node]
        broker.settings = self.broker_settings(node)
        broker.start()
        if wait:
            broker.wait_ready(time.monotonic() + BROKER_START_TIMEOUT_S)
            if everywhere:
                self.wait_registered()
        return broker

    def add_broker(self) -> BrokerProcess:
        """One more broker, the next node id, started; ready once every running broker
        lists it: librdkafka sends a broker resource's configs to that broker, and one it
        has not heard of from the broker it asked it waits for until its next metadata
        refresh (minutes; the CI flake of test_reassignment's controller failover)."""
        node = max(self.brokers) + 1
        self.brokers[node] = self.make_broker(node)
        self.size = len(self.brokers)
        return self.start_broker(node, wait=True, everywhere=True)

    def stop_broker(self, node: int) -> int | None:
        """SIGTERM broker ``node`` (a controlled shutdown) and wait for it to exit
        (SIGKILL after ``stop_timeout_s``); its exit code (None: it was not running).
        ClusterError if it had to be killed, or exited with an error unless ``kill``ed
        before."""
        broker = self.brokers[node]
        code = broker.stop(self.stop_timeout_s)
        if code not in (0, None) and not broker.killed:
            raise ClusterError(f"broker {node} exited with code {code}\n"
                               f"{broker.describe_log()}")
        return code

    def running_brokers(self) -> list[BrokerProcess]:
        return [b for b in self.brokers.values() if b.running]

    def running_nodes(self) -> dict[int, BrokerProcess]:
        return {node: b for node, b in self.brokers.items() if b.running}

    def wait_registered(self, timeout_s: float = REGISTER_TIMEOUT_S,
                        interrupted: Callable[[], bool] = lambda: False) -> None:
        """Until the Metadata of every running broker lists every running broker (a
        broker's view of ZooKeeper can lag it by a moment; a topic created through it
        meanwhile would find too few brokers)."""
        from odradek.client.connection import KafkaClientError

        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while True:
            running = self.running_nodes()
            wanted = set(running)
            try:
                seen = {node: self.metadata_brokers(node) for node in running}
                lagging = {n: sorted(s) for n, s in seen.items() if s != wanted}
                if not lagging:
                    return
                last = "; ".join(f"broker {n} sees {s}" for n, s in lagging.items())
            except KafkaClientError as exc:
                last = str(exc)
            if interrupted():
                raise ClusterError("interrupted")
            if time.monotonic() > deadline:
                raise ClusterError(f"brokers {sorted(wanted)} did not all see each other "
                                   f"within {timeout_s:.0f}s: {last}")
            time.sleep(0.2)

    def metadata_brokers(self, node: int) -> set[int]:
        """The node ids broker ``node``'s own Metadata answer lists (KafkaClientError if
        it does not answer); notes the cluster id it names."""
        from odradek.client.codec import METADATA
        from odradek.client.connection import BrokerConnection

        conn = BrokerConnection("127.0.0.1", self.brokers[node].port,
                                client_id="odradek-cluster", timeout_s=5)
        try:
            answer = conn.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
        finally:
            conn.close()
        self.cluster_id = answer.cluster_id
        return {b.node_id for b in answer.brokers}

    def controller(self) -> int:
        """The controller's node id, as a running broker says (-1 if none answers)."""
        from odradek.client.codec import METADATA
        from odradek.client.connection import BrokerConnection, KafkaClientError

        for broker in self.running_brokers():
            try:
                conn = BrokerConnection("127.0.0.1", broker.port,
                                        client_id="odradek-cluster", timeout_s=5)
            except KafkaClientError:
                continue
            try:
                answer = conn.request(METADATA, {"topics": [],
                                                 "allow_auto_topic_creation": False})
                return int(answer.controller_id)
            except KafkaClientError:
                continue
            finally:
                conn.close()
        return -1

    def stop_order(self) -> list[int]:
        """The running brokers, the controller last: each stop moves leadership to the
        brokers still up, and the controller moves only once, at the very end."""
        controller = self.controller()
        return sorted(self.running_nodes(), key=lambda n: (n == controller, n))

    def close(self, on_stop: Callable[[int, int | None], None] | None = None,
              hurry: Callable[[], bool] = lambda: False) -> None:
        """Stop every broker (one at a time, the controller last), then ZooKeeper.
        ``on_stop(node, exit_code)`` after each broker; with ``hurry()`` true, the
        brokers still running are killed instead. ClusterError (after stopping
        everything) if a broker exited with an error or had to be killed."""
        problems: list[str] = []
        try:
            order = self.stop_order()
        except Exception:  # whatever the brokers answer, they are stopped
            order = list(self.running_nodes())
        for node in [*order, *(n for n in self.brokers if n not in order)]:
            broker = self.brokers[node]
            if broker.process is None:
                continue
            was_running = broker.running
            killed = broker.killed  # by the caller, before: no clean exit expected
            try:
                code = broker.stop(self.stop_timeout_s, hurry=hurry)
            except ClusterError as exc:
                problems.append(str(exc))
                code, killed = broker.returncode, True
            if was_running and on_stop is not None:
                on_stop(node, code)
            if code not in (0, None) and not killed:
                problems.append(f"broker {node} exited with code {code}\n"
                                f"{broker.describe_log()}")
            broker.process = None
        if self.zookeeper is not None and self.owns_zookeeper:
            self.zookeeper.stop()
        self._unlock_root()
        if problems:
            raise ClusterError("\n".join(problems))

    def dead(self) -> list[BrokerProcess]:
        """Brokers whose process has ended without being told to (crashed, killed)."""
        return [b for b in self.brokers.values()
                if b.process is not None and b.process.poll() is not None]

    def pids(self) -> Iterable[int]:
        """Every process this cluster started that still runs."""
        if (self.zookeeper is not None and self.owns_zookeeper and self.zookeeper.running
                and self.zookeeper.pid):
            yield self.zookeeper.pid
        for broker in self.running_brokers():
            assert broker.pid is not None
            yield broker.pid
