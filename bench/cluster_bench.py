"""Cluster benchmark: a 3-broker Odradek cluster on ZooKeeper against one broker.

What it measures (the replication issue's targets), against processes it starts itself on
free ports of 127.0.0.1 with fresh data directories: a real ZooKeeper (Debian's
``zookeeper`` package, ``odradek.devcluster.ZooKeeperServer``, one for the whole run, each
cluster in a chroot of its own) and ``odradek serve`` processes (``Cluster``, an
``odradek.devcluster.DevCluster``). The cluster's brokers (node ids 1..3) run with the
default config except ``zookeeper.connect``, ``node.id``, ``zookeeper.session.timeout.ms``
(``--session-timeout-ms``, default Kafka's 18000) and whatever ``--broker-override``
adds; every cluster topic has replication factor 3 and ``min.insync.replicas=2``.

1. Throughput and CPU (``--only throughput``): the same librdkafka load as
   ``broker_bench.py`` (``confluent_kafka.Producer`` in this process, ``--records`` records
   of 100-byte values, linger.ms=5, batch.num.messages=100,000, no compression, no
   idempotence, no delivery callbacks; after an untimed, acknowledged warm-up of 1,000
   records per partition (``--warmup-records``; a fresh cluster's first acks=all answers
   take up to ~1 s: see ``warmup_s``), timed from the first ``produce()`` to the return
   of ``flush()``; then the topic's end offsets must add up to all records sent) against
   (a) a fresh 3-broker cluster, acks=all, and (b) a fresh single ``odradek serve`` (no
   ZooKeeper), acks=1. Two topic shapes: 1 partition (records to partition 0), and 3
   partitions (record i to partition i mod 3; in the cluster each broker leads one of
   them, which the report checks and prints). Broker CPU is ``proc_cpu_s`` of every broker
   process over the timed part, summed over the 3 brokers for (a); reported per million
   records, with each broker's share; beside it the brokers' peak RSS (summed for (a)).
   Rounds alternate which side goes first.
2. End-to-end latency (``--only latency``): ``latency_bench.one_run`` itself (its paced
   producer process and its consumer; see that file) at ``--rate`` records/s, once against
   a fresh 3-broker cluster (1 partition, RF 3, producer acks=all) and once against a fresh
   single broker (acks=1, exactly latency_bench's Odradek run), alternating. The cluster
   side hands one_run a fresh cluster that looks like one broker (``_LatencyCluster``: its
   bootstrap list, CPU summed over 3 pids), a topic maker (RF 3,
   min.insync.replicas=2) and acks=all. ``__consumer_offsets`` is created (FindCoordinator)
   before the run, since the consumer's group.id would otherwise create its 50 x 3 replicas
   while the clock runs.
3. Failover (``--only failover``), on one cluster and a 1-partition topic, while a producer
   process sends ``--failover-rate`` records/s (acks=all, linger.ms=5, delivery callbacks
   timed with ``time.time()`` as they are served; it waits in ``poll()``, so they are
   served within ~1 ms):
   (a) kill -9 of the partition's leader: the time from the kill to the first successful
   acknowledgement written by the new leader. "By the new leader" is told by ZooKeeper:
   the controller writes the new leader into the partition's state znode, whose ``mtime``
   is the election time; an acknowledgement served after it cannot come from the dead
   broker (acknowledgements between the kill and the election, responses already on their
   way, are counted apart). The leader before and after is also read from the client's
   metadata. Target: ``zookeeper.session.timeout.ms`` + 1 s. Beside it, a new producer
   made as soon as the new leader is seen sends one acks=all record: when the cluster
   itself can acknowledge again, without the running client's reconnect and metadata
   back-offs (``--rdkafka-debug metadata,topic,broker`` shows those).
   (b) SIGTERM of the partition's leader (controlled shutdown moves the leadership before
   the broker stops): the longest gap between consecutive successful acknowledgements from
   the last one before the signal until 1 s after the broker has exited, beside the longest
   gap of the steady second before the signal. Target: <= 200 ms.
   The stopped broker is restarted on the same port and data directory, and the next fault
   waits until all 3 replicas are back in the ISR. Each round does both faults (the order
   alternating; ``--faults`` picks one); medians over rounds.
4. Leader balance (``--only rebalance``, issue 16), on a cluster whose brokers run with
   ``leader.imbalance.check.interval.seconds`` = ``--imbalance-check-s``: the partition's
   preferred leader is stopped (SIGTERM; its leadership moves), the same producer process
   is started, the broker is started again and catches up; the controller's periodic
   check then elects it again. Measured: the longest gap between acknowledgements that
   overlaps the second after that election (its time: the state znode's mtime, watched as
   in (3)), beside the steady second before it. Target: <= 200 ms.
5. Rolling restart (``--only rolling``), on such a cluster: with the producer running,
   each broker in turn is stopped (SIGTERM), left down 1 s, started, back in the ISR and,
   for the preferred leader, leading again before the next. Measured: the longest gap
   between acknowledgements over the whole restart, and per broker the longest gap
   starting in each phase: its controlled shutdown (signal to restart), its restart
   (until back in the ISR), the wait for the periodic check, the election (to the next
   broker).

With ``--kafka``, parts 1 and 2 also run their cluster load, unchanged, against a fresh
3-node Apache Kafka cluster per run (``KafkaCluster``: ``odradek.devcluster.apache_kafka.
ApacheKafkaCluster``, Kafka 4.4 from the jars of scripts/fetch_jvm.sh, each node broker and
controller in one JVM (KRaft, a static quorum of the 3), ``-Xmx1G -Xms1G`` each as Kafka's
scripts set, internal topics RF 3 / min ISR 2, the rest Kafka's defaults; the topic RF 3
with ``min.insync.replicas=2``, the producer acks=all). Its runs take turns with the
Odradek cluster's in going first (odd rounds reverse the order of the three sides).
Leaders, ISR and the controller are read from the client's Metadata instead of ZooKeeper;
broker CPU and peak RSS (VmHWM) are summed over the 3 JVMs. The report adds Kafka's rows
and the ratios Odradek cluster / Kafka cluster, with targets: records/s >= 1.0, broker CPU
per record <= 0.5 (medians of per-round ratios), latency p99 <= 1.0 (p50 and p99.9 beside
it; pooled percentiles).

Every process it starts (ZooKeeper, brokers, the producer processes) is stopped by its pid
at the end, on an error and on Ctrl-C or SIGTERM too.

Run: ``.venv/bin/python bench/cluster_bench.py [--records 1000000] [--rounds 3] [--kafka]``
(see bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import cycle, islice, pairwise
from multiprocessing.connection import Connection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kazoo.client import KazooClient

import latency_bench
from _common import (
    finish,
    note,
    proc_cpu_s,
    proc_peak_rss_mib,
    proc_sys_s,
    self_cpu_s,
    shown_path,
)
from broker_bench import (
    LOAD_PRODUCER,
    ODRADEK,
    Broker,
    broker_machine_info,
    broker_machine_line,
)
from odradek.devcluster import (
    BrokerProcess,
    ClusterError,
    DevCluster,
    ZooKeeperServer,
    four_letter_word,
)
from odradek.devcluster.apache_kafka import (
    KAFKA_VERSION,
    ApacheKafkaCluster,
    kafka_jars_present,
)

CLUSTER = "cluster"
SINGLE = "single"
KAFKA_CLUSTER = "kafka-cluster"  # --kafka: Apache Kafka's 3-node cluster, the same load
CLUSTERS = (CLUSTER, KAFKA_CLUSTER)  # the sides that get a 3-broker cluster
LABELS = {CLUSTER: "3 brokers, RF 3, acks=all, min.insync.replicas=2",
          SINGLE: "1 broker, acks=1",
          KAFKA_CLUSTER: f"Apache Kafka {KAFKA_VERSION}: 3 brokers (KRaft), RF 3, acks=all, "
                         "min.insync.replicas=2"}
SIZE = 3
MIN_ISR = 2
PARTITION_SHAPES = (1, 3)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
STALL_TIMEOUT_S = 60.0
KILL_TARGET_EXTRA_S = 1.0  # kill -9 target: session timeout + this
GAP_TARGET_MS = 200.0  # SIGTERM target
RESTART_PAUSE_S = 1.0  # rolling restart: a broker stays down this long
LATENCY_P99_TARGET_MS = 10.0
RATIO_TARGET = 0.5
FAILOVER_TOPIC = "failover"
PARTS = ("throughput", "latency", "failover", "rebalance", "rolling")
WARMUP_RECORDS = 1000  # per partition, acknowledged before a throughput run is timed
# (--warmup-records: more gives a JVM's JIT time to compile Kafka's hot paths first)
KEEP = False  # --keep: leave data and logs in place
HUNG: list[dict[str, Any]] = []  # brokers that ignored SIGTERM, with their log's end


# --- processes ------------------------------------------------------------------------

_LIVE: dict[int, Callable[[], Any]] = {}  # pid -> how to stop it, for the last finally


def _children() -> list[int]:
    """Pids of this process's live children (not zombies), from /proc."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.append(int(entry))
    return out


def _stop_resource_tracker() -> None:
    """multiprocessing's resource tracker (started with the first spawned process) ends
    when its pipe closes, as it would at this process's exit; it ignores SIGTERM."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker  # no public way to stop it
    if getattr(tracker, "_pid", None) is not None:
        with contextlib.suppress(Exception):
            tracker._stop()


def _stop_leftovers() -> None:
    """Whatever is still running at the end (an error, Ctrl-C): each process stopped by
    its own stop(), then any other child of this process by pid (SIGTERM, SIGKILL)."""
    for pid, stop in list(_LIVE.items()):
        note(f"stopping leftover process {pid}")
        with contextlib.suppress(Exception):
            stop()
        _LIVE.pop(pid, None)
    left = []
    for pid in _children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = "?"
        if "multiprocessing.resource_tracker" in cmd:
            continue  # _stop_resource_tracker's
        if "org.apache.zookeeper" in cmd:
            continue  # main's finally stops it after the brokers
        note(f"stopping leftover child process {pid}: {cmd[:200]}")
        left.append(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if pid in _children()]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class ClusterNode(BrokerProcess):
    """One ``odradek serve`` of a ``Cluster`` (``odradek.devcluster``'s launcher: its node
    id, port and data dir survive restarts), in ``_LIVE`` while it runs; one that ignores
    SIGTERM is noted in ``HUNG``."""

    def start(self) -> None:
        super().start()
        assert self.pid is not None
        _LIVE[self.pid] = self.terminate

    def stop(self, timeout_s: float = STOP_TIMEOUT_S,
             hurry: Callable[[], bool] = lambda: False) -> int | None:
        pid = self.pid
        try:
            return super().stop(timeout_s, hurry)
        except ClusterError:
            note(f"  broker {self.node_id} (pid {pid}) ignored SIGTERM for "
                 f"{timeout_s:.0f} s: killed; the end of its output:\n{self.output()[-4000:]}")
            HUNG.append({"node": self.node_id, "log_tail": self.output()[-8000:]})
            raise
        finally:
            _LIVE.pop(pid or -1, None)

    def kill(self) -> None:
        """kill -9."""
        pid = self.pid
        super().kill()
        _LIVE.pop(pid or -1, None)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> tuple[int, float, bool]:
        """SIGTERM; SIGKILL after ``timeout_s``. Returns (exit code, seconds until it
        exited, whether it was killed)."""
        t0 = time.monotonic()
        try:
            code, killed = self.stop(timeout_s), False
        except ClusterError:
            code, killed = self.returncode, True
        assert code is not None
        return code, time.monotonic() - t0, killed

    def cpu_s(self) -> float:
        assert self.pid is not None
        return proc_cpu_s(self.pid)


class Measured:
    """What the loads and the report read of a cluster, Odradek's or Kafka's: its
    brokers' CPU time and peak RSS, waits that ``check_interrupted``, a topic of RF 3.
    Each also has ``start``, ``stop`` (exit codes), ``state`` (a partition's leader, ISR
    and when the controller wrote them) and ``controller``."""

    root: Path
    bootstrap: str
    replication_factor = SIZE  # of the topics the loads make

    def broker_pids(self) -> dict[int, int]:
        raise NotImplementedError

    def tails(self) -> str:
        """The end of every broker's output, for an error message."""
        raise NotImplementedError

    def full_isr(self, topic: str, partitions: int) -> bool:
        raise NotImplementedError

    def cpu_by_node(self) -> dict[int, float]:
        return {n: proc_cpu_s(pid) for n, pid in self.broker_pids().items()}

    def peak_rss_mib(self) -> float:
        """The brokers' peak resident sets (VmHWM), summed."""
        return sum(proc_peak_rss_mib(pid) for pid in self.broker_pids().values())

    def cpu_s(self) -> float:
        return sum(self.cpu_by_node().values())

    def remove(self) -> None:
        if not KEEP:
            shutil.rmtree(self.root, ignore_errors=True)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            check_interrupted()
            try:
                if predicate():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}\n"
                                   + self.tails())
            time.sleep(0.05)

    def create_topic(self, name: str, partitions: int) -> None:
        create_topic(self.bootstrap, name, partitions, SIZE, {"min.insync.replicas": str(MIN_ISR)})
        self.wait_for(lambda: self.full_isr(name, partitions), START_TIMEOUT_S,
                      f"every replica of {name} in sync")

    def metadata_leaders(self, topic: str, partitions: int) -> list[int]:
        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=10)
        parts = md.topics[topic].partitions
        return [parts[p].leader if p in parts else -1 for p in range(partitions)]


class Cluster(Measured, DevCluster):
    """``size`` (``SIZE``) brokers on a chroot of ``zookeeper`` (``odradek.devcluster.
    DevCluster``: started together, ready once each lists every other, stopped one at a
    time, the controller last); ``start()``, then ``stop()``. Their settings are
    ``settings`` over the brokers' defaults (no ``cluster_defaults``): the session timeout
    and ``--broker-override``; ``node_settings[N]`` over those for broker N
    (``broker.rack``). Leaders, ISR and the controller are read from ZooKeeper."""

    _count = 0

    def __init__(self, zookeeper: ZooKeeperServer, root: str, settings: dict[str, Any],
                 size: int = SIZE,
                 node_settings: dict[int, dict[str, Any]] | None = None) -> None:
        Cluster._count += 1
        super().__init__(tempfile.mkdtemp(prefix="cluster-", dir=root), size,
                         zookeeper=zookeeper, base_port=0, defaults={}, settings=settings,
                         node_settings=node_settings,
                         chroot=f"/odradek-bench-{os.getpid()}-{Cluster._count}")
        self.zk: KazooClient | None = None

    def make_broker(self, node: int) -> ClusterNode:
        return ClusterNode(node, self.root / f"broker-{node}", self.root / f"broker-{node}.log")

    def node(self, node: int) -> ClusterNode:
        broker = self.brokers[node]
        assert isinstance(broker, ClusterNode)
        return broker

    def start(self, interrupted: Callable[[], bool] = lambda: bool(_INTERRUPTED),
              on_zookeeper: Callable[[], None] | None = None) -> None:
        super().start(interrupted, on_zookeeper)
        self.zk = KazooClient(hosts=self.zookeeper_connect, timeout=10)
        self.zk.start(timeout=15)

    def stop(self) -> dict[int, int]:
        """SIGTERM to each running broker in turn, the controller last, waiting for each
        (DevCluster.close). Returns {node: exit code}. One at a time: each controlled
        shutdown moves its leadership to brokers still running, and the last has none
        left to move, so it stops at once; signalled together, each waited
        controlled.shutdown.max.retries x retry.backoff.ms (15 s) for partitions it could
        not move (seen with __consumer_offsets)."""
        codes: dict[int, int] = {}

        def stopped(node: int, code: int | None) -> None:
            if code is not None:
                codes[node] = code

        try:
            self.close(on_stop=stopped)
        except ClusterError:
            pass  # told by the exit codes (and HUNG)
        finally:
            if self.zk is not None:
                with contextlib.suppress(Exception):
                    self.zk.stop()
                    self.zk.close()
                self.zk = None
        return codes

    def broker_pids(self) -> dict[int, int]:
        return {n: b.pid for n, b in self.brokers.items() if b.pid is not None}

    def tails(self) -> str:
        return "\n".join(f"=== broker {n} ===\n{b.output()[-1500:]}"
                         for n, b in self.brokers.items())

    # --- what ZooKeeper says ------------------------------------------------------------

    def live_brokers(self) -> list[int]:
        assert self.zk is not None
        if not self.zk.exists("/brokers/ids"):
            return []
        return sorted(int(c) for c in self.zk.get_children("/brokers/ids"))

    def controller(self) -> int:
        assert self.zk is not None
        if not self.zk.exists("/controller"):
            return -1
        return int(json.loads(self.zk.get("/controller")[0])["brokerid"])

    def state(self, topic: str, partition: int) -> tuple[dict[str, Any], float] | None:
        """The partition's state znode and its mtime (wall clock, seconds)."""
        assert self.zk is not None
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        if not self.zk.exists(path):
            return None
        data, stat = self.zk.get(path)
        return json.loads(data), stat.mtime / 1000

    def full_isr(self, topic: str, partitions: int) -> bool:
        for p in range(partitions):
            st = self.state(topic, p)
            if st is None or sorted(st[0]["isr"]) != sorted(self.brokers):
                return False
        return True


class KafkaCluster(Measured):
    """``--kafka``: Apache Kafka's 3-node cluster (``devcluster.apache_kafka.ApacheKafkaCluster``:
    KRaft, each node broker and controller, a static quorum, internal topics RF 3 / min
    ISR 2, 1 GiB heap each, the rest Kafka's defaults) measured as ``Cluster`` is, so that
    the throughput and latency loads run on it unchanged. What ``Cluster`` reads from
    ZooKeeper (a partition's leader and ISR, the controller) comes from the client's
    Metadata here; ``--broker-override`` and the session timeout are Odradek's only."""

    def __init__(self, root: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kafka-cluster-", dir=root))
        self.kafka = ApacheKafkaCluster(self.root)
        self.kafka.ready_poll_s = 0.05
        self._admin: AdminClient | None = None

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    def start(self) -> None:
        try:
            self.kafka.start()  # formats, spawns all 3, waits for Metadata with 3 brokers
        finally:
            for pid in self.kafka.pids.values():
                _LIVE[pid] = self.kafka.stop
        note(f"  Apache Kafka cluster ready in {self.kafka.startup_seconds:.1f} s "
             f"(+ {self.kafka.format_seconds:.1f} s of storage format)")

    def stop(self) -> dict[int, int]:
        """All 3 signalled at once (ApacheKafkaCluster.stop). A JVM ends with 143 (128 +
        SIGTERM) once its shutdown hook (Kafka's controlled shutdown) is done: a clean
        stop, reported as 0; SIGKILL after odradek.devcluster.apache_kafka.STOP_TIMEOUT."""
        codes = self.kafka.stop()
        for pid in self.kafka.pids.values():
            _LIVE.pop(pid, None)
        return {n: 0 if rc == 128 + signal.SIGTERM else (rc if rc is not None else -1)
                for n, rc in codes.items()}

    def broker_pids(self) -> dict[int, int]:
        return self.kafka.pids

    def tails(self) -> str:
        return self.kafka.output(30)

    def _client(self) -> AdminClient:
        if self._admin is None:  # one for the cluster's life: polled every 50 ms
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap,
                                       "allow.auto.create.topics": False})
        return self._admin

    def _partitions(self, topic: str) -> dict[int, Any]:
        t = self._client().list_topics(topic, timeout=10).topics.get(topic)
        return {} if t is None or t.error is not None else t.partitions

    def state(self, topic: str, partition: int) -> tuple[dict[str, Any], float] | None:
        p = self._partitions(topic).get(partition)
        return None if p is None else ({"leader": p.leader, "isr": list(p.isrs)}, time.time())

    def full_isr(self, topic: str, partitions: int) -> bool:
        parts = self._partitions(topic)
        return len(parts) == partitions and all(
            p.leader >= 0 and sorted(p.isrs) == sorted(self.kafka.nodes)
            for p in parts.values())

    def controller(self) -> int:
        return self._client().list_topics(timeout=10).controller_id


class SingleNode(Measured):
    """One ``odradek serve`` (``broker_bench.Broker``, no ZooKeeper, node id 0) as the
    loads see a cluster: topics of RF 1, ``start()``, ``stop()`` (its exit code),
    ``remove()`` (data directory and output)."""

    replication_factor = 1

    def __init__(self, tmp_root: str) -> None:
        self.tmp_root = tmp_root
        self.broker: Broker | None = None
        self.bootstrap = ""
        self.brokers: dict[int, Any] = {}

    def start(self) -> None:
        self.broker = broker = Broker(ODRADEK, self.tmp_root)
        _LIVE[broker.pid] = broker.stop
        self.root = Path(broker.data_dir)
        self.bootstrap = broker.bootstrap
        self.brokers = {0: SimpleNamespace(log_path=Path(broker.log_path))}

    def broker_pids(self) -> dict[int, int]:
        return {} if self.broker is None else {0: self.broker.pid}

    def tails(self) -> str:
        return "" if self.broker is None else self.broker.output()[-1500:]

    def full_isr(self, topic: str, partitions: int) -> bool:
        return min(self.metadata_leaders(topic, partitions)) >= 0

    def stop(self) -> dict[int, int]:
        if self.broker is None:
            return {}
        rc = self.broker.stop()
        _LIVE.pop(self.broker.pid, None)
        return {0: -1 if rc is None else rc}

    def remove(self) -> None:
        if self.broker is not None and not KEEP:
            with contextlib.suppress(OSError):
                os.unlink(self.broker.log_path)
            super().remove()


def new_cluster(kind: str, zk: ZooKeeperServer, tmp_root: str,
                settings: dict[str, Any]) -> Cluster | KafkaCluster:
    """A fresh (not started) cluster of ``kind``: Odradek's on ``zk``, or Kafka's."""
    return KafkaCluster(tmp_root) if kind == KAFKA_CLUSTER else Cluster(zk, tmp_root, settings)


def create_topic(bootstrap: str, name: str, partitions: int, rf: int,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                                  operation_timeout=30, request_timeout=40)
    futures[name].result(timeout=60)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                  for p in range(partitions)}, request_timeout=30)
    return [futures[TopicPartition(topic, p)].result(timeout=30).offset
            for p in range(partitions)]


def zookeeper_version(zk: ZooKeeperServer) -> str | None:
    for line in four_letter_word(zk.port, "srvr").splitlines():
        if line.startswith("Zookeeper version:"):
            return line.split(":", 1)[1].strip().split(",")[0]
    return None


# --- 1. throughput and CPU ------------------------------------------------------------


def produce_load(bootstrap: str, topic: str, partitions: int, n: int, value_bytes: int,
                 acks: str | int, cpu: Callable[[], dict[int, float]],
                 pids: Callable[[], dict[int, int]] | None = None) -> dict[str, Any]:
    """broker_bench.produce's load, to ``partitions`` partitions (record i to i mod P),
    with ``acks``; ``cpu()`` gives each broker's CPU seconds so far; with ``pids()`` (the
    brokers' processes) the part of it in the kernel is reported too."""
    def kernel() -> float:
        return sum(proc_sys_s(pid) for pid in pids().values()) if pids is not None else 0.0

    errors: list[str] = []
    producer = Producer({"error_cb": lambda err: errors.append(str(err)),
                         "bootstrap.servers": bootstrap, **LOAD_PRODUCER, "acks": acks})
    producer.list_topics(topic, timeout=10)
    value = os.urandom(value_bytes)
    produce_one = producer.produce
    # Untimed: WARMUP_RECORDS to every partition, acknowledged. Right after a topic is
    # created, the first acks=all answers of a cluster take up to ~0.5-1 s (see the
    # report's warmup_s): not the steady rate this measures.
    t_warm = time.perf_counter()
    for p in range(partitions):
        for _ in range(WARMUP_RECORDS):
            produce_one(topic, value, partition=p)
    if producer.flush(STALL_TIMEOUT_S):
        raise RuntimeError(f"warm-up: records still queued after {STALL_TIMEOUT_S:.0f} s")
    warmup_s = time.perf_counter() - t_warm
    cpu0, self0, sys0 = cpu(), self_cpu_s(), kernel()
    t0 = time.perf_counter()
    for p in islice(cycle(range(partitions)), n):
        try:
            produce_one(topic, value, partition=p)
        except BufferError:
            producer.poll(0.05)
            produce_one(topic, value, partition=p)
    remaining = producer.flush(STALL_TIMEOUT_S * 5)
    t1 = time.perf_counter()
    cpu1, self1, sys1 = cpu(), self_cpu_s(), kernel()
    if remaining or errors:
        raise RuntimeError(f"produce: {remaining:,} of {n:,} records still queued after "
                           f"flush; client errors: {errors[:5]}")
    ends = end_offsets(bootstrap, topic, partitions)
    if sum(ends) != n + WARMUP_RECORDS * partitions:
        raise RuntimeError(f"produce: end offsets {ends} add up to {sum(ends):,}, not "
                           f"{n:,} + {WARMUP_RECORDS * partitions:,} of warm-up")
    seconds = t1 - t0
    by_broker = {b: cpu1[b] - cpu0[b] for b in cpu1}
    broker_cpu = sum(by_broker.values())
    m = n / 1e6
    return {
        "records": n,
        "seconds": round(seconds, 4),
        "records_s": round(n / seconds),
        "broker_cpu_s": round(broker_cpu, 3),
        "broker_cpu_s_per_m": round(broker_cpu / m, 3),
        "broker_cpu_s_per_m_by_broker": {str(b): round(c / m, 3) for b, c in by_broker.items()},
        "broker_cpu_util": round(broker_cpu / seconds, 3),
        **({"broker_kernel_s_per_m": round((sys1 - sys0) / m, 3),
            "broker_user_s_per_m": round((broker_cpu - (sys1 - sys0)) / m, 3)}
           if pids is not None else {}),
        "client_cpu_s_per_m": round((self1 - self0) / m, 3),
        "end_offsets": ends,
        "warmup_s": round(warmup_s, 3),
    }


def throughput_cluster(kind: str, zk: ZooKeeperServer, partitions: int,
                       args: argparse.Namespace, settings: dict[str, Any],
                       tmp_root: str) -> dict[str, Any]:
    cluster = new_cluster(kind, zk, tmp_root, settings)
    topic = f"tput-{partitions}"
    try:
        cluster.start()
        cluster.create_topic(topic, partitions)
        leaders = [cluster.state(topic, p)[0]["leader"] for p in range(partitions)]  # type: ignore[index]
        out = produce_load(cluster.bootstrap, topic, partitions, args.records,
                           args.value_bytes, "all", cluster.cpu_by_node, cluster.broker_pids)
        out["leaders"] = leaders
        out["controller"] = cluster.controller()
        out["isr_after"] = [sorted(cluster.state(topic, p)[0]["isr"])  # type: ignore[index]
                            for p in range(partitions)]
        out["peak_rss_mib"] = round(cluster.peak_rss_mib(), 1)
    finally:
        codes = cluster.stop()
        cluster.remove()
    out["exit_codes"] = codes
    if any(codes.values()):
        note(f"  warning: cluster brokers exited with {codes} on SIGTERM")
    return out


def throughput_single(partitions: int, args: argparse.Namespace,
                      tmp_root: str) -> dict[str, Any]:
    broker = Broker(ODRADEK, tmp_root)
    _LIVE[broker.pid] = broker.stop
    topic = f"tput-{partitions}"
    try:
        create_topic(broker.bootstrap, topic, partitions, 1)
        out = produce_load(broker.bootstrap, topic, partitions, args.records, args.value_bytes,
                           1, lambda: {0: broker.cpu_s()}, lambda: {0: broker.pid})
        out.pop("broker_cpu_s_per_m_by_broker")
        out["peak_rss_mib"] = round(broker.peak_rss_mib(), 1)
    finally:
        rc = broker.stop()
        _LIVE.pop(broker.pid, None)
    out["exit_code"] = rc
    if rc != 0:
        note(f"  warning: odradek exited with {rc} on SIGTERM")
    return out


def sides(args: argparse.Namespace) -> tuple[str, ...]:
    """The systems a throughput or latency round runs, in the order of even rounds (odd
    rounds reverse it: the Odradek cluster and Kafka's take turns going first)."""
    return (CLUSTER, SINGLE, KAFKA_CLUSTER) if args.kafka else (CLUSTER, SINGLE)


def round_ratios(runs: list[dict[str, Any]], a: str, b: str, key: str,
                 **match: Any) -> list[float]:
    """Per round, system ``a``'s ``key`` / system ``b``'s, over the runs matching
    ``match`` (rounds where either failed, or b's figure is 0, left out)."""
    out = []
    for i in sorted({r["round"] for r in runs}):
        mine = {k: [r for r in runs if r["system"] == k and r["round"] == i
                    and "failed" not in r and all(r[f] == v for f, v in match.items())]
                for k in (a, b)}
        if mine[a] and mine[b] and mine[b][0].get(key):
            out.append(mine[a][0][key] / mine[b][0][key])
    return out


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def run_throughput(zk: ZooKeeperServer, args: argparse.Namespace, settings: dict[str, Any],
                   tmp_root: str) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    n = 0
    for i in range(args.rounds):
        for partitions in PARTITION_SHAPES:
            order = sides(args) if n % 2 == 0 else sides(args)[::-1]
            n += 1
            for kind in order:
                check_interrupted()
                note(f"throughput round {i + 1}/{args.rounds}: {partitions} partition(s), "
                     f"{LABELS[kind]}, {args.records:,} records ...")
                try:
                    if kind in CLUSTERS:
                        r = throughput_cluster(kind, zk, partitions, args, settings, tmp_root)
                    else:
                        r = throughput_single(partitions, args, tmp_root)
                except (RuntimeError, KafkaException) as exc:
                    note(f"  failed: {str(exc)[:2000]}")
                    r = {"failed": str(exc)[:2000]}
                r.update(system=kind, partitions=partitions, round=i + 1)
                runs.append(r)
                if "failed" not in r:
                    by = (f" (by broker {r['broker_cpu_s_per_m_by_broker']}, leaders "
                          f"{r['leaders']})" if kind in CLUSTERS else "")
                    note(f"  {r['records_s']:,} records/s, broker CPU {r['broker_cpu_s_per_m']} "
                         f"s per M{by}; peak RSS {r['peak_rss_mib']:,.0f} MiB; warm-up "
                         f"{r['warmup_s']} s")
    summary = []
    for partitions in PARTITION_SHAPES:
        row: dict[str, Any] = {"partitions": partitions}
        for kind in sides(args):
            ok = [r for r in runs if r["system"] == kind and r["partitions"] == partitions
                  and "failed" not in r]
            failed = [r["failed"] for r in runs if r["system"] == kind
                      and r["partitions"] == partitions and "failed" in r]
            row[kind] = {"failed_runs": len(failed)} if not ok else {
                "records_s": statistics.median(r["records_s"] for r in ok),
                "records_s_all": [r["records_s"] for r in ok],
                "broker_cpu_s_per_m": statistics.median(r["broker_cpu_s_per_m"] for r in ok),
                **({key: statistics.median(r[key] for r in ok)
                    for key in ("broker_user_s_per_m", "broker_kernel_s_per_m")
                    if all(key in r for r in ok)}),
                "client_cpu_s_per_m": statistics.median(r["client_cpu_s_per_m"] for r in ok),
                "broker_cpu_util": statistics.median(r["broker_cpu_util"] for r in ok),
                "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in ok),
                "failed_runs": len(failed),
            }
            if ok and kind in CLUSTERS:
                row[kind]["broker_cpu_s_per_m_by_broker"] = [r["broker_cpu_s_per_m_by_broker"]
                                                             for r in ok]
                row[kind]["leaders"] = [r["leaders"] for r in ok]
        # Ratios: medians of per-round ratios, the Odradek cluster over the single broker
        # and (--kafka) over Kafka's cluster.
        for other, suffix in ((SINGLE, ""), (KAFKA_CLUSTER, "_kafka")):
            if other not in row:
                continue
            for name, key in (("throughput", "records_s"), ("cpu_per_m", "broker_cpu_s_per_m"),
                              ("user_cpu_per_m", "broker_user_s_per_m"),
                              ("kernel_cpu_per_m", "broker_kernel_s_per_m"),
                              ("peak_rss", "peak_rss_mib")):
                xs = round_ratios(runs, CLUSTER, other, key, partitions=partitions)
                row[f"ratio_{name}{suffix}"] = _median(xs)
                if name == "throughput":
                    row[f"ratio_throughput{suffix}_all"] = [round(x, 3) for x in xs]
        summary.append(row)
    return {"runs": runs, "summary": summary}


def _met(value: float | None, op: str, target: float) -> str:
    if value is None:
        return "-"
    ok = value >= target if op == ">=" else value <= target
    return f"**{value:.2f}** ({'met' if ok else 'NOT met'})"


def throughput_markdown(part: dict[str, Any], p: dict[str, Any]) -> list[str]:
    lines = [
        "### Throughput and broker CPU",
        "",
        f"workload: {p['records']:,} records of {p['value_bytes']} bytes, confluent-kafka "
        "producer (linger.ms=5, batch.num.messages=100,000, no compression, no "
        "idempotence), timed after an untimed, acknowledged warm-up of "
        f"{p.get('warmup_records_per_partition', WARMUP_RECORDS):,} records per partition; "
        "1 partition, or 3 partitions with record i to partition i mod 3 "
        f"(each cluster broker leads one); {p['rounds']} round(s), a fresh cluster / broker "
        "per run, the side that goes first alternating; medians of rounds; ratios are "
        "medians of per-round ratios; cluster CPU and peak RSS are sums over its 3 brokers "
        f"(followers' replication included); target: cluster >= {RATIO_TARGET}x the single "
        "broker's records/s",
        "",
        "| partitions | system | records/s | broker CPU s per M records | CPU s per M by "
        "broker (leaders) | client CPU s per M | peak RSS MiB | cluster/single records/s "
        "| cluster/single CPU per M |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    shown = [k for k in (CLUSTER, SINGLE, KAFKA_CLUSTER) if k in part["summary"][0]]
    for row in part["summary"]:
        for kind in shown:
            r = row[kind]
            if "records_s" not in r:
                lines.append(f"| {row['partitions']} | {LABELS[kind]} | failed | | | | | | |")
                continue
            by = ""
            if kind in CLUSTERS:
                by = "; ".join(
                    ", ".join(f"{b}: {c:.2f}" for b, c in d.items()) + f" ({ls})"
                    for d, ls in zip(r["broker_cpu_s_per_m_by_broker"], r["leaders"],
                                     strict=True))
            ratios = " | "
            if kind == CLUSTER and row["ratio_throughput"] is not None:
                ratios = (f"{_met(row['ratio_throughput'], '>=', RATIO_TARGET)} "
                          f"| **{row['ratio_cpu_per_m']:.2f}**")
            lines.append(f"| {row['partitions']} | {LABELS[kind]} | {r['records_s']:,.0f} "
                         f"| {r['broker_cpu_s_per_m']:.2f} | {by} "
                         f"| {r['client_cpu_s_per_m']:.2f} | {r['peak_rss_mib']:,.0f} "
                         f"| {ratios} |")
    lines.append("")
    for row in part["summary"]:
        for kind in shown:
            r = row[kind]
            if "records_s_all" in r:
                lines.append(f"- {row['partitions']} partition(s), {LABELS[kind]}: records/s "
                             "per round " + ", ".join(f"{x:,}" for x in r["records_s_all"])
                             + f"; brokers busy {r['broker_cpu_util']:.2f} CPUs"
                             + (f"; broker CPU s per M in user space "
                                f"{r['broker_user_s_per_m']:.2f}, in the kernel "
                                f"{r['broker_kernel_s_per_m']:.2f}"
                                if "broker_user_s_per_m" in r else "")
                             + (f" (cluster/single: user {row['ratio_user_cpu_per_m']:.2f}, "
                                f"kernel {row['ratio_kernel_cpu_per_m']:.2f})"
                                if kind == CLUSTER and row.get("ratio_user_cpu_per_m")
                                and row.get("ratio_kernel_cpu_per_m") else "")
                             + (f"; {r['failed_runs']} run(s) failed" if r["failed_runs"]
                                else ""))
    if KAFKA_CLUSTER in shown:
        lines += [
            "",
            f"Odradek's cluster / {LABELS[KAFKA_CLUSTER]} (the same load; medians of "
            "per-round ratios; targets: records/s >= 1.0, broker CPU per record <= 0.5):",
            "",
            "| partitions | records/s | broker CPU s per M records | peak RSS (summed) "
            "| records/s per round |",
            "|---:|---:|---:|---:|---|",
        ]
        for row in part["summary"]:
            rss = row["ratio_peak_rss_kafka"]
            lines.append(
                f"| {row['partitions']} | {_met(row['ratio_throughput_kafka'], '>=', 1.0)} "
                f"| {_met(row['ratio_cpu_per_m_kafka'], '<=', 0.5)} "
                f"| {'-' if rss is None else f'{rss:.2f}'} "
                f"| {', '.join(f'{x:.2f}' for x in row['ratio_throughput_kafka_all'])} |")
    return lines


# --- 2. latency -----------------------------------------------------------------------

# Set by run_latency for _LatencyCluster: the ZooKeeper and the brokers' settings.
_LATENCY_CONTEXT: dict[str, Any] = {}


class _LatencyCluster:
    """What latency_bench.one_run uses of its ``Broker``: a fresh cluster behind one
    bootstrap string, CPU summed over the 3 brokers, ``stop()`` giving an exit code."""

    def __init__(self, kind: str, tmp_root: str) -> None:
        self.kind = kind
        self.cluster = new_cluster(kind, _LATENCY_CONTEXT["zookeeper"], tmp_root,
                                   _LATENCY_CONTEXT["settings"])
        try:
            self.cluster.start()
            self._coordinator_topic()
        except BaseException:
            self.stop()
            raise
        self.bootstrap = self.cluster.bootstrap
        self.pid = self.cluster.broker_pids()[1]

    def _coordinator_topic(self) -> None:
        """The consumer's group.id makes librdkafka send FindCoordinator at once (even
        with assign() only), which creates ``__consumer_offsets``: done here by a consumer
        of the same group, and waited for until every replica is in sync, so that it
        does not happen while the clock runs. (A first version used AdminClient's
        list_consumer_group_offsets, and librdkafka 2.16.0 crashed once in it: SIGSEGV
        in rdk:main.)"""
        from confluent_kafka import Consumer

        partitions = int(_LATENCY_CONTEXT["settings"].get("offsets.topic.num.partitions", 50))
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap,
                             "group.id": "latency-bench", "enable.auto.commit": False})
        try:
            def created() -> bool:
                consumer.poll(0.1)
                return self.cluster.full_isr("__consumer_offsets", partitions)

            self.cluster.wait_for(created, START_TIMEOUT_S * 2, "__consumer_offsets in sync")
        finally:
            consumer.close()

    def cpu_s(self) -> float:
        return self.cluster.cpu_s()

    def cpu_by_node(self) -> dict[int, float]:
        return self.cluster.cpu_by_node()

    def roles(self) -> dict[str, Any]:
        """Which broker leads the topic and which is the controller: a slow run's report
        says whose CPU went where."""
        st = self.cluster.state(latency_bench.TOPIC, 0)
        return {"leader": st[0]["leader"] if st else -1, "controller": self.cluster.controller()}

    def stop(self) -> int:
        codes = self.cluster.stop()
        self.cluster.remove()
        bad = [c for c in codes.values() if c != 0]
        if bad:
            note(f"  warning: cluster brokers exited with {codes} on SIGTERM")
        return bad[0] if bad else 0


def _create_latency_topic(bootstrap: str) -> None:
    """latency_bench's topic (TOPIC, 1 partition) with 3 replicas and min.insync=2."""
    create_topic(bootstrap, latency_bench.TOPIC, 1, SIZE, {"min.insync.replicas": str(MIN_ISR)})
    ends: list[int] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ends:  # a leader that answers ListOffsets
        try:
            ends = end_offsets(bootstrap, latency_bench.TOPIC, 1)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def run_latency(zk: ZooKeeperServer, args: argparse.Namespace, settings: dict[str, Any],
                tmp_root: str) -> dict[str, Any]:
    _LATENCY_CONTEXT.update(zookeeper=zk, settings=settings)
    lb_args = argparse.Namespace(seconds=args.seconds, warmup=args.warmup,
                                 value_bytes=args.value_bytes, linger_ms=args.linger_ms,
                                 nagle=False)
    runs: list[dict[str, Any]] = []
    lats: dict[tuple[str, int], list[array]] = {}
    n = 0
    for i in range(args.rounds):
        for fw in args.fetch_wait_ms:
            order = sides(args) if n % 2 == 0 else sides(args)[::-1]
            n += 1
            for kind in order:
                check_interrupted()
                note(f"latency round {i + 1}/{args.rounds}: {LABELS[kind]}, {args.rate:,} "
                     f"records/s, fetch.wait.max.ms={fw}, {args.seconds:g} s ...")
                try:
                    if kind in CLUSTERS:
                        r, lat = latency_bench.one_run(
                            kind, args.rate, fw, lb_args, tmp_root, acks="all",
                            broker=_LatencyCluster(kind, tmp_root),
                            make_topic=_create_latency_topic)
                    else:
                        r, lat = latency_bench.one_run(ODRADEK, args.rate, fw, lb_args,
                                                       tmp_root)
                except (RuntimeError, KafkaException) as exc:
                    note(f"  failed: {str(exc)[:2000]}")
                    runs.append({"system": kind, "fetch_wait_max_ms": fw, "round": i + 1,
                                 "failed": str(exc)[:2000]})
                    continue
                r.update(system=kind, round=i + 1)
                runs.append(r)
                lats.setdefault((kind, fw), []).append(lat)
                note(f"  achieved {r['achieved_rate']:,}/s ({latency_bench.status(r)}), p50 "
                     f"{r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} p99.9 {r['p99_9_ms']:.2f} "
                     f"max {r['max_ms']:.2f} ms (at {r['max_at_s']} s); busy: producer "
                     f"{r['producer_thread_busy']:.2f}, consumer "
                     f"{r['consumer_thread_busy']:.2f}, brokers {r['broker_cpu_util']:.2f}"
                     + (f" {r['broker_cpu_util_by_node']} (leader {r['leader']}, controller "
                        f"{r['controller']})" if "leader" in r else ""))
    summary = []
    for fw in args.fetch_wait_ms:
        for kind in sides(args):
            mine = [r for r in runs if r["system"] == kind and r["fetch_wait_max_ms"] == fw
                    and "failed" not in r]
            row: dict[str, Any] = {"system": kind, "fetch_wait_max_ms": fw, "rate": args.rate,
                                   "failed_runs": sum(1 for r in runs if r["system"] == kind
                                                      and r["fetch_wait_max_ms"] == fw
                                                      and "failed" in r)}
            if mine:
                pooled = array("q")
                for a in lats[(kind, fw)]:
                    pooled.extend(a)
                row.update({
                    "achieved_rate": min(r["achieved_rate"] for r in mine),
                    "sustained": all(r["sustained"] for r in mine),
                    "client_bound": any(r["client_bound"] for r in mine),
                    **{k: round(v, 3) for k, v in latency_bench.latency_stats_ms(pooled).items()},
                    "broker_cpu_util": max(r["broker_cpu_util"] for r in mine),
                    "runs": [{k: r[k] for k in ("p50_ms", "p99_ms", "p99_9_ms", "max_ms",
                                                 "max_at_s", "achieved_rate")} for r in mine],
                })
                row["status"] = latency_bench.status(row)
            summary.append(row)
    if args.kafka:  # Odradek's cluster / Kafka's, of the pooled percentiles
        for fw in args.fetch_wait_ms:
            row, kafka = (next(r for r in summary
                               if r["system"] == k and r["fetch_wait_max_ms"] == fw)
                          for k in (CLUSTER, KAFKA_CLUSTER))
            for key in ("p50_ms", "p99_ms", "p99_9_ms"):
                row[f"ratio_{key}_kafka"] = (round(row[key] / kafka[key], 3)
                                             if row.get(key) and kafka.get(key) else None)
    return {"runs": runs, "summary": summary}


def latency_markdown(part: dict[str, Any], p: dict[str, Any]) -> list[str]:
    lines = [
        "### End-to-end latency",
        "",
        f"workload: latency_bench.py's one_run: {p['value_bytes']}-byte records paced at "
        f"{p['rate']:,}/s into 1 partition, linger.ms={p['linger_ms']:g}, {p['seconds']:g} s "
        f"measured after {p['warmup']:g} s of warm-up, {p['rounds']} round(s), the side "
        "that goes first alternating; latency = consumer receive - producer send "
        "(CLOCK_MONOTONIC), records of all rounds pooled; the cluster's consumer reads from "
        f"the partition's leader; target (cluster): p99 <= {LATENCY_P99_TARGET_MS:g} ms",
        "",
        "| system | fetch.wait.max.ms | rate | achieved | sustained | p50 ms | p99 ms "
        "| p99.9 ms | max ms | brokers busy (CPUs) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in part["summary"]:
        if "p50_ms" not in row:
            lines.append(f"| {LABELS[row['system']]} | {row['fetch_wait_max_ms']} "
                         f"| {row['rate']:,} | failed | | | | | | |")
            continue
        p99 = f"{row['p99_ms']:.2f}"
        if row["system"] == CLUSTER:
            met = "met" if row["p99_ms"] <= LATENCY_P99_TARGET_MS else "NOT met"
            p99 = f"**{p99}** ({met})"
        lines.append(f"| {LABELS[row['system']]} | {row['fetch_wait_max_ms']} "
                     f"| {row['rate']:,} | {row['achieved_rate']:,} | {row['status']} "
                     f"| {row['p50_ms']:.2f} | {p99} | {row['p99_9_ms']:.2f} "
                     f"| {row['max_ms']:.2f} | {row['broker_cpu_util']:.2f} |")
    lines.append("")
    for row in part["summary"]:
        if "runs" in row:
            per = "; ".join(f"p50 {r['p50_ms']:.2f} / p99 {r['p99_ms']:.2f} / max "
                            f"{r['max_ms']:.2f} ms at {r['max_at_s']} s" for r in row["runs"])
            lines.append(f"- {LABELS[row['system']]}, fetch wait {row['fetch_wait_max_ms']}: "
                         f"per run {per}")
    kafka = [row for row in part["summary"] if "ratio_p99_ms_kafka" in row]
    if kafka:
        lines += [
            "",
            f"Odradek's cluster / {LABELS[KAFKA_CLUSTER]} (pooled percentiles; target: "
            "p99 <= 1.0):",
            "",
            "| fetch.wait.max.ms | p50 | p99 | p99.9 |",
            "|---:|---:|---:|---:|",
        ]
        for row in kafka:
            p50, p999 = row["ratio_p50_ms_kafka"], row["ratio_p99_9_ms_kafka"]
            lines.append(f"| {row['fetch_wait_max_ms']} | {'-' if p50 is None else f'{p50:.2f}'} "
                         f"| {_met(row['ratio_p99_ms_kafka'], '<=', 1.0)} "
                         f"| {'-' if p999 is None else f'{p999:.2f}'} |")
    return lines


# --- 3. failover ----------------------------------------------------------------------


def failover_producer(conn: Connection, bootstrap: str, topic: str, rate: int,
                      value_bytes: int, last_ok: Any, debug: str) -> None:
    """A paced acks=all producer (child process) that times every delivery report with
    time.time() as it is served, until the parent sends "stop"; ``last_ok`` (shared)
    holds the time of the latest successful one."""
    ok_t = array("d")
    ok_offset = array("q")
    errors: Counter[str] = Counter()
    client_errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        t = time.time()
        if err is None:
            ok_t.append(t)
            ok_offset.append(msg.offset())
            last_ok.value = t
        else:
            errors[err.name()] += 1

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "error_cb": lambda err: client_errors.append(f"{time.time():.3f} {err}"),
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "none",
        "enable.idempotence": False,
        "socket.nagle.disable": True,
        "message.timeout.ms": 300_000,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
        **({"debug": debug} if debug else {}),  # librdkafka's log, on stderr
    })
    producer.list_topics(topic, timeout=10)
    value = bytes(value_bytes)
    produce, poll = producer.produce, producer.poll
    interval = 1 / rate
    conn.send("ready")
    start = time.monotonic()
    sent = 0
    while not conn.poll():
        due = int((time.monotonic() - start) / interval) + 1
        while sent < due:
            try:
                produce(topic, value, partition=0, on_delivery=delivered)
            except BufferError:
                break
            sent += 1
        # Waiting in poll() serves each delivery report as soon as it arrives.
        poll(max(0.0, start + sent * interval - time.monotonic()))
    left = producer.flush(STALL_TIMEOUT_S)
    conn.send({"ok_t": ok_t.tobytes(), "ok_offset": ok_offset.tobytes(), "sent": sent,
               "errors": dict(errors), "unflushed": left, "client_errors": client_errors[:50]})


class FailoverProducer:
    """failover_producer in a process of its own (its own GIL: the timing of its delivery
    reports does not wait for this process)."""

    def __init__(self, bootstrap: str, rate: int, value_bytes: int, debug: str) -> None:
        ctx = mp.get_context("spawn")  # no fork of a process with librdkafka threads
        self.conn, child = ctx.Pipe()
        self.last_ok = ctx.Value("d", 0.0, lock=False)
        self.proc = ctx.Process(target=failover_producer, daemon=True, args=(
            child, bootstrap, FAILOVER_TOPIC, rate, value_bytes, self.last_ok, debug))
        self.proc.start()
        _LIVE[self.proc.pid] = self.kill  # type: ignore[index]
        if not self.conn.poll(START_TIMEOUT_S) or self.conn.recv() != "ready":
            raise RuntimeError("failover producer not ready")

    def wait_ack_after(self, t: float, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.last_ok.value <= t:
            if time.monotonic() > deadline or not self.proc.is_alive():
                return False
            time.sleep(0.01)
        return True

    def finish(self) -> dict[str, Any]:
        self.conn.send("stop")
        if not self.conn.poll(STALL_TIMEOUT_S + 30):
            raise RuntimeError("failover producer did not report")
        out = self.conn.recv()
        self.proc.join(30)
        self.kill()
        ok_t = array("d")
        ok_t.frombytes(out.pop("ok_t"))
        ok_offset = array("q")
        ok_offset.frombytes(out.pop("ok_offset"))
        out["acks"] = sorted(zip(ok_t, ok_offset, strict=True))
        return out

    def kill(self) -> None:
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
            self.proc.join(10)
        _LIVE.pop(self.proc.pid, None)  # type: ignore[arg-type]


def max_gap(times: Sequence[float], after: float, before: float) -> tuple[float, float]:
    """The longest gap between consecutive ``times`` (sorted) that overlaps the interval
    (after, before): (gap in seconds, where it starts)."""
    best, at = 0.0, after
    for a, b in pairwise(times):
        if b > after and a < before and b - a > best:
            best, at = b - a, a
    return best, at


class LeaderWatch:
    """Polls the partition's state znode every 10 ms from before a fault until its leader
    is neither ``victim`` nor -1: the first such state and its mtime, the time the
    controller wrote it (a later ISR-only write could replace the mtime between two
    polls; ``seen`` bounds that). With ``want``, until its leader is ``want`` instead (a
    preferred leader election)."""

    def __init__(self, cluster: Cluster, victim: int, want: int | None = None) -> None:
        import threading

        self.cluster, self.victim, self.want = cluster, victim, want
        self.state: dict[str, Any] | None = None
        self.mtime = self.seen = 0.0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                st = self.cluster.state(FAILOVER_TOPIC, 0)
            except Exception as exc:
                self.error = exc
                st = None
            leader = None if st is None else st[0]["leader"]
            if st is not None and (leader == self.want if self.want is not None
                                   else leader not in (self.victim, -1)):
                self.state, self.mtime, self.seen = st[0], st[1], time.time()
                return
            self._stop.wait(0.01)

    def wait(self, timeout_s: float) -> tuple[dict[str, Any], float, float]:
        self._thread.join(timeout_s)
        self._stop.set()
        if self.state is None:
            raise RuntimeError(f"no new leader {timeout_s:.0f} s after the fault "
                               f"(last error: {self.error!r})")
        return self.state, self.mtime, self.seen


def probe_ack(bootstrap: str, timeout_s: float) -> tuple[float | None, str | None]:
    """One acks=all record from a new client (no stale metadata, no reconnect backoff):
    (time.time() of its acknowledgement, or None; the error, if any)."""
    got: list[tuple[float, Any]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": False, "socket.nagle.disable": True,
                         "message.timeout.ms": int(timeout_s * 1000)})
    producer.produce(FAILOVER_TOPIC, b"probe", partition=0,
                     on_delivery=lambda err, _msg: got.append((time.time(), err)))
    producer.flush(timeout_s + 5)
    if not got:
        return None, "no delivery report"
    t, err = got[0]
    return (t, None) if err is None else (None, str(err))


def _from_fault(entry: str, t_fault: float) -> str:
    """``"<unix time> <text>"`` as ``"<+seconds from the fault> <text>"``."""
    stamp, _, text = entry.partition(" ")
    try:
        return f"{float(stamp) - t_fault:+.3f} {text}"
    except ValueError:
        return entry


def one_fault(cluster: Cluster, fault: str, args: argparse.Namespace) -> dict[str, Any]:
    session_s = args.session_timeout_ms / 1000
    cluster.wait_for(lambda: cluster.full_isr(FAILOVER_TOPIC, 1), START_TIMEOUT_S * 2,
                     "all 3 replicas in sync before the fault")
    state0 = cluster.state(FAILOVER_TOPIC, 0)
    assert state0 is not None
    victim = state0[0]["leader"]
    md_before = cluster.metadata_leaders(FAILOVER_TOPIC, 1)[0]
    controller = cluster.controller()
    node = cluster.node(victim)
    rc: int | None = None
    producer = FailoverProducer(cluster.bootstrap, args.failover_rate, args.value_bytes,
                                args.rdkafka_debug)
    try:
        time.sleep(args.steady_s)  # steady acknowledgements before the fault
        watch = LeaderWatch(cluster, victim)
        t_fault = time.time()
        if fault == "kill":
            node.kill()
        else:
            rc = node.terminate(STOP_TIMEOUT_S)[0]
        t_exit = time.time()
        state1, t_elect, t_seen = watch.wait(session_s + STOP_TIMEOUT_S)
        # How soon the cluster acknowledges a client that knows the new leader at once:
        # the broker side of the failover, apart from the running producer's metadata.
        t_probe, probe_error = probe_ack(cluster.bootstrap, STALL_TIMEOUT_S)
        # The first acknowledgement after the election, then a second more of them.
        if not producer.wait_ack_after(t_elect, STALL_TIMEOUT_S):
            note(f"  no acknowledgement {STALL_TIMEOUT_S:.0f} s after the election")
        time.sleep(max(0.0, max(t_elect, t_exit) + 1.0 - time.time()))
        result = producer.finish()
        md_after = cluster.metadata_leaders(FAILOVER_TOPIC, 1)[0]
    finally:
        producer.kill()
    acks = result.pop("acks")
    times = [t for t, _ in acks]
    after_fault = [(t, o) for t, o in acks if t > t_fault]
    # After the state znode's write: for a kill -9, necessarily the new leader's; after a
    # SIGTERM the old leader may still acknowledge for a moment (it learns of the change
    # from ZooKeeper too).
    new_leader_acks = [(t, o) for t, o in after_fault if t >= t_elect]
    before = [t for t in times if t_fault - 1.0 <= t <= t_fault]
    steady_gap = max((b - a for a, b in pairwise(before)), default=0.0)
    gap, gap_at = max_gap(times, t_fault, max(t_exit, t_elect) + 1.0)
    out: dict[str, Any] = {
        "fault": fault,
        "victim": victim,
        "victim_was_controller": victim == controller,
        "leader_before_metadata": md_before,
        "leader_after_zookeeper": state1["leader"],
        "leader_after_metadata": md_after,
        "leader_epoch_before": state0[0].get("leader_epoch"),
        "leader_epoch_after": state1.get("leader_epoch"),
        "isr_after": sorted(state1["isr"]),
        "election_s": round(t_elect - t_fault, 3),  # the state znode's mtime - the signal
        "election_seen_s": round(t_seen - t_fault, 3),
        "broker_exit_s": round(t_exit - t_fault, 3),
        "first_ack_after_election_s": (round(new_leader_acks[0][0] - t_fault, 3)
                                       if new_leader_acks else None),
        "first_ack_after_election_offset": new_leader_acks[0][1] if new_leader_acks else None,
        "fresh_client_ack_s": None if t_probe is None else round(t_probe - t_fault, 3),
        "fresh_client_error": probe_error,
        "last_ack_before_fault_offset": max((o for t, o in acks if t <= t_fault), default=None),
        "acks_between_fault_and_election": len(after_fault) - len(new_leader_acks),
        # for a kill: responses read before the kill, their reports served just after it
        "last_ack_before_election_s": max((round(t - t_fault, 4) for t, _ in after_fault
                                           if t < t_elect), default=None),
        "max_ack_gap_ms": round(gap * 1000, 1),
        "max_ack_gap_starts_s": round(gap_at - t_fault, 3),
        "steady_max_ack_gap_ms": round(steady_gap * 1000, 1),
        "acks": len(acks),
        "sent": result["sent"],
        "delivery_errors": result["errors"],
        "unflushed": result["unflushed"],
        # librdkafka's error_cb, each "<seconds from the fault> <error>"
        "client_errors": [_from_fault(e, t_fault) for e in result["client_errors"]],
        "fault_time_unix": round(t_fault, 3),
    }
    if fault == "term":
        out["exit_code"] = rc
    return out


def run_failover(zk: ZooKeeperServer, args: argparse.Namespace, settings: dict[str, Any],
                 tmp_root: str) -> dict[str, Any]:
    session_s = args.session_timeout_ms / 1000
    cluster = Cluster(zk, tmp_root, settings)
    runs: list[dict[str, Any]] = []
    try:
        cluster.start()
        cluster.create_topic(FAILOVER_TOPIC, 1)
        for i in range(args.rounds):
            for fault in (args.faults if i % 2 == 0 else args.faults[::-1]):
                check_interrupted()
                note(f"failover round {i + 1}/{args.rounds}: {fault} of the leader, "
                     f"{args.failover_rate:,} records/s acks=all ...")
                try:
                    r = one_fault(cluster, fault, args)
                except (RuntimeError, KafkaException) as exc:
                    note(f"  failed: {str(exc)[:2000]}")
                    r = {"fault": fault, "failed": str(exc)[:2000]}
                r["round"] = i + 1
                runs.append(r)
                if "failed" not in r:
                    note(f"  broker {r['victim']} (controller: {r['victim_was_controller']}) "
                         f"-> leader {r['leader_after_zookeeper']} elected after "
                         f"{r['election_s']} s; first ack after that "
                         f"{r['first_ack_after_election_s']} s (a new client's "
                         f"{r['fresh_client_ack_s']} s); longest ack gap "
                         f"{r['max_ack_gap_ms']} ms (steady {r['steady_max_ack_gap_ms']} ms); "
                         f"delivery errors {r['delivery_errors']}")
                # The stopped broker back, same port and data, before the next fault.
                for n, broker in cluster.brokers.items():
                    if not broker.running:
                        cluster.start_broker(n, everywhere=False)
                cluster.wait_for(lambda: cluster.live_brokers() == sorted(cluster.brokers),
                                 START_TIMEOUT_S, "every broker registered again")
    finally:
        codes = cluster.stop()
        cluster.remove()
    if any(codes.values()):
        note(f"  warning: cluster brokers exited with {codes} on SIGTERM")

    def med(fault: str, key: str) -> float | None:
        vals = [r[key] for r in runs if r["fault"] == fault and r.get(key) is not None]
        return round(statistics.median(vals), 3) if vals else None

    summary = {
        "session_timeout_ms": args.session_timeout_ms,
        "kill": {"first_ack_after_election_s": med("kill", "first_ack_after_election_s"),
                 "election_s": med("kill", "election_s"),
                 "fresh_client_ack_s": med("kill", "fresh_client_ack_s"),
                 "target_s": session_s + KILL_TARGET_EXTRA_S},
        "term": {"max_ack_gap_ms": med("term", "max_ack_gap_ms"),
                 "fresh_client_ack_s": med("term", "fresh_client_ack_s"),
                 "election_s": med("term", "election_s"),
                 "broker_exit_s": med("term", "broker_exit_s"),
                 "target_ms": GAP_TARGET_MS},
        "final_exit_codes": codes,
    }
    return {"runs": runs, "summary": summary}


def failover_markdown(part: dict[str, Any], p: dict[str, Any]) -> list[str]:
    s = part["summary"]
    kill_target = s["kill"]["target_s"]
    lines = [
        "### Failover",
        "",
        f"cluster: 3 brokers, zookeeper.session.timeout.ms={s['session_timeout_ms']}, "
        f"topic of 1 partition, RF 3, min.insync.replicas=2; a producer process sends "
        f"{p['failover_rate']:,} records/s (acks=all, linger.ms=5) and times each delivery "
        "report; \"elected\" is the mtime of the partition's state znode (the controller's "
        "write); \"a new client's first ack\": one acks=all record from a producer created "
        "when the new leader is seen in ZooKeeper (the cluster's side of the failover, "
        "without the running client's metadata and reconnect delays); all times from the "
        "signal; the stopped broker is restarted (same port and data) and the ISR full "
        "again before the next fault",
    ]
    kills = [r for r in part["runs"] if r["fault"] == "kill"]
    terms = [r for r in part["runs"] if r["fault"] == "term"]
    if kills:
        lines += [
            "",
            f"kill -9 of the leader (target: first ack by the new leader <= session timeout "
            f"+ {KILL_TARGET_EXTRA_S:g} s = {kill_target:g} s):",
            "",
            "| round | leader before → after (metadata) | victim was controller "
            "| elected after s | first ack by new leader s | a new client's first ack s "
            "| acks between kill and election | longest ack gap ms | delivery errors |",
            "|---:|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in kills:
            if "failed" in r:
                lines.append(f"| {r['round']} | failed: {r['failed'][:150]} | | | | | | | |")
                continue
            lines.append(
                f"| {r['round']} | {r['leader_before_metadata']} → "
                f"{r['leader_after_metadata']} "
                f"| {'yes' if r['victim_was_controller'] else 'no'} | {r['election_s']:.3f} "
                f"| {_s(r['first_ack_after_election_s'])} | {_s(r['fresh_client_ack_s'])} "
                f"| {r['acks_between_fault_and_election']} "
                f"| {r['max_ack_gap_ms']:,.1f} | {_errors(r)} |")
        k = s["kill"]["first_ack_after_election_s"]
        met = "" if k is None else (" (met)" if k <= kill_target else " (NOT met)")
        lines.append(f"| median | | | {_s(s['kill']['election_s'])} | **{_s(k)}**{met} "
                     f"| {_s(s['kill']['fresh_client_ack_s'])} | | | |")
    if terms:
        lines += [
            "",
            f"SIGTERM of the leader, controlled shutdown (target: longest gap between "
            f"acknowledgements <= {GAP_TARGET_MS:g} ms):",
            "",
            "| round | leader before → after (metadata) | victim was controller "
            "| leadership moved after s | broker exited after s (code) "
            "| longest ack gap ms (starts at s) | steady second before: longest gap ms "
            "| a new client's first ack s | delivery errors |",
            "|---:|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in terms:
            if "failed" in r:
                lines.append(f"| {r['round']} | failed: {r['failed'][:150]} | | | | | | | |")
                continue
            lines.append(
                f"| {r['round']} | {r['leader_before_metadata']} → "
                f"{r['leader_after_metadata']} "
                f"| {'yes' if r['victim_was_controller'] else 'no'} | {r['election_s']:.3f} "
                f"| {r['broker_exit_s']:.3f} ({r['exit_code']}) "
                f"| {r['max_ack_gap_ms']:,.1f} ({r['max_ack_gap_starts_s']:+.3f}) "
                f"| {r['steady_max_ack_gap_ms']:.1f} | {_s(r['fresh_client_ack_s'])} "
                f"| {_errors(r)} |")
        g = s["term"]["max_ack_gap_ms"]
        met = "" if g is None else (" (met)" if g <= GAP_TARGET_MS else " (NOT met)")
        gap = "-" if g is None else f"{g:,.1f}"
        lines.append(f"| median | | | {_s(s['term']['election_s'])} "
                     f"| {_s(s['term']['broker_exit_s'])} | **{gap}**{met} | | "
                     f"{_s(s['term']['fresh_client_ack_s'])} | |")
    return lines


# --- 4. leader balance and rolling restarts (issue 16) ---------------------------------


def preferred_leader(cluster: Cluster) -> int:
    """The failover topic's partition 0's preferred (first assigned) replica."""
    assert cluster.zk is not None
    data = json.loads(cluster.zk.get(f"/brokers/topics/{FAILOVER_TOPIC}")[0])
    return int(data["partitions"]["0"][0])


def _balanced(cluster: Cluster, preferred: int) -> bool:
    st = cluster.state(FAILOVER_TOPIC, 0)
    return (st is not None and st[0]["leader"] == preferred
            and cluster.full_isr(FAILOVER_TOPIC, 1))


def max_gap_starting(times: Sequence[float], after: float, before: float
                     ) -> tuple[float, float]:
    """The longest gap between consecutive ``times`` (sorted) that starts in
    [after, before): (gap in seconds, where it starts)."""
    best, at = 0.0, after
    for a, b in pairwise(times):
        if after <= a < before and b - a > best:
            best, at = b - a, a
    return best, at


def _steady_gap(times: Sequence[float], t: float) -> float:
    before = [x for x in times if t - 1.0 <= x <= t]
    return max((b - a for a, b in pairwise(before)), default=0.0)


def one_rebalance(cluster: Cluster, args: argparse.Namespace) -> dict[str, Any]:
    """SIGTERM of the preferred leader (its leadership moves away), a producer started,
    the broker started again; once it is back in the ISR the controller's periodic check
    elects it again: the longest gap between acknowledgements around that election."""
    preferred = preferred_leader(cluster)
    cluster.wait_for(lambda: _balanced(cluster, preferred), START_TIMEOUT_S * 2,
                     f"broker {preferred} leading with every replica in sync")
    node = cluster.node(preferred)
    rc = node.terminate(STOP_TIMEOUT_S)[0]
    away = cluster.state(FAILOVER_TOPIC, 0)
    assert away is not None
    producer = FailoverProducer(cluster.bootstrap, args.failover_rate, args.value_bytes,
                                args.rdkafka_debug)
    try:
        time.sleep(args.steady_s)  # steady acknowledgements from the stand-in leader
        watch = LeaderWatch(cluster, away[0]["leader"], want=preferred)
        t_start = time.time()
        cluster.start_broker(preferred, everywhere=False)
        cluster.wait_for(lambda: cluster.full_isr(FAILOVER_TOPIC, 1), START_TIMEOUT_S * 2,
                         f"broker {preferred} back in the ISR")
        t_isr = time.time()
        state1, t_elect, t_seen = watch.wait(args.imbalance_check_s * 3 + STALL_TIMEOUT_S)
        if not producer.wait_ack_after(t_elect, STALL_TIMEOUT_S):
            note(f"  no acknowledgement {STALL_TIMEOUT_S:.0f} s after the election")
        time.sleep(max(0.0, t_elect + 1.0 - time.time()))
        result = producer.finish()
        md_after = cluster.metadata_leaders(FAILOVER_TOPIC, 1)[0]
    finally:
        producer.kill()
    acks = result.pop("acks")
    times = [t for t, _ in acks]
    gap, gap_at = max_gap(times, t_elect, t_elect + 1.0)
    return {
        "preferred": preferred,
        "stand_in_leader": away[0]["leader"],
        "leader_after_metadata": md_after,
        "leader_epoch_after": state1.get("leader_epoch"),
        "sigterm_exit_code": rc,
        "restart_to_isr_s": round(t_isr - t_start, 3),
        "isr_to_election_s": round(t_elect - t_isr, 3),
        "election_seen_after_s": round(t_seen - t_elect, 3),
        "max_ack_gap_ms": round(gap * 1000, 1),
        "max_ack_gap_starts_s": round(gap_at - t_elect, 3),  # from the election
        "steady_max_ack_gap_ms": round(_steady_gap(times, t_elect) * 1000, 1),
        "acks": len(acks),
        "sent": result["sent"],
        "delivery_errors": result["errors"],
        "unflushed": result["unflushed"],
        "client_errors": [_from_fault(e, t_elect) for e in result["client_errors"]],
    }


def one_rolling(cluster: Cluster, args: argparse.Namespace) -> dict[str, Any]:
    """Every broker in turn: SIGTERM, started again, back in the ISR, its preferred
    leadership back (the periodic check); a producer throughout. The longest gap between
    acknowledgements over the whole restart, and per step: each controlled shutdown
    (from the signal to 1 s after the exit) and each preferred election (1 s from it)."""
    preferred = preferred_leader(cluster)
    cluster.wait_for(lambda: _balanced(cluster, preferred), START_TIMEOUT_S * 2,
                     f"broker {preferred} leading with every replica in sync")
    producer = FailoverProducer(cluster.bootstrap, args.failover_rate, args.value_bytes,
                                args.rdkafka_debug)
    steps: list[dict[str, Any]] = []
    try:
        time.sleep(args.steady_s)
        t0 = time.time()
        for n in list(cluster.brokers):
            node = cluster.node(n)
            check_interrupted()
            step: dict[str, Any] = {"broker": n, "was_leader": n == preferred}
            t_term = time.time()
            step["exit_code"] = node.terminate(STOP_TIMEOUT_S)[0]
            t_exit = time.time()
            # The preferred leader's leadership went at the SIGTERM: watched coming back.
            watch = LeaderWatch(cluster, -2, want=preferred) if n == preferred else None
            # Down a moment (an upgrade's package install), so that a gap can be told to
            # come from the shutdown or from the restart.
            time.sleep(RESTART_PAUSE_S)
            t_start = time.time()
            cluster.start_broker(n, everywhere=False)
            cluster.wait_for(lambda: cluster.full_isr(FAILOVER_TOPIC, 1),
                             START_TIMEOUT_S * 2, f"broker {n} back in the ISR")
            t_isr = time.time()
            step.update(term_s=t_term, exit_s=t_exit, start_s=t_start, isr_s=t_isr)
            if watch is not None:
                cluster.wait_for(lambda: _balanced(cluster, preferred),
                                 args.imbalance_check_s * 3 + STALL_TIMEOUT_S,
                                 f"broker {preferred} leading again")
                _, t_elect, _ = watch.wait(STALL_TIMEOUT_S)
                step["election_s"] = t_elect
            steps.append(step)
        t_end = time.time()
        time.sleep(1.0)
        result = producer.finish()
    finally:
        producer.kill()
    acks = result.pop("acks")
    times = [t for t, _ in acks]
    gap, gap_at = max_gap(times, t0, t_end + 1.0)
    ends = [st["term_s"] for st in steps[1:]] + [t_end + 1.0]
    for step, end in zip(steps, ends, strict=True):
        # Each gap counted in the phase it starts in: the controlled shutdown (signal to
        # restart), the restart (to the ISR full again), then, for the preferred leader,
        # the wait for the periodic check and the election (to the next step).
        bounds = [("shutdown", step["term_s"]), ("restart", step["start_s"]),
                  ("caught_up", step["isr_s"])]
        if "election_s" in step:
            bounds.append(("election", step["election_s"]))
        for (name, a), (_, b) in zip(bounds, [*bounds[1:], ("end", end)], strict=True):
            g, at = max_gap_starting(times, a, b)
            step[f"{name}_max_ack_gap_ms"] = round(g * 1000, 1)
            step[f"{name}_gap_starts_s"] = round(at - t0, 3)
        for key in ("term_s", "exit_s", "start_s", "isr_s", "election_s"):
            if key in step:
                step[key] = round(step[key] - t0, 3)  # from the first SIGTERM
    return {
        "preferred": preferred,
        "steps": steps,
        "duration_s": round(t_end - t0, 3),
        "max_ack_gap_ms": round(gap * 1000, 1),
        "max_ack_gap_starts_s": round(gap_at - t0, 3),
        "steady_max_ack_gap_ms": round(_steady_gap(times, t0) * 1000, 1),
        "acks": len(acks),
        "sent": result["sent"],
        "delivery_errors": result["errors"],
        "unflushed": result["unflushed"],
        "client_errors": [_from_fault(e, t0) for e in result["client_errors"]],
    }


def run_balance(zk: ZooKeeperServer, args: argparse.Namespace, settings: dict[str, Any],
                tmp_root: str, part: str) -> dict[str, Any]:
    """``rebalance`` or ``rolling``, ``--rounds`` times on one cluster whose controller
    checks leader balance every ``--imbalance-check-s`` seconds."""
    cluster = Cluster(zk, tmp_root, {
        **settings, "leader.imbalance.check.interval.seconds": args.imbalance_check_s})
    one = one_rebalance if part == "rebalance" else one_rolling
    runs: list[dict[str, Any]] = []
    try:
        cluster.start()
        cluster.create_topic(FAILOVER_TOPIC, 1)
        for i in range(args.rounds):
            check_interrupted()
            note(f"{part} round {i + 1}/{args.rounds}, {args.failover_rate:,} records/s "
                 f"acks=all, leader balance checked every {args.imbalance_check_s} s ...")
            try:
                r = one(cluster, args)
            except (RuntimeError, KafkaException) as exc:
                note(f"  failed: {str(exc)[:2000]}")
                r = {"failed": str(exc)[:2000]}
            r["round"] = i + 1
            runs.append(r)
            if "failed" not in r:
                note(f"  longest ack gap {r['max_ack_gap_ms']} ms (steady "
                     f"{r['steady_max_ack_gap_ms']} ms); delivery errors "
                     f"{r['delivery_errors']}")
            for n, broker in cluster.brokers.items():
                if not broker.running:
                    cluster.start_broker(n, everywhere=False)
    finally:
        codes = cluster.stop()
        cluster.remove()
    if any(codes.values()):
        note(f"  warning: cluster brokers exited with {codes} on SIGTERM")
    gaps = [r["max_ack_gap_ms"] for r in runs if "failed" not in r]
    return {"runs": runs, "summary": {
        "imbalance_check_s": args.imbalance_check_s,
        "max_ack_gap_ms": round(statistics.median(gaps), 1) if gaps else None,
        "worst_max_ack_gap_ms": max(gaps, default=None),
        "target_ms": GAP_TARGET_MS if part == "rebalance" else None,
        "final_exit_codes": codes}}


def balance_markdown(results: dict[str, Any], p: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if "rebalance" in results:
        part = results["rebalance"]
        s = part["summary"]
        lines += [
            "### Preferred leader election after a restart",
            "",
            f"1-partition topic, RF 3; its preferred leader stopped (SIGTERM) and started "
            f"again while a producer process sends {p['failover_rate']:,} records/s "
            f"(acks=all, linger.ms=5); leader.imbalance.check.interval.seconds="
            f"{s['imbalance_check_s']}; longest gap between acknowledgements within 1 s "
            f"of the election (target <= {GAP_TARGET_MS:g} ms):",
            "",
            "| round | leader: stand-in → preferred (metadata) | restart to ISR s "
            "| ISR to election s | longest ack gap ms (starts at s) "
            "| steady second before: longest gap ms | delivery errors |",
            "|---:|---|---:|---:|---:|---:|---|",
        ]
        for r in part["runs"]:
            if "failed" in r:
                lines.append(f"| {r['round']} | failed: {r['failed'][:150]} | | | | | |")
                continue
            lines.append(
                f"| {r['round']} | {r['stand_in_leader']} → {r['leader_after_metadata']} "
                f"| {r['restart_to_isr_s']:.3f} | {r['isr_to_election_s']:.3f} "
                f"| {r['max_ack_gap_ms']:,.1f} ({r['max_ack_gap_starts_s']:+.3f}) "
                f"| {r['steady_max_ack_gap_ms']:.1f} | {_errors(r)} |")
        g = s["max_ack_gap_ms"]
        met = "" if g is None else (" (met)" if g <= GAP_TARGET_MS else " (NOT met)")
        lines += [f"| median | | | | **{'-' if g is None else f'{g:,.1f}'}**{met} | | |", ""]
    if "rolling" in results:
        part = results["rolling"]
        lines += [
            "### Rolling restart",
            "",
            f"1-partition topic, RF 3; each broker in turn stopped (SIGTERM), started, "
            f"back in the ISR and, for the preferred leader, leading again "
            f"(leader.imbalance.check.interval.seconds="
            f"{part['summary']['imbalance_check_s']}), while a producer process sends "
            f"{p['failover_rate']:,} records/s (acks=all, linger.ms=5):",
            "",
            "| round | restart s | longest ack gap ms (starts at s) | per broker, longest "
            "gap ms starting in: its controlled shutdown / its restart until back in the ISR "
            "/ the preferred election | delivery errors |",
            "|---:|---:|---:|---|---|",
        ]
        for r in part["runs"]:
            if "failed" in r:
                lines.append(f"| {r['round']} | failed: {r['failed'][:150]} | | | |")
                continue
            per = "; ".join(
                f"broker {st['broker']}: {st['shutdown_max_ack_gap_ms']:,.1f} / "
                f"{st['restart_max_ack_gap_ms']:,.1f}"
                + (f" / {st['election_max_ack_gap_ms']:,.1f}"
                   if "election_max_ack_gap_ms" in st else "")
                for st in r["steps"])
            lines.append(f"| {r['round']} | {r['duration_s']:.1f} "
                         f"| {r['max_ack_gap_ms']:,.1f} ({r['max_ack_gap_starts_s']:+.3f}) "
                         f"| {per} | {_errors(r)} |")
        lines.append("")
    return lines


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:,.3f}"


def _errors(r: dict[str, Any]) -> str:
    e = dict(r["delivery_errors"])
    if r["unflushed"]:
        e["unflushed"] = r["unflushed"]
    return ", ".join(f"{k} {v}" for k, v in e.items()) or "none"


# --- main -----------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    lines = [f"machine: {broker_machine_line(m)}, ZooKeeper {m.get('zookeeper')}",
             f"cluster brokers: zookeeper.session.timeout.ms={p['session_timeout_ms']}"
             + (f", {', '.join(f'{k}={v}' for k, v in p['broker_overrides'].items())}"
                if p["broker_overrides"] else "") + ", the rest default",
             *([f"Apache Kafka cluster (--kafka): {p['kafka_cluster']}"]
               if p.get("kafka_cluster") else []), ""]
    if "throughput" in results:
        lines += [*throughput_markdown(results["throughput"], p), ""]
    if "latency" in results:
        lines += [*latency_markdown(results["latency"], p), ""]
    if "failover" in results:
        lines += [*failover_markdown(results["failover"], p), ""]
    lines += balance_markdown(results, p)
    for hung in results.get("brokers_killed_after_ignoring_sigterm", []):
        lines.append(f"- broker {hung['node']} ignored SIGTERM for {STOP_TIMEOUT_S:.0f} s and "
                     "was killed (the end of its log is in the JSON)")
    return "\n".join(lines).rstrip() + "\n"


def int_list(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def faults(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out or any(x not in ("kill", "term") for x in out):
        raise argparse.ArgumentTypeError(f"kill and/or term, comma-separated, not {text!r}")
    return out


def override(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--only", choices=PARTS, action="append",
                    help="run only this part (repeatable; default all five)")
    ap.add_argument("--session-timeout-ms", type=int, default=18_000,
                    help="the cluster brokers' zookeeper.session.timeout.ms (default Kafka's "
                         "18000; the tests use 4000; this ZooKeeper grants 400-60000)")
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records per throughput run (default 1,000,000)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of every part (default 3)")
    ap.add_argument("--rate", type=int, default=10_000,
                    help="latency: records/s (default 10,000)")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="latency: measured seconds per run (default 10)")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="latency: seconds at the rate before measuring (default 1)")
    ap.add_argument("--fetch-wait-ms", type=int_list, default=[10],
                    help="latency: consumer fetch.wait.max.ms values, comma-separated "
                         "(default 10)")
    ap.add_argument("--linger-ms", type=float, default=1.0,
                    help="latency: producer linger.ms (default 1, as latency_bench.py)")
    ap.add_argument("--failover-rate", type=int, default=1_000,
                    help="failover: the producer's records/s (default 1,000)")
    ap.add_argument("--steady-s", type=float, default=2.0,
                    help="failover: seconds of load before each fault (default 2)")
    ap.add_argument("--faults", type=faults, default=["kill", "term"],
                    help="failover: which faults, comma-separated (kill,term)")
    ap.add_argument("--imbalance-check-s", type=int, default=5,
                    help="rebalance, rolling: the brokers' "
                         "leader.imbalance.check.interval.seconds (default 5)")
    ap.add_argument("--rdkafka-debug", default="", metavar="CONTEXTS",
                    help="failover: librdkafka debug contexts for the producer (e.g. "
                         "metadata,topic,broker), its log on stderr")
    ap.add_argument("--broker-override", type=override, action="append", default=[],
                    metavar="NAME=VALUE",
                    help="another setting for every cluster broker (repeatable)")
    ap.add_argument("--warmup-records", type=int, default=WARMUP_RECORDS,
                    help="throughput: records per partition produced (acknowledged, untimed) "
                         f"before the timed part, on every side (default {WARMUP_RECORDS:,})")
    ap.add_argument("--kafka", action="store_true",
                    help="throughput, latency: the same cluster load against a fresh 3-node "
                         "Apache Kafka cluster too, with ratios Odradek/Kafka")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--dir", default="/tmp",
                    help="where the temporary data dirs go (default /tmp)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary directory (brokers' and ZooKeeper's logs)")
    ap.add_argument("--out", default=str(here / "results" / "cluster.json"),
                    help="JSON results file (default bench/results/cluster.json)")
    return ap.parse_args(argv)


_INTERRUPTED: list[int] = []  # the signals received


def _raise_interrupt(signum: int, _frame: Any) -> None:
    """SIGINT, SIGTERM, SIGHUP: stop what was started, then exit. The exception can be
    lost (raised inside a callback that a C extension calls), so the signal is also kept
    for ``check_interrupted`` at the next step."""
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def _note_signal(signum: int, _frame: Any) -> None:
    _INTERRUPTED.append(signum)
    note(f"signal {signum} during the clean-up: going on with it")


def _cleaning_up() -> None:
    """From here on a signal no longer interrupts: the clean-up runs to its end."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _note_signal)


def check_interrupted() -> None:
    if _INTERRUPTED:
        raise KeyboardInterrupt(f"signal {_INTERRUPTED[0]}")


def tear_down(zk: ZooKeeperServer | None, tmp_root: str) -> None:
    """A benchmark's end, whatever happened: every process it started stopped (brokers
    first: their controlled shutdown needs ZooKeeper), then ZooKeeper, and ``tmp_root``
    removed; a signal meanwhile no longer interrupts."""
    _cleaning_up()
    if zk is not None:
        _LIVE.pop(zk.pid or -1, None)
    _stop_leftovers()
    if zk is not None:
        zk.stop()
    _stop_resource_tracker()
    shutil.rmtree(tmp_root, ignore_errors=True)


def receive_all(pipes: list[Connection], procs: list[Any], deadline: float, what: str,
                who: str) -> list[dict[str, Any]]:
    """One message from each of a load's worker processes (``who``: what they are, for
    errors): a message with an "error", a worker that died, the deadline and Ctrl-C
    fail the run."""
    got: dict[int, dict[str, Any]] = {}
    while len(got) < len(pipes):
        check_interrupted()
        for i, (pipe, proc) in enumerate(zip(pipes, procs, strict=True)):
            if i in got:
                continue
            if pipe.poll(0.02):
                msg = pipe.recv()
                if "error" in msg:
                    raise RuntimeError(f"{who} {i}: {msg['error']}")
                got[i] = msg
            elif not proc.is_alive():
                raise RuntimeError(f"{who} {i} exited with {proc.exitcode} ({what})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{who}s: {len(pipes) - len(got)} without {what} in time")
    return [got[i] for i in range(len(pipes))]


def main(argv: Sequence[str] | None = None) -> int:
    global KEEP, WARMUP_RECORDS
    args = parse_args(argv)
    KEEP = args.keep
    WARMUP_RECORDS = args.warmup_records
    parts = args.only or list(PARTS)
    if (args.rounds < 1 or args.records < 1 or args.rate < 1 or args.failover_rate < 1
            or args.value_bytes < 8 or args.session_timeout_ms < 1):
        raise SystemExit("--rounds, --records, --rate, --failover-rate, "
                         "--session-timeout-ms >= 1 and --value-bytes >= 8 are needed")
    if args.kafka and not kafka_jars_present():
        raise SystemExit("--kafka needs Apache Kafka's jars: bash scripts/fetch_jvm.sh")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)  # stop what was started, then exit
    overrides = dict(args.broker_override)
    settings = {"zookeeper.session.timeout.ms": args.session_timeout_ms, **overrides}
    tmp_root = tempfile.mkdtemp(prefix="odradek-cluster-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "cluster",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(),
        "params": {
            "parts": parts, "rounds": args.rounds, "records": args.records,
            "warmup_records_per_partition": args.warmup_records,
            "value_bytes": args.value_bytes, "session_timeout_ms": args.session_timeout_ms,
            "broker_overrides": overrides, "cluster_settings": settings,
            "replication_factor": SIZE, "min_insync_replicas": MIN_ISR,
            "throughput_partitions": list(PARTITION_SHAPES),
            "rate": args.rate, "seconds": args.seconds, "warmup": args.warmup,
            "fetch_wait_ms": args.fetch_wait_ms, "linger_ms": args.linger_ms,
            "failover_rate": args.failover_rate, "steady_s": args.steady_s,
            "faults": args.faults, "rdkafka_debug": args.rdkafka_debug,
            "imbalance_check_s": args.imbalance_check_s,
            "throughput_producer": {"acks": {CLUSTER: "all", SINGLE: 1, KAFKA_CLUSTER: "all"},
                                    "linger.ms": 5,
                                    "batch.num.messages": 100_000, "compression.type": "none",
                                    "enable.idempotence": False},
            "failover_producer": {"acks": "all", "linger.ms": 5, "enable.idempotence": False,
                                  "message.timeout.ms": 300_000},
            "single": "odradek serve, default config, fresh data dir per run",
            "kafka": args.kafka,
            "kafka_cluster": (f"Apache Kafka {KAFKA_VERSION}, 3 nodes (KRaft, each broker "
                              "and controller, static quorum), -Xmx1G -Xms1G each, internal "
                              "topics RF 3 / min ISR 2, the rest default; fresh per run"
                              if args.kafka else None),
        },
    }
    zk: ZooKeeperServer | None = None
    try:
        zk = ZooKeeperServer(Path(tmp_root) / "zookeeper")
        zk.start()
        _LIVE[zk.pid] = zk.stop  # type: ignore[index]
        results["machine"]["zookeeper"] = zookeeper_version(zk)
        if "throughput" in parts:
            results["throughput"] = run_throughput(zk, args, settings, tmp_root)
        if "latency" in parts:
            results["latency"] = run_latency(zk, args, settings, tmp_root)
        if "failover" in parts:
            results["failover"] = run_failover(zk, args, settings, tmp_root)
        for part in ("rebalance", "rolling"):
            if part in parts:
                results[part] = run_balance(zk, args, settings, tmp_root, part)
    finally:
        _cleaning_up()
        if zk is not None:
            _LIVE.pop(zk.pid or -1, None)
        _stop_leftovers()  # brokers first: their controlled shutdown needs ZooKeeper
        if zk is not None:
            zk.stop()
        _stop_resource_tracker()
        if args.keep:
            note(f"kept {tmp_root}")
        else:
            shutil.rmtree(tmp_root, ignore_errors=True)
    results["brokers_killed_after_ignoring_sigterm"] = HUNG
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
