"""``odradek cluster up|status`` and ``odradek topics describe``'s cluster filters, as a
user runs them: ``python -m odradek ...`` subprocesses, a real ZooKeeper (Debian's
package), real ``odradek serve`` processes and confluent-kafka.

``cluster up`` is started the way a user starts it in a terminal and stopped with
Ctrl-C (SIGINT to its pid); its data directory is reused by a second run. The status
and describe tests share one cluster of ``odradek.testing.running_cluster`` (module
scope) and stop and restart one of its brokers."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli.cluster import READY_PREFIX
from odradek.client.metadata import ClusterMetadata, fetch_metadata
from odradek.devcluster import port_in_use
from odradek.testing import RunningCluster, running_cluster

START_TIMEOUT_S = 180.0  # the whole `cluster up` startup, on a busy 2-core machine
STOP_TIMEOUT_S = 180.0  # Ctrl-C to exit: three controlled shutdowns, one at a time
WAIT_S = 60.0
# Few internal-topic partitions and quick failure detection, as a user may ask with
# --override: the default 50 partitions per internal topic only make the test slower.
QUICK = ["--override", "offsets.topic.num.partitions=4",
         "--override", "transaction.state.log.num.partitions=4",
         "--override", "zookeeper.session.timeout.ms=4000"]


def odradek(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True,
                          text=True, timeout=timeout)


def free_base_port(count: int) -> int:
    """A port P with P..P+count-1 all free on 127.0.0.1 (the range above Linux's
    ephemeral ports' default start is avoided: clients' ports come from there)."""
    for _ in range(200):
        base = random.randrange(20000, 32000)
        if not any(port_in_use(base + i) for i in range(count)):
            return base
    raise AssertionError("no free range of ports")


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # fields: state, ppid, ...
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class ClusterUp:
    """``odradek cluster up`` in a subprocess; its output collected by threads."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "odradek", "cluster", "up", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [threading.Thread(target=self._drain, args=(s, sink), daemon=True)
                         for s, sink in ((self.process.stdout, self.stdout),
                                         (self.process.stderr, self.stderr))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(stream, sink: list[str]) -> None:  # type: ignore[no-untyped-def]
        for line in iter(stream.readline, ""):
            sink.append(line)
        stream.close()

    def output(self) -> str:
        return ("--- stdout ---\n" + "".join(self.stdout)
                + "--- stderr ---\n" + "".join(self.stderr))

    def wait_ready(self) -> str:
        """The bootstrap servers of the ready line."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in list(self.stdout):
                if line.startswith(READY_PREFIX):
                    return line[len(READY_PREFIX):].strip()
            assert self.process.poll() is None, (
                f"cluster up exited with {self.process.returncode}\n{self.output()}")
            time.sleep(0.1)
        raise AssertionError(f"no ready line within {START_TIMEOUT_S:.0f}s\n{self.output()}")

    def cluster_id(self) -> str:
        for line in self.stdout:
            if match := re.match(r"cluster id (\S+),", line):
                return match.group(1)
        raise AssertionError(f"no cluster id printed\n{self.output()}")

    def interrupt(self) -> int:
        """Ctrl-C, and its exit code."""
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"cluster up still running {STOP_TIMEOUT_S:.0f}s after "
                                 f"Ctrl-C\n{self.output()}") from None
        for reader in self._readers:
            reader.join(10)
        return code

    def kill_everything(self) -> None:
        """After a failed test: the cluster's processes, by pid, then itself."""
        if self.process.poll() is None:
            for pid in children(self.process.pid):
                os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait()


@pytest.fixture
def cluster_up() -> Iterator[list[ClusterUp]]:
    """The ``cluster up`` processes a test starts, killed if the test leaves one."""
    started: list[ClusterUp] = []
    yield started
    for run in started:
        run.kill_everything()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 60000})
    failures: list[str] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: err is None
                         or failures.append(err.str()))
    assert producer.flush(90) == 0, "records not acknowledged in time"
    assert failures == []


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    """Every record of the topic's partitions, from the beginning, without a group's
    commits."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-cli-test",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                         for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().retriable(), msg.error().str()
                continue
            values.append(msg.value())
        return values
    finally:
        consumer.close()


def test_cluster_up_produce_consume_ctrl_c_and_up_again(tmp_path: Path,
                                                        cluster_up: list[ClusterUp]) -> None:
    data = tmp_path / "odradek-cluster"
    base = free_base_port(3)
    first = ClusterUp("--brokers", "3", "--data-dir", str(data), "--port", str(base), *QUICK)
    cluster_up.append(first)
    bootstrap = first.wait_ready()
    assert bootstrap == f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
    processes = children(first.process.pid)
    assert len(processes) == 4, (processes, first.output())  # ZooKeeper and 3 brokers
    assert (data / "zookeeper" / "data").is_dir()
    assert all((data / f"broker-{n}" / "meta.properties").exists() for n in (1, 2, 3))

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", 3)], operation_timeout=30)["events"].result(60)
    values = [f"record-{i}".encode() for i in range(300)]
    produce(bootstrap, "events", values)
    assert sorted(consume_all(bootstrap, "events", 3, len(values))) == sorted(values)

    status = odradek("cluster", "status", "--bootstrap-server", bootstrap)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == f"Cluster id: {first.cluster_id()}"
    for n in (1, 2, 3):
        assert any(line.startswith(f"\tId: {n}\tAddress: 127.0.0.1:{base + n - 1}\tRack: -")
                   for line in lines), status.stdout
    assert "Under-replicated partitions: 0" in lines and "Offline partitions: 0" in lines
    # The topic took the cluster's default replication factor: three replicas each.
    described = odradek("topics", "describe", "events", "--bootstrap-server", bootstrap)
    assert described.stdout.startswith("Topic: events\tPartitionCount: 3\tReplicationFactor: 3")

    assert first.interrupt() == 0, first.output()
    assert [pid for pid in processes if alive(pid)] == []
    out = "".join(first.stdout)
    assert "broker 1 stopped\n" in out and "ZooKeeper stopped\n" in out
    assert first.stderr == [], first.output()

    # Again on the same directory: the same cluster, the same records.
    second = ClusterUp("--brokers", "3", "--data-dir", str(data), "--port", str(base), *QUICK)
    cluster_up.append(second)
    assert second.wait_ready() == bootstrap
    assert second.cluster_id() == first.cluster_id()
    assert sorted(consume_all(bootstrap, "events", 3, len(values))) == sorted(values)

    # A broker that dies is reported, and the others go on until Ctrl-C.
    processes = children(second.process.pid)
    broker_3 = next(p for p in processes
                    if str(data / "broker-3") in Path(f"/proc/{p}/cmdline").read_text())
    os.kill(broker_3, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while not any("broker 3" in line for line in second.stderr):
        assert time.monotonic() < deadline, second.output()
        time.sleep(0.2)
    assert f"broker 3 (pid {broker_3}) exited with code -9" in "".join(second.stderr)
    assert second.interrupt() == 1, second.output()  # not a clean run: one broker died
    assert [pid for pid in processes if alive(pid)] == []
    assert "ZooKeeper stopped\n" in "".join(second.stdout)


def test_brokers_per_host_survive_the_loss_of_a_host(tmp_path: Path,
                                                     cluster_up: list[ClusterUp]) -> None:
    # Four brokers laid out two to a host: each host is a rack, so every partition of a
    # two-replica topic keeps a replica on each host, and killing both brokers of one
    # host (a host lost) loses no acknowledged record and leaves the topic writable.
    data = tmp_path / "odradek-cluster"
    base = free_base_port(4)
    run = ClusterUp("--brokers", "4", "--brokers-per-host", "2", "--data-dir", str(data),
                    "--port", str(base), *QUICK)
    cluster_up.append(run)
    bootstrap = run.wait_ready()
    assert f"broker 3 on 127.0.0.1:{base + 2} (rack host-2; pid " in "".join(run.stdout)
    status = odradek("cluster", "status", "--bootstrap-server", bootstrap)
    for n, host in ((1, 1), (2, 1), (3, 2), (4, 2)):
        assert f"\tId: {n}\tAddress: 127.0.0.1:{base + n - 1}\tRack: host-{host}" \
            in status.stdout, status.stdout

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("spread", 8, 2, config={"min.insync.replicas": "1"})],
                        operation_timeout=30)["spread"].result(60)
    metadata = wait_for(bootstrap, lambda md: "spread" in md.topics
                        and not md.under_replicated(), "every replica in sync")
    host = {1: 1, 2: 1, 3: 2, 4: 2}
    replicas = [p.replicas for p in metadata.partitions() if p.topic == "spread"]
    assert len(replicas) == 8
    assert all(sorted(host[b] for b in r) == [1, 2] for r in replicas), replicas
    before = [f"before-{i}".encode() for i in range(200)]
    produce(bootstrap, "spread", before)

    brokers = {n: next(p for p in children(run.process.pid) if str(data / f"broker-{n}")
                       in Path(f"/proc/{p}/cmdline").read_text()) for n in (3, 4)}
    for pid in brokers.values():
        os.kill(pid, signal.SIGKILL)
    survivors = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
    wait_for(survivors, lambda md: sorted(md.brokers) == [1, 2] and all(
        p.leader in (1, 2) for p in md.partitions() if p.topic == "spread"),
        "host-1's brokers to lead every partition")
    after = [f"after-{i}".encode() for i in range(200)]
    produce(survivors, "spread", after)
    assert sorted(consume_all(survivors, "spread", 8, 400)) == sorted(before + after)
    assert run.interrupt() == 1, run.output()  # not a clean run: two brokers died
    for n, pid in brokers.items():
        assert f"broker {n} (pid {pid}) exited with code -9" in "".join(run.stderr)


def test_cluster_up_on_ports_in_use_says_so(tmp_path: Path) -> None:
    base = free_base_port(2)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", base + 1))
        blocker.listen()
        done = odradek("cluster", "up", "--brokers", "2", "--port", str(base),
                       "--data-dir", str(tmp_path / "c"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == (f"odradek cluster up: port {base + 1} of 127.0.0.1 is in use "
                           "(another broker or cluster running?); stop it or choose other "
                           "ports\n")
    assert not (tmp_path / "c" / "zookeeper").exists()  # nothing was started


def test_cluster_up_refuses_a_rack_beside_brokers_per_host(tmp_path: Path) -> None:
    done = odradek("cluster", "up", "--brokers", "2", "--brokers-per-host", "1",
                   "--override", "broker.rack=a", "--data-dir", str(tmp_path / "c"))
    assert done.returncode == 2
    assert done.stderr == "odradek cluster up: broker.rack is set by --brokers-per-host\n"
    assert not (tmp_path / "c").exists()


def test_cluster_up_on_a_directory_in_use_says_so(tmp_path: Path) -> None:
    import fcntl

    (tmp_path / "c").mkdir()
    with open(tmp_path / "c" / ".lock", "a+") as lock:  # as a running `cluster up` holds it
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = odradek("cluster", "up", "--brokers", "1", "--port", str(free_base_port(1)),
                       "--data-dir", str(tmp_path / "c"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == (f"odradek cluster up: {tmp_path / 'c'} is in use by another "
                           "cluster (odradek cluster up?); stop it or choose another data "
                           "directory\n")
    assert not (tmp_path / "c" / "zookeeper").exists()


def test_cluster_status_of_an_unreachable_broker_fails_clearly() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = odradek("cluster", "status", "--bootstrap-server", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert done.stderr.startswith(f"odradek cluster status: cannot reach the broker at "
                                  f"127.0.0.1:{port}: "), done.stderr
    assert "Connection refused" in done.stderr and "Traceback" not in done.stderr


# --- status and describe with a broker down ------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[RunningCluster]:
    with running_cluster(brokers=3) as running:
        yield running


def wait_for(bootstrap: str, predicate, what: str) -> ClusterMetadata:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while True:
        metadata = fetch_metadata(bootstrap, timeout_s=10)
        if predicate(metadata):
            return metadata
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {metadata}"
        time.sleep(0.3)


def partition_lines(text: str) -> list[tuple[str, int]]:
    """(topic, partition) of each partition line of describe's or status's output."""
    return [(m.group(1), int(m.group(2)))
            for m in re.finditer(r"^\tTopic: (\S+)\tPartition: (\d+)\t", text, re.MULTILINE)]


def test_status_and_describe_filters_with_a_broker_stopped(cluster: RunningCluster) -> None:
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic("orders", 3, 3),
        # One replica each, placed: partition 0 only on broker 2, partition 1 on broker 1.
        NewTopic("solo", 2, replica_assignment=[[2], [1]]),
    ], operation_timeout=30)
    for future in futures.values():
        future.result(60)
    produce(bootstrap, "orders", [b"a", b"b", b"c"])
    wait_for(bootstrap, lambda md: not md.under_replicated() and not md.unavailable()
             and set(md.topics) >= {"orders", "solo"}, "every replica in sync")
    before = odradek("topics", "describe", "orders", "--bootstrap-server", bootstrap)
    assert before.returncode == 0, before.stderr
    assert odradek("topics", "describe", "--under-replicated-partitions",
                   "--bootstrap-server", bootstrap).stdout == ""
    orders = fetch_metadata(bootstrap).topics["orders"].partitions
    epochs = {p.partition: p.leader_epoch for p in orders}
    leaders = {p.partition: p.leader for p in orders}
    lines = before.stdout.splitlines()
    assert partition_lines(before.stdout) == [("orders", 0), ("orders", 1), ("orders", 2)]
    for (_, partition), line in zip(partition_lines(before.stdout), lines[1:], strict=True):
        replicas = line.split("\tReplicas: ")[1].split("\t")[0]
        assert sorted(replicas.split(",")) == ["1", "2", "3"], line
        # In sync: the ISR is every replica; the epoch is the one Metadata v7+ carries.
        assert line.endswith(f"\tIsr: {replicas}\tLeaderEpoch: {epochs[partition]}") or (
            sorted(line.split("\tIsr: ")[1].split("\t")[0].split(",")) == ["1", "2", "3"]
            and line.endswith(f"\tLeaderEpoch: {epochs[partition]}")), line

    cluster.brokers[2].stop()  # a controlled shutdown: its leaderships move first
    try:
        metadata = wait_for(bootstrap, lambda md: 2 not in md.brokers
                            and len(md.under_replicated()) == 3 and len(md.unavailable()) == 1,
                            "broker 2 out of every ISR")
        under = odradek("topics", "describe", "--under-replicated-partitions",
                        "--bootstrap-server", bootstrap)
        assert under.returncode == 0, under.stderr
        assert partition_lines(under.stdout) == [("orders", 0), ("orders", 1), ("orders", 2)]
        led_by_2 = {p for p, leader in leaders.items() if leader == 2}
        for (_, partition), line in zip(partition_lines(under.stdout),
                                        under.stdout.splitlines(), strict=True):
            epoch = metadata.topics["orders"].partitions[partition].leader_epoch
            assert f"\tLeaderEpoch: {epoch}\t" in line, line
            # A new leader, a new epoch: the column is the broker's, not a constant.
            if partition in led_by_2:
                assert epoch > epochs[partition], (line, epochs)
            assert "\tReplicas: " in line and "\tOffline: 2" in line, line
            isr = line.split("\tIsr: ")[1].split("\t")[0]
            assert "2" not in isr.split(","), line
            assert "\tLeader: 2\t" not in line
        unavailable = odradek("topics", "describe", "--unavailable-partitions",
                              "--bootstrap-server", bootstrap)
        assert unavailable.stdout == ("\tTopic: solo\tPartition: 0\tLeader: none\t"
                                      f"Replicas: 2\tIsr: 2\tLeaderEpoch: "
                                      f"{metadata.topics['solo'].partitions[0].leader_epoch}"
                                      "\tOffline: 2\tError: LEADER_NOT_AVAILABLE\n"), (
            unavailable.stdout)
        # Both filters: either kind, in topic order.
        both = odradek("topics", "describe", "--under-replicated-partitions",
                       "--unavailable-partitions", "--bootstrap-server", bootstrap)
        assert partition_lines(both.stdout) == [("orders", 0), ("orders", 1), ("orders", 2),
                                                ("solo", 0)]
        # Only named topics are looked at.
        assert partition_lines(odradek("topics", "describe", "solo",
                                       "--under-replicated-partitions",
                                       "--unavailable-partitions", "--bootstrap-server",
                                       bootstrap).stdout) == [("solo", 0)]

        status = odradek("cluster", "status", "--bootstrap-server", bootstrap)
        assert status.returncode == 0, status.stderr
        text = status.stdout
        assert "\n\tId: 2\t" not in text
        assert "Brokers: 2\n" in text and "Brokers not live that hold replicas: 2\n" in text
        controller = metadata.controller_id
        assert controller in (1, 3)
        assert f"Controller: {controller}\n" in text
        assert f"\tId: {controller}\tAddress: 127.0.0.1:{cluster.brokers[controller].port}" \
               f"\tRack: -\t(controller)\n" in text
        assert "Partitions: 5 in 2 topics\n" in text
        under_part, offline_part = text.split("Under-replicated partitions: ")[1].split(
            "Offline partitions: ")
        assert under_part.startswith("3\n")
        assert partition_lines(under_part) == [("orders", 0), ("orders", 1), ("orders", 2)]
        assert offline_part.startswith("1\n")
        assert partition_lines(offline_part) == [("solo", 0)]
    finally:
        if not cluster.brokers[2].running:
            cluster.brokers[2].start()

    # Back: it catches up and rejoins every ISR; nothing is listed any more.
    wait_for(bootstrap, lambda md: not md.under_replicated() and not md.unavailable(),
             "broker 2 back in every ISR")
    assert odradek("topics", "describe", "--under-replicated-partitions",
                   "--unavailable-partitions", "--bootstrap-server", bootstrap).stdout == ""
    status = odradek("cluster", "status", "--bootstrap-server", bootstrap).stdout
    assert "Brokers: 3\n" in status and "Under-replicated partitions: 0\n" in status
    assert "Offline partitions: 0\n" in status and "not live" not in status
