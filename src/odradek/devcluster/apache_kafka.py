"""A real Apache Kafka 4.x broker for tests and benchmarks: one node in KRaft mode
(broker and controller in one JVM), started from the jars scripts/fetch_jvm.sh copies
(.cache/jvm/lib, ``odradek.devcluster.jvm``) with ``java -cp``, as Kafka's own scripts
would start it.

    with ApacheKafka(tmp_dir) as kafka:           # formats the storage, starts, waits
        WireClient(kafka.port).request(18, 3, {...})
        print(kafka.startup_seconds)

- The storage is formatted first (``kafka.tools.StorageTool format --standalone``, a
  cluster id from its ``random-uuid`` command): Kafka 4 has no ZooKeeper mode, and a
  KRaft node refuses to start on an unformatted log directory.
- Listeners: PLAINTEXT on 127.0.0.1 and a free port (clients), CONTROLLER on another
  (the node's own Raft quorum), advertised as 127.0.0.1.
- Settings a single node needs (internal topics with replication factor 1) and
  ``group.initial.rebalance.delay.ms=0`` (Odradek does not delay a group's first
  rebalance either); everything else is Kafka's default.
- The heap is Kafka's scripts' default, ``-Xmx1G -Xms1G``; the rest of the JVM settings
  are the JVM's own defaults (the scripts add G1 tuning flags we leave out).
- Ready means: it answers ApiVersions *and* its Metadata lists itself as a broker with a
  controller, so topics can be created at once (a KRaft broker answers ApiVersions while
  still fenced).
- Stopped by its pid: SIGTERM (Kafka's controlled shutdown), SIGKILL after
  ``STOP_TIMEOUT``. Its output goes to ``kafka.log`` in the directory (never a pipe that
  could fill); ``output(tail)`` shows the end of it, for failure messages.

``ApacheKafkaCluster`` (bench/cluster_bench.py's baseline) runs three such nodes, each
broker and controller (node ids 1..3), as one cluster with a static quorum
(``controller.quorum.voters``; each storage formatted with the same cluster id and no
--standalone) and internal topics of replication factor 3, min ISR 2:

    with ApacheKafkaCluster(tmp_dir) as cluster:   # ready: Metadata lists 3 brokers
        print(cluster.bootstrap, cluster.pids)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from odradek.devcluster.jvm import LIB, classpath, java
from odradek.devcluster.processes import free_port, stop_process

KAFKA_VERSION = "4.4.0"
STARTUP_TIMEOUT = 120.0  # seconds: a cold JVM on two busy cores
STOP_TIMEOUT = 30.0  # seconds between SIGTERM and SIGKILL
FORMAT_TIMEOUT = 120.0
HEAP = ["-Xmx1G", "-Xms1G"]  # as kafka-server-start.sh sets KAFKA_HEAP_OPTS
# The jars log through slf4j-simple (on the classpath beside log4j): warnings only.
LOGGING = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
           "-Dorg.slf4j.simpleLogger.logFile=System.err"]
STORAGE_TOOL = "kafka.tools.StorageTool"  # kafka-storage.sh's main class (kafka_2.13 jar)
MAIN = "kafka.Kafka"  # kafka-server-start.sh's


def kafka_jars_present() -> bool:
    return LIB.is_dir() and any(LIB.glob(f"kafka_2.13-{KAFKA_VERSION}.jar"))


def random_cluster_id() -> str:
    """A new cluster id from ``kafka-storage random-uuid``."""
    uuid = subprocess.run(
        [java(), *LOGGING, "-cp", classpath(), STORAGE_TOOL, "random-uuid"],
        capture_output=True, text=True, timeout=FORMAT_TIMEOUT, check=True)
    return uuid.stdout.strip().splitlines()[-1]


class ApacheKafka:
    """One Apache Kafka node (KRaft, broker+controller) on 127.0.0.1, in ``directory``."""

    FORMAT_ARGS: tuple[str, ...] = ("--standalone",)  # a single-node dynamic quorum
    expected_brokers = 1  # ready when Metadata lists this many brokers

    def __init__(self, directory: Path | str, *, settings: dict[str, str] | None = None) -> None:
        self.directory = Path(directory)
        self.port = free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self.host = "127.0.0.1"
        self.bootstrap = f"{self.host}:{self.port}"
        self.extra_settings = dict(settings or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.cluster_id = ""
        self.format_seconds = 0.0
        self.startup_seconds = 0.0  # from `java kafka.Kafka` to ready
        self.ready_poll_s = 0.1  # between readiness probes (bench/ polls more often)
        self.log_file = self.directory / "kafka.log"

    # --- configuration --------------------------------------------------------------

    def settings(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.extra_settings,
        }

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    # --- lifecycle ------------------------------------------------------------------

    def _java(self, main: str, *args: str) -> list[str]:
        return [java(), *HEAP, *LOGGING, "-cp", classpath(), main, *args]

    def start(self) -> None:
        self.format()
        began = self.spawn()
        try:
            self._wait_ready(began + STARTUP_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began

    def format(self, cluster_id: str | None = None) -> None:
        """Write server.properties and format the log directory (``FORMAT_ARGS``), with
        ``cluster_id`` or a new one from ``random-uuid``."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(
            "".join(f"{k}={v}\n" for k, v in self.settings().items()))
        began = time.monotonic()
        self.cluster_id = cluster_id or random_cluster_id()
        formatted = subprocess.run(
            self._java(STORAGE_TOOL, "format", *self.FORMAT_ARGS, "-t", self.cluster_id,
                       "-c", str(self.properties_file)),
            capture_output=True, text=True, timeout=FORMAT_TIMEOUT)
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({formatted.returncode}):\n"
                               f"{formatted.stdout}\n{formatted.stderr}")
        self.format_seconds = time.monotonic() - began

    def spawn(self) -> float:
        """Start ``java kafka.Kafka`` (not waiting for it); returns when, monotonic."""
        began = time.monotonic()
        with open(self.log_file, "wb") as log:
            self.process = subprocess.Popen(
                self._java(MAIN, str(self.properties_file)), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, cwd=self.directory)
        return began

    def _wait_ready(self, deadline: float) -> None:
        from odradek.client.wire import WireClient

        last: object = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"Apache Kafka exited with code {self.process.returncode} "
                                   f"while starting\n{self.output()}")
            try:
                with WireClient(self.port, timeout=5.0) as c:
                    versions = c.request(18, 3, {"client_software_name": "odradek-tests",
                                                 "client_software_version": "0"})
                    if versions.error_code.value == 0:
                        meta = c.request(3, 12, {"topics": [],
                                                 "allow_auto_topic_creation": False})
                        if (len(meta.brokers) >= self.expected_brokers
                                and meta.controller_id >= 0):
                            return
                        last = meta
                    else:
                        last = versions
            except OSError as exc:  # not listening yet, or closed on us while starting
                last = exc
            time.sleep(self.ready_poll_s)
        raise TimeoutError(f"Apache Kafka was not ready within {STARTUP_TIMEOUT:.0f}s "
                           f"(last: {last!r})\n{self.output()}")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT``; by pid. Returns the exit code."""
        if self.process is None:
            return None
        return stop_process(self.process, STOP_TIMEOUT)[0]

    def output(self, tail: int = 60) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return "(no Kafka log)"
        return "--- Apache Kafka output (tail) ---\n" + "\n".join(lines[-tail:])

    def __enter__(self) -> ApacheKafka:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def apache_kafka(directory: Path | str, **kwargs: Any) -> Iterator[ApacheKafka]:
    """``ApacheKafka`` as a context manager function."""
    with ApacheKafka(directory, **kwargs) as kafka:
        yield kafka


# --- a 3-node cluster -------------------------------------------------------------------

CLUSTER_SIZE = 3
CLUSTER_MIN_ISR = 2


class ApacheKafkaNode(ApacheKafka):
    """One node of an ``ApacheKafkaCluster``: a static quorum (``controller.quorum.voters``
    instead of ``controller.quorum.bootstrap.servers``, so its storage is formatted with no
    --standalone), ready when Metadata lists every broker of the cluster."""

    FORMAT_ARGS = ()

    def __init__(self, directory: Path | str, node_id: int, *, brokers: int,
                 settings: dict[str, str] | None = None) -> None:
        super().__init__(directory, settings={"node.id": str(node_id), **(settings or {})})
        self.node_id = node_id
        self.expected_brokers = brokers

    def settings(self) -> dict[str, str]:
        out = super().settings()
        del out["controller.quorum.bootstrap.servers"]  # voters set in extra_settings
        return out

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


class ApacheKafkaCluster:
    """``size`` Apache Kafka nodes (each broker and controller, node ids 1..size) on
    127.0.0.1, in ``directory``/node-N, with a static quorum of all of them.

    Not a ``DevCluster``, though both start N brokers: this is another system, whose
    every step differs. No ZooKeeper (the nodes are their own KRaft quorum); each storage
    is formatted with one cluster id first; ports are chosen before the start, since
    every node's settings name every controller's port (``controller.quorum.voters``);
    ready is Metadata listing all nodes and a controller; and the nodes are stopped all
    at once, not one by one with the controller last (one at a time, the last ones
    would wait for a quorum that has gone). What it shares with DevCluster, the
    processes' stop (SIGTERM, then SIGKILL by pid) and ports, is ``processes``'.

    - Internal topics have replication factor 3 and min ISR 2
      (``offsets.topic.replication.factor``, ``transaction.state.log.*``, the share
      coordinator's); ``settings`` adds to or overrides every node's settings.
    - ``start()`` formats every node with one cluster id, spawns all of them (a quorum
      needs a majority of its voters up) and waits until each answers Metadata with all
      ``size`` brokers and a controller; ``startup_seconds`` is from the first spawn.
    - ``stop()`` sends SIGTERM to every node first (as kafka-server-stop.sh does: one
      at a time, the last ones would wait for a quorum that has gone), then waits for
      each, SIGKILL after ``STOP_TIMEOUT``; returns {node id: exit code}.
    - ``pids`` ({node id: pid}) for CPU and memory figures from /proc.
    """

    def __init__(self, directory: Path | str, *, size: int = CLUSTER_SIZE,
                 settings: dict[str, str] | None = None) -> None:
        self.directory = Path(directory)
        rf, min_isr = str(min(size, CLUSTER_SIZE)), str(min(size, CLUSTER_MIN_ISR))
        common = {
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            **(settings or {}),
        }
        self.nodes = {n: ApacheKafkaNode(self.directory / f"node-{n}", n, brokers=size,
                                         settings=common)
                      for n in range(1, size + 1)}
        ports = [p for node in self.nodes.values() for p in (node.port, node.controller_port)]
        if len(set(ports)) != len(ports):  # free_port() can hand out a port twice
            raise RuntimeError(f"port clash: {ports}; try again")
        voters = ",".join(f"{n}@127.0.0.1:{node.controller_port}"
                          for n, node in self.nodes.items())
        for node in self.nodes.values():
            node.extra_settings["controller.quorum.voters"] = voters
        self.bootstrap = ",".join(node.bootstrap for node in self.nodes.values())
        self.cluster_id = ""
        self.format_seconds = 0.0
        self.startup_seconds = 0.0
        self.ready_poll_s = 0.1

    @property
    def pids(self) -> dict[int, int]:
        return {n: node.pid for n, node in self.nodes.items() if node.process is not None}

    def start(self) -> None:
        began = time.monotonic()
        self.cluster_id = random_cluster_id()
        for node in self.nodes.values():
            node.ready_poll_s = self.ready_poll_s
            node.format(self.cluster_id)
        self.format_seconds = time.monotonic() - began
        try:
            began = min(node.spawn() for node in self.nodes.values())
            for node in self.nodes.values():
                node._wait_ready(began + STARTUP_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began

    def stop(self) -> dict[int, int | None]:
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.process.pid, signal.SIGTERM)
        return {n: node.stop() for n, node in self.nodes.items()}

    def output(self, tail: int = 20) -> str:
        return "\n".join(f"=== node {n} ===\n{node.output(tail)}"
                         for n, node in self.nodes.items())

    def __enter__(self) -> ApacheKafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
