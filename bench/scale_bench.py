"""Scale benchmark: how ``odradek serve``'s costs grow (issue 4, "cost growth, not one
point").

Four parts, each against an ``odradek serve`` this script starts itself (default config,
a fresh data directory under ``--dir``, a free port of 127.0.0.1, stopped by SIGTERM to
its pid):

1. **Partitions.** 100 topics (fewer when N < 100) totalling N partitions (1, 100, 1,000,
   10,000), created with ``AdminClient``; then ``--records`` records of 100 bytes produced
   with one ``confluent_kafka.Producer`` (acks=1, linger.ms=5 by default), record i going to
   partition i mod N of the list of all N partitions, so every partition gets the same
   share. Timed from the first ``produce()`` to the return of ``flush()``. Reports the
   aggregate records/s, broker CPU seconds per million records (utime+stime from
   /proc/PID/stat), broker RSS (VmRSS) after the run and its peak (VmHWM), the time the
   topics took to create, and the client's CPU. Rows run in rounds (ascending, then
   descending) and the 10,000/1 rate ratio is the median of per-round ratios. Then
   (``--raw-batch``, on by default) ``--raw-records`` records go to the same partitions
   as pre-built batches in raw Produce v3 requests (``produce_raw``): the rate of the
   broker with a client that costs almost nothing, where librdkafka spreading records
   one by one over 10,000 partitions is the limit of the first load. ``--linger-ms`` and
   ``--keyless`` (record i to topic i mod T with no partition named, so librdkafka's
   sticky partitioner, KIP-480, fills one partition's batch at a time) try whether the
   client does better with other settings; ``--tansu`` and ``--kafka`` run each row's
   librdkafka load against Tansu 0.6 (broker_bench.py's native broker) and against
   Apache Kafka 4.4.0 (one KRaft node, 1 GiB heap, issue 17's yardstick) too, alternating,
   so the rate, CPU and memory of a broker not written in Python - and of the one
   Odradek is compatible with - stand beside Odradek's at every partition count.
2. **Startup with 10,000 partitions** (the largest N of part 1, first round): that
   broker is stopped with SIGTERM (the stop is timed), started again on the same data
   directory, and timed from spawn to its banner line and to the first Metadata answer
   (raw Metadata v1, all topics) listing every partition; its RSS is read then. Then a
   tenth of ``--records`` more records are produced across all partitions and the
   broker is killed (SIGKILL) right after the producer's flush, and the unclean start
   is timed the same way (every active segment is validated: the recovery path). That
   broker is stopped (timed: it syncs what recovery validated), started again (timed),
   left idle for ``--idle-seconds`` with no client (its CPU over that time: the
   housekeeping that grows with partitions), and stopped with nothing produced since
   its start (timed).
3. **Connections.** 1, 10, 100, 1,000 concurrent client connections, each a raw asyncio
   socket speaking the Kafka protocol: ApiVersions v0, Metadata v1, then Produce v3
   requests (one batch of 10 records of 100 bytes, acks=1) one at a time for
   ``--conn-seconds`` while all connections are up. Reports requests/s, errors, broker
   RSS and broker CPU microseconds per request.
4. **Flow.** ``--flow-gib`` GiB of 1 KiB records produced to one partition with
   confluent-kafka, while a sampler reads the broker's VmRSS, CPU time and the log's
   size on disk every second. Reports RSS min/max, and the rate of each GiB of log
   (interpolated crossing times), first vs last. The data directory is deleted after.

Noise: the machine has 2 CPUs shared by the client, the broker and whatever else runs;
the client (a Python produce loop, librdkafka's threads, or the asyncio load generator)
is often the limit, so its CPU is reported beside every rate, and the comparisons
(10,000 vs 1 partition, last vs first GiB) are ratios measured in the same run.

Run: ``.venv/bin/python bench/scale_bench.py`` (6-15 minutes here); a quick run:
``.venv/bin/python bench/scale_bench.py --quick``. ``--help`` lists the flags.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import os
import re
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_response_schema
from kio.serial import entity_reader

from _common import (
    MiB,
    finish,
    machine_info,
    machine_line,
    note,
    proc_cpu_s,
    proc_peak_rss_mib,
    proc_rss_mib,
    self_cpu_s,
    shown_path,
)
from broker_bench import LOAD_PRODUCER
from odradek.devcluster import BrokerProcess as DevBroker
from odradek.devcluster import ClusterError, free_port
from odradek.records import builder

GiB = 1024 * MiB
START_TIMEOUT_S = 120.0  # spawn to banner, and spawn to a full Metadata answer
STALL_TIMEOUT_S = 60.0  # no progress for this long: the run is declared failed
STOP_TIMEOUT_S = 60.0  # SIGTERM to exit; then SIGKILL
IDLE_SETTLE_S = 2.0  # after a start, before the idle CPU is measured (start-up work ends)
REQUEST_TIMEOUT_S = 30.0  # any single raw request
BANNER = re.compile(r"^Odradek \S+ listening on ", re.MULTILINE)


# --- the broker process ---------------------------------------------------------------


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


class MeasuredBroker:
    """What the parts read of a broker process, by its ``pid``."""

    pid: int

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def rss_mib(self) -> float:
        return proc_rss_mib(self.pid)

    def peak_rss_mib(self) -> float:
        return proc_peak_rss_mib(self.pid)

    def open_fds(self) -> int:
        return open_fds(self.pid)


class Odradek(MeasuredBroker):
    """``odradek serve`` on ``port`` of 127.0.0.1 with data in ``data_dir``
    (``odradek.devcluster``'s launcher); output goes to ``data_dir + ".<n>.out"``. The
    data directory outlives the process: the caller removes it."""

    starts = 0

    def __init__(self, data_dir: str, port: int | None = None,
                 overrides: Sequence[str] = ()) -> None:
        Odradek.starts += 1
        self.data_dir = data_dir
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.process = DevBroker(None, Path(data_dir), Path(f"{data_dir}.{Odradek.starts}.out"),
                                 port=self.port,
                                 args=[arg for item in overrides for arg in ("--override", item)])
        self.spawned_at = time.monotonic()
        self.process.start()
        assert self.process.pid is not None
        self.pid = self.process.pid
        self.banner_s: float | None = None

    def output(self) -> str:
        return self.process.this_start()

    def check_alive(self) -> None:
        if not self.process.running:
            raise RuntimeError(f"odradek exited with {self.process.returncode}:\n"
                               f"{self.output()[-2000:]}")

    def poll_banner(self) -> bool:
        # The banner, not the INFO line "listening on" logged just before it: SIGTERM
        # is handled only once the banner is out.
        if self.banner_s is None and BANNER.search(self.output()):
            self.banner_s = time.monotonic() - self.spawned_at
        return self.banner_s is not None

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> float:
        """Seconds from spawn to the banner line (printed once the listener is up)."""
        deadline = self.spawned_at + timeout
        while not self.poll_banner():
            self.check_alive()
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"odradek: no banner after {timeout} s")
            time.sleep(0.01)
        assert self.banner_s is not None
        return self.banner_s

    def stop(self) -> tuple[int | None, float]:
        """SIGTERM; returns (exit code, seconds to exit)."""
        t0 = time.monotonic()
        try:
            code = self.process.stop(STOP_TIMEOUT_S)
        except ClusterError:
            note(f"odradek (pid {self.pid}) ignored SIGTERM for {STOP_TIMEOUT_S} s: SIGKILL")
            code = self.process.returncode
        return code, time.monotonic() - t0

    def kill(self) -> None:
        self.process.kill()


class Baseline(MeasuredBroker):
    """Tansu 0.6 with memory storage or Apache Kafka 4.4.0 (broker_bench's launcher, ``kind``
    its name there), with the methods the partitions part uses: the same librdkafka load
    against a native broker, so that what the client costs at 10,000 partitions is not
    taken for the broker's cost."""

    def __init__(self, kind: str, tmp_root: str) -> None:
        from broker_bench import Broker

        self._broker = Broker(kind, tmp_root)  # ready when constructed
        self.pid, self.port, self.bootstrap = (self._broker.pid, self._broker.port,
                                               self._broker.bootstrap)

    def wait_ready(self) -> float:
        return 0.0

    def stop(self) -> tuple[int | None, float]:
        t0 = time.monotonic()
        return self._broker.stop(), time.monotonic() - t0


# --- raw Kafka protocol (blocking; for Metadata at startup) ----------------------------


def encode_request(api_key: int, version: int, correlation_id: int,
                   body: dict[str, Any]) -> bytes:
    """A whole request frame (size prefix included): odradek.client.wire's, as
    scale-bench."""
    from odradek.client.wire import encode_request as wire_request

    return wire_request(api_key, version, body, correlation_id, client_id="scale-bench")


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response payload (size prefix removed)."""
    schema = load_response_schema(api_key, version)
    header, used = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, used)
    return header.correlation_id, body


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


def metadata_all(port: int, timeout: float = REQUEST_TIMEOUT_S) -> tuple[float, int, int]:
    """Metadata v1 for all topics over a fresh connection: (monotonic time the answer was
    received, topics, partitions without error), internal topics left out."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(encode_request(3, 1, 1, {"topics": None}))
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        payload = recv_exactly(sock, size)
    received = time.monotonic()
    _, body = decode_response(3, 1, payload)
    topics = [t for t in body.topics if t.error_code == 0 and not t.is_internal]
    partitions = sum(1 for t in topics for p in t.partitions if p.error_code == 0)
    return received, len(topics), partitions


def wait_metadata(broker: Odradek, partitions: int,
                  timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Poll from spawn until the broker answers Metadata listing ``partitions``; also
    notes when the banner appeared. Times are from spawn."""
    deadline = broker.spawned_at + timeout
    attempts = 0
    last_error = ""
    while True:
        broker.poll_banner()
        broker.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"no Metadata answer with {partitions:,} partitions after "
                               f"{timeout} s (last: {last_error})")
        attempts += 1
        try:
            received, topics, seen = metadata_all(broker.port)
        except OSError as exc:
            last_error = str(exc)
            time.sleep(0.01)
            continue
        if seen >= partitions:
            broker.poll_banner()
            return {"metadata_s": round(received - broker.spawned_at, 3),
                    "metadata_attempts": attempts, "topics": topics, "partitions": seen}
        last_error = f"{seen:,} partitions listed"
        time.sleep(0.05)


# --- confluent-kafka helpers ----------------------------------------------------------


def bench_machine_info() -> dict[str, Any]:
    return machine_info(confluent_kafka=getattr(confluent_kafka, "__version__", None),
                        librdkafka=confluent_kafka.libversion()[0],
                        ulimit_nofile=list(_nofile()))


def _nofile() -> tuple[int, int]:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)


def topic_layout(n_partitions: int, max_topics: int) -> list[tuple[str, int]]:
    """(topic, partitions): ``max_topics`` topics (fewer if N is smaller) sharing N."""
    topics = min(max_topics, n_partitions)
    base, extra = divmod(n_partitions, topics)
    return [(f"scale-{i:03d}", base + (1 if i < extra else 0)) for i in range(topics)]


def create_topics(bootstrap: str, layout: list[tuple[str, int]]) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in layout],
        operation_timeout=STALL_TIMEOUT_S, request_timeout=STALL_TIMEOUT_S * 3)
    for f in futures.values():
        f.result(timeout=STALL_TIMEOUT_S * 5)
    return time.monotonic() - t0


def make_producer(bootstrap: str, errors: list[str], **extra: Any) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap,
        "error_cb": lambda err: errors.append(str(err)),
        **LOAD_PRODUCER,
        "log.connection.close": False,  # the broker is stopped while clients linger
        **extra,
    })


def produce_spread(producer: Producer, targets: list[tuple[str, int]], n: int,
                   value: bytes, progress: Callable[[int], None] | None = None) -> None:
    """Record i to ``targets[i % len(targets)]``; then flush. Bounded: fails when the
    queue or the flush makes no progress for STALL_TIMEOUT_S."""
    produce_one = producer.produce
    k = len(targets)
    sent = 0
    while sent < n:
        for topic, partition in targets[: min(k, n - sent)]:
            try:
                produce_one(topic, value, partition=partition)
            except BufferError:
                stalled_at = time.monotonic()
                while True:
                    producer.poll(0.05)
                    try:
                        produce_one(topic, value, partition=partition)
                        break
                    except BufferError:
                        if time.monotonic() - stalled_at > STALL_TIMEOUT_S:
                            raise RuntimeError(
                                f"producer queue full for {STALL_TIMEOUT_S} s after "
                                f"{sent:,} records") from None
            sent += 1
            if progress is not None and not sent & 0xFFFF:
                progress(sent)
    flush(producer)


def flush(producer: Producer) -> None:
    remaining = len(producer)
    while remaining:
        left = producer.flush(STALL_TIMEOUT_S)
        if left >= remaining:
            raise RuntimeError(f"flush made no progress for {STALL_TIMEOUT_S} s "
                               f"({left:,} records still queued)")
        remaining = left


RAW_IN_FLIGHT = 5  # requests outstanding by default, as librdkafka's max.in.flight


def produce_raw(port: int, targets: list[tuple[str, int]], n: int, value: bytes,
                per_batch: int, per_request: int, same_batches: bool = False,
                in_flight: int = RAW_IN_FLIGHT) -> None:
    """``n`` records in Produce v3 requests (acks=1) of ``per_batch * per_request``
    records each, as pre-built batches for ``per_request`` partitions (fewer when there
    are fewer partitions: one partition gets one batch of them all, as Kafka allows one
    batch per partition per request), the partitions taken in turn so that every one
    gets the same share. What a producer with a long linger sends; the client does
    almost nothing, so the rate is the broker's. With few partitions the batches are
    larger, which favours them: the comparison with many partitions is conservative.
    ``in_flight`` requests are kept outstanding; every answer is decoded and any error
    code fails the run. With ``same_batches`` the batches hold ``per_batch`` records at
    every partition count instead (requests to fewer partitions are smaller): only the
    number of partitions differs."""
    frames, requests = raw_produce_frames(targets, n, value, per_batch, per_request,
                                          same_batches)
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        send_raw_produce(sock, frames, 0, requests, in_flight)


def raw_produce_frames(targets: list[tuple[str, int]], n: int, value: bytes,
                       per_batch: int, per_request: int, same_batches: bool = False
                       ) -> tuple[list[bytearray], int]:
    """``produce_raw``'s requests: the distinct frames (request ``i`` is frame ``i`` mod
    their number) and how many requests carry the ``n`` records."""
    per_request = max(1, min(per_request, len(targets))) if same_batches else per_request
    per_message = per_batch * per_request
    per_request = max(1, min(per_request, len(targets)))
    per_batch = per_message // per_request
    batch = builder.build_simple([value] * per_batch, timestamp=int(time.time() * 1000))
    requests = -(-n // per_message)
    distinct = -(-len(targets) // per_request)  # requests before the partitions repeat
    frames = []
    for i in range(min(requests, distinct)):
        group = [targets[(i * per_request + j) % len(targets)] for j in range(per_request)]
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition in group:
            topics.setdefault(topic, []).append({"index": partition, "records": batch})
        frames.append(bytearray(encode_request(0, 3, 0, {
            "transactional_id": None, "acks": 1, "timeout": 30_000,
            "topic_data": [{"name": t, "partition_data": parts}
                           for t, parts in topics.items()]})))
    return frames, requests


def send_raw_produce(sock: socket.socket, frames: list[bytearray], start: int, count: int,
                     in_flight: int = RAW_IN_FLIGHT) -> None:
    """Send requests ``start`` to ``start + count`` of ``raw_produce_frames``' on ``sock``,
    ``in_flight`` outstanding, and read every answer (an error code fails the run)."""

    def answer() -> None:
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        _, body = decode_response(0, 3, recv_exactly(sock, size))
        for topic in body.responses:
            for part in topic.partition_responses:
                if part.error_code != 0:
                    raise RuntimeError(f"produce error {part.error_code} for "
                                       f"{topic.name}-{part.index}")

    outstanding = 0
    for i in range(start, start + count):
        frame = frames[i % len(frames)]
        struct.pack_into(">i", frame, 8, i + 1)  # correlation id: after size, key, version
        sock.sendall(frame)
        outstanding += 1
        if outstanding == in_flight:
            answer()
            outstanding -= 1
    while outstanding:
        answer()
        outstanding -= 1


# --- part 1: partitions ---------------------------------------------------------------


def partitions_row(n_partitions: int, args: argparse.Namespace, tmp_root: str,
                   keep_running: bool, kind: str = "odradek",
                   ) -> tuple[dict[str, Any], Odradek | None]:
    """One N: fresh broker, topics, produce. The broker is returned still running when
    ``keep_running`` (for the startup part), else stopped and its data removed.
    ``kind`` "tansu" or "kafka": the same librdkafka load against that broker (no raw load,
    no startup)."""
    data_dir = tempfile.mkdtemp(prefix=f"p{n_partitions}-", dir=tmp_root)
    broker: Odradek | Baseline = (Odradek(data_dir) if kind == "odradek"
                                  else Baseline(kind, tmp_root))
    keep = False
    try:
        broker.wait_ready()
        layout = topic_layout(n_partitions, args.topics)
        create_s = create_topics(broker.bootstrap, layout)
        settle_s = settle(broker)
        targets = [(name, p) for name, n in layout for p in range(n)]
        errors: list[str] = []
        producer = make_producer(broker.bootstrap, errors, **{"linger.ms": args.linger_ms})
        md = producer.list_topics(timeout=STALL_TIMEOUT_S)  # connect before timing
        known = sum(len(md.topics[name].partitions) for name, _ in layout)
        if known != n_partitions:
            raise RuntimeError(f"client sees {known:,} of {n_partitions:,} partitions")
        rss_idle = broker.rss_mib()
        value = os.urandom(args.value_bytes)
        cpu0, self0 = broker.cpu_s(), self_cpu_s()
        t0 = time.perf_counter()
        # Partition -1 (librdkafka's RD_KAFKA_PARTITION_UA): the client's partitioner
        # picks; for keyless records that is the sticky partitioner (KIP-480).
        produce_spread(producer, [(name, -1) for name, _ in layout] if args.keyless
                       else targets, args.records, value)
        t1 = time.perf_counter()
        cpu1, self1 = broker.cpu_s(), self_cpu_s()
        del producer  # its connections close before the broker stops
        if errors:
            raise RuntimeError(f"client errors: {errors[:5]}")
        seconds = t1 - t0
        m = args.records / 1e6
        raw: dict[str, Any] = {}
        if args.raw_batch and isinstance(broker, Odradek):
            cpu2, self2 = broker.cpu_s(), self_cpu_s()
            t2 = time.perf_counter()
            produce_raw(broker.port, targets, args.raw_records, value, args.raw_batch,
                        args.raw_request_partitions, args.raw_same_batches,
                        args.raw_in_flight)
            t3 = time.perf_counter()
            cpu3, self3 = broker.cpu_s(), self_cpu_s()
            raw_m = args.raw_records / 1e6
            raw = {"raw_records_s": round(args.raw_records / (t3 - t2)),
                   "raw_broker_cpu_s_per_m": round((cpu3 - cpu2) / raw_m, 3),
                   "raw_broker_cpu_util": round((cpu3 - cpu2) / (t3 - t2), 2),
                   "raw_client_cpu_s_per_m": round((self3 - self2) / raw_m, 3)}
        row = {
            "partitions": n_partitions,
            "topics": len(layout),
            "create_s": round(create_s, 2),
            "settle_s": round(settle_s, 2),
            "records": args.records,
            "seconds": round(seconds, 3),
            "records_s": round(args.records / seconds),
            "broker_cpu_s": round(cpu1 - cpu0, 2),
            "broker_cpu_s_per_m": round((cpu1 - cpu0) / m, 3),
            "broker_cpu_util": round((cpu1 - cpu0) / seconds, 2),
            "client_cpu_s_per_m": round((self1 - self0) / m, 3),
            "broker_rss_idle_mib": round(rss_idle, 1),
            "broker_rss_mib": round(broker.rss_mib(), 1),
            "broker_peak_rss_mib": round(broker.peak_rss_mib(), 1),
            "broker_open_fds": broker.open_fds(),
            **raw,
        }
        if keep_running and isinstance(broker, Odradek):
            keep = True
            return row, broker
        return row, None
    finally:
        if not keep:
            rc, _ = broker.stop()
            if rc != 0 and kind == "odradek":
                note(f"warning: odradek exited with {rc} on SIGTERM")
            shutil.rmtree(data_dir, ignore_errors=True)


SETTLED_CPUS = 0.1  # broker busy less than this over SETTLE_WINDOW_S: creation is done
SETTLE_WINDOW_S = 0.5
SETTLE_TIMEOUT_S = 60.0


def settle(broker: Odradek | Baseline) -> float:
    """Wait until the broker is idle after CreateTopics; the seconds that took. Apache
    Kafka answers CreateTopics when its controller has recorded the topics, then creates
    the logs (1,000 partitions: ~5 CPU s over ~4 s here); a load timed meanwhile would
    measure that work, not the produce path. Odradek creates them before it answers."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < SETTLE_TIMEOUT_S:
        cpu0 = broker.cpu_s()
        time.sleep(SETTLE_WINDOW_S)
        if broker.cpu_s() - cpu0 < SETTLED_CPUS * SETTLE_WINDOW_S:
            break
    return time.monotonic() - t0


BASELINE_NAMES = {"tansu": "Tansu 0.6 (memory storage)",
                  "kafka": "Apache Kafka 4.4.0 (KRaft, 1 GiB heap)"}


def baseline_row(kind: str, n: int, args: argparse.Namespace, tmp_root: str,
                 i: int) -> dict[str, Any]:
    note(f"partitions, round {i + 1}/{args.rounds}: {n:,} partitions, {kind} ...")
    try:
        row, _ = partitions_row(n, args, tmp_root, False, kind=kind)
    except Exception as exc:  # report and go on
        note(f"  FAILED: {exc}")
        return {"partitions": n, "error": str(exc)[:500]}
    note(f"  {row['records_s']:,} records/s, {row['broker_cpu_s_per_m']} broker CPU s/M, "
         f"client {row['client_cpu_s_per_m']} CPU s/M")
    return row


# --- part 2: startup with many partitions ---------------------------------------------


def timed_start(data_dir: str, port: int, partitions: int) -> tuple[Odradek, dict[str, Any]]:
    broker = Odradek(data_dir, port)
    try:
        md = wait_metadata(broker, partitions)
        broker.wait_ready()
    except BaseException:
        broker.kill()
        raise
    return broker, {
        "banner_s": round(broker.banner_s or float("nan"), 3),
        **md,
        "rss_mib": round(broker.rss_mib(), 1),
        "peak_rss_mib": round(broker.peak_rss_mib(), 1),
        "open_fds": broker.open_fds(),
        "startup_cpu_s": round(broker.cpu_s(), 2),
    }


def startup_part(broker: Odradek, n_partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    data_dir, port = broker.data_dir, broker.port
    out: dict[str, Any] = {"partitions": n_partitions,
                           "log_bytes": _dir_log_bytes(data_dir)}
    try:
        rc, stop_s = broker.stop()
        out["clean_stop_s"] = round(stop_s, 2)
        out["clean_stop_exit_code"] = rc
        note(f"  clean stop took {stop_s:.2f} s; starting again on the same directory ...")
        broker, out["clean"] = timed_start(data_dir, port, n_partitions)
        note(f"  clean start: banner {out['clean']['banner_s']} s, full metadata "
             f"{out['clean']['metadata_s']} s, RSS {out['clean']['rss_mib']} MiB")
        # More records everywhere, then SIGKILL: the next start must recover.
        layout = topic_layout(n_partitions, args.topics)
        targets = [(name, p) for name, n in layout for p in range(n)]
        errors: list[str] = []
        producer = make_producer(broker.bootstrap, errors)
        producer.list_topics(timeout=STALL_TIMEOUT_S)
        extra = max(n_partitions, args.records // 10)
        produce_spread(producer, targets, extra, os.urandom(args.value_bytes))
        del producer
        broker.kill()
        out["unclean_extra_records"] = extra
        out["log_bytes_before_kill"] = _dir_log_bytes(data_dir)
        note(f"  {extra:,} more records, SIGKILL; starting again ...")
        broker, out["unclean"] = timed_start(data_dir, port, n_partitions)
        note(f"  unclean start: banner {out['unclean']['banner_s']} s, full metadata "
             f"{out['unclean']['metadata_s']} s, RSS {out['unclean']['rss_mib']} MiB")
        # Stop after the recovery (the recovered data is synced now), start clean, sit
        # idle, and stop with nothing produced since the start: what a restart of a
        # broker with many quiet partitions costs, and its housekeeping CPU when idle.
        rc, stop_s = broker.stop()
        out["stop_after_recovery_s"] = round(stop_s, 2)
        out["stop_after_recovery_exit_code"] = rc
        broker, out["clean_again"] = timed_start(data_dir, port, n_partitions)
        time.sleep(IDLE_SETTLE_S)
        cpu0, t0 = broker.cpu_s(), time.monotonic()
        time.sleep(args.idle_seconds)
        out["idle_seconds"] = round(time.monotonic() - t0, 1)
        out["idle_cpus"] = round((broker.cpu_s() - cpu0) / out["idle_seconds"], 4)
        rc, stop_s = broker.stop()
        out["idle_stop_s"] = round(stop_s, 2)
        out["idle_stop_exit_code"] = rc
        note(f"  stop after recovery {out['stop_after_recovery_s']} s; clean start again "
             f"{out['clean_again']['banner_s']} s; idle {out['idle_cpus']} CPUs over "
             f"{out['idle_seconds']} s; stop with nothing produced {out['idle_stop_s']} s")
    finally:
        rc, _ = broker.stop()
        if rc != 0:
            note(f"warning: odradek exited with {rc} on SIGTERM")
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def _dir_log_bytes(data_dir: str) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(data_dir):
            if entry.is_dir():
                with contextlib.suppress(OSError):
                    total += sum(f.stat().st_size for f in os.scandir(entry.path)
                                 if f.name.endswith(".log"))
    return total


# --- part 3: connections --------------------------------------------------------------

CONN_TOPIC = "scale-conn"


class ConnStats:
    def __init__(self) -> None:
        self.ready = 0
        self.requests = 0
        self.records = 0
        self.errors: dict[str, int] = {}
        self.latencies: list[float] = []

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def conn_client(index: int, port: int, partitions: int, records_per_request: int,
                      value_bytes: int, connect_gate: asyncio.Semaphore,
                      go: asyncio.Event, stop: asyncio.Event, stats: ConnStats) -> None:
    partition = index % partitions
    batch = builder.build_simple([os.urandom(value_bytes)] * records_per_request,
                                 timestamp=int(time.time() * 1000))
    frame = bytearray(encode_request(0, 3, 0, {
        "transactional_id": None, "acks": 1, "timeout": 30_000,
        "topic_data": [{"name": CONN_TOPIC,
                        "partition_data": [{"index": partition, "records": batch}]}]}))
    # Produce v3 response: correlation id, topic count, topic name, partition count,
    # partition index, then the error code.
    error_at = 4 + 4 + 2 + len(CONN_TOPIC) + 4 + 4
    writer: asyncio.StreamWriter | None = None
    try:
        async with connect_gate, asyncio.timeout(REQUEST_TIMEOUT_S):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(encode_request(18, 0, 1, {}))
            _, body = decode_response(18, 0, await _read_frame(reader))
            if body.error_code != 0:
                raise RuntimeError(f"ApiVersions error {body.error_code}")
            writer.write(encode_request(3, 1, 2, {"topics": [{"name": CONN_TOPIC}]}))
            _, md = decode_response(3, 1, await _read_frame(reader))
            if md.topics[0].error_code != 0:
                raise RuntimeError(f"Metadata error {md.topics[0].error_code}")
        stats.ready += 1
        await go.wait()
        correlation = 2
        checked = False
        while not stop.is_set():
            correlation += 1
            struct.pack_into(">i", frame, 8, correlation)  # size(4) key(2) version(2)
            t0 = time.perf_counter()
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                writer.write(frame)
                payload = await _read_frame(reader)
            if not checked:  # decode one answer fully; afterwards read the fields
                _, body = decode_response(0, 3, payload)
                if body.responses[0].name != CONN_TOPIC:
                    raise RuntimeError("Produce answer for another topic")
                checked = True
            got_corr = struct.unpack_from(">i", payload, 0)[0]
            code = struct.unpack_from(">h", payload, error_at)[0]
            if got_corr != correlation:
                raise RuntimeError(f"correlation {got_corr}, expected {correlation}")
            if code != 0:
                stats.error(f"produce error {code}")
                continue
            stats.requests += 1
            stats.records += records_per_request
            if not stats.requests % 16:
                stats.latencies.append(time.perf_counter() - t0)
    except TimeoutError:
        stats.error("timeout")
    except (OSError, asyncio.IncompleteReadError) as exc:
        stats.error(type(exc).__name__)
    except RuntimeError as exc:
        stats.error(str(exc)[:80])
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await writer.wait_closed()


async def conn_level(broker: Odradek, connections: int, args: argparse.Namespace
                     ) -> dict[str, Any]:
    stats = ConnStats()
    gate = asyncio.Semaphore(args.connect_concurrency)
    go, stop = asyncio.Event(), asyncio.Event()
    t0 = time.monotonic()
    tasks = [asyncio.create_task(conn_client(
        i, broker.port, args.conn_partitions, args.conn_records, args.value_bytes, gate,
        go, stop, stats)) for i in range(connections)]
    deadline = t0 + REQUEST_TIMEOUT_S + connections * 0.05
    while stats.ready + sum(stats.errors.values()) < connections:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    connect_s = time.monotonic() - t0
    connect_errors = sum(stats.errors.values())
    rss_connected = broker.rss_mib()
    fds = broker.open_fds()
    cpu0, self0 = broker.cpu_s(), self_cpu_s()
    t1 = time.perf_counter()
    go.set()
    await asyncio.sleep(args.conn_seconds)
    served = stats.requests
    t2 = time.perf_counter()
    cpu1, self1 = broker.cpu_s(), self_cpu_s()
    stop.set()
    _, pending = await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT_S + 10)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    seconds = t2 - t1
    lat = sorted(stats.latencies)
    return {
        "connections": connections,
        "ready": stats.ready,
        "connect_s": round(connect_s, 2),
        "connect_errors": connect_errors,
        "seconds": round(seconds, 2),
        "requests": served,
        "requests_s": round(served / seconds),
        "records_s": round(served * args.conn_records / seconds),
        "errors": sum(stats.errors.values()),
        "error_kinds": stats.errors,
        "p50_ms": round(lat[len(lat) // 2] * 1000, 2) if lat else None,
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2) if lat else None,
        "broker_cpu_us_per_request": round((cpu1 - cpu0) / served * 1e6, 1) if served else None,
        "broker_cpu_util": round((cpu1 - cpu0) / seconds, 2),
        "client_cpu_util": round((self1 - self0) / seconds, 2),
        "broker_rss_connected_mib": round(rss_connected, 1),
        "broker_rss_mib": round(broker.rss_mib(), 1),
        "broker_peak_rss_mib": round(broker.peak_rss_mib(), 1),
        "broker_open_fds": fds,
    }


def connections_part(levels: list[int], args: argparse.Namespace,
                     tmp_root: str) -> list[dict[str, Any]]:
    data_dir = tempfile.mkdtemp(prefix="conn-", dir=tmp_root)
    broker = Odradek(data_dir)
    rows = []
    try:
        broker.wait_ready()
        create_topics(broker.bootstrap, [(CONN_TOPIC, args.conn_partitions)])
        for c in levels:
            note(f"connections: {c:,} for {args.conn_seconds} s ...")
            row = asyncio.run(conn_level(broker, c, args))
            broker.check_alive()
            note(f"  {row['requests_s']:,} requests/s, {row['errors']} errors, "
                 f"{row['broker_cpu_us_per_request']} broker CPU us/request, "
                 f"RSS {row['broker_rss_mib']} MiB")
            rows.append(row)
    finally:
        rc, _ = broker.stop()
        if rc != 0:
            note(f"warning: odradek exited with {rc} on SIGTERM")
        shutil.rmtree(data_dir, ignore_errors=True)
    return rows


# --- part 4: 10 GB flowing through ----------------------------------------------------


class Sampler(threading.Thread):
    """Every ``interval`` s: (t, broker RSS MiB, broker CPU s, log bytes on disk, 1-minute
    load average of the machine)."""

    def __init__(self, broker: Odradek, log_dirs: list[str], interval: float = 1.0) -> None:
        super().__init__(name="scale-sampler", daemon=True)
        self.broker = broker
        self.log_dirs = log_dirs
        self.interval = interval
        self.samples: list[tuple[float, float, float, int, float]] = []
        self._halt = threading.Event()

    def sample(self) -> None:
        size = 0
        for d in self.log_dirs:
            with contextlib.suppress(OSError):
                size += sum(f.stat().st_size for f in os.scandir(d) if f.name.endswith(".log"))
        with contextlib.suppress(OSError, ValueError):
            self.samples.append((time.monotonic(), self.broker.rss_mib(),
                                 self.broker.cpu_s(), size, os.getloadavg()[0]))

    def run(self) -> None:
        self.sample()
        while not self._halt.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)
        self.sample()


def crossing_times(samples: list[tuple[float, float, float, int, float]], step: int,
                   t_start: float) -> list[tuple[float, float]]:
    """(time, broker CPU s) at which the log size crossed 1, 2, ... ``step`` bytes,
    linearly interpolated between samples; the first point is the start."""
    points = [(t_start, samples[0][2])]
    k = 1
    for (ta, _, ca, sa, _), (tb, _, cb, sb, _) in itertools.pairwise(samples):
        while sa < k * step <= sb:
            frac = (k * step - sa) / (sb - sa)
            points.append((ta + frac * (tb - ta), ca + frac * (cb - ca)))
            k += 1
    return points


def bare_write_rates(directory: str, gib: int) -> list[dict[str, float]]:
    """The baseline of the raw flow: ``gib`` GiB written with os.write in 1 MiB pieces to
    one file in the same directory (after the broker's log, so the page cache is as
    full), with the rate and CPU of each GiB: the kernel's part of any drop in rate as
    the dirty pages pile up and writeback starts. The file is deleted after."""
    chunk = os.urandom(MiB)
    path = os.path.join(directory, "bare-write.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    out = []
    try:
        t0, c0 = time.perf_counter(), self_cpu_s()
        for i in range(gib):
            for _ in range(GiB // MiB):
                os.write(fd, chunk)
            t1, c1 = time.perf_counter(), self_cpu_s()
            out.append({"gib": i + 1, "mib_s": round(1024 / (t1 - t0), 1),
                        "cpu_s": round(c1 - c0, 2)})
            t0, c0 = t1, c1
    finally:
        os.close(fd)
        os.unlink(path)
    return out


def flow_part(args: argparse.Namespace, tmp_root: str) -> dict[str, Any]:
    data_dir = tempfile.mkdtemp(prefix="flow-", dir=tmp_root)
    broker = Odradek(data_dir)
    try:
        broker.wait_ready()
        topic = "scale-flow"
        create_topics(broker.bootstrap, [(topic, args.flow_partitions)])
        log_dirs = [os.path.join(data_dir, f"{topic}-{p}") for p in range(args.flow_partitions)]
        errors: list[str] = []
        # A small client queue (64 MiB) keeps what was handed to produce() close to what
        # the broker has taken, so the client cannot run ahead by gigabytes.
        producer = make_producer(broker.bootstrap, errors,
                                 **{"queue.buffering.max.kbytes": 65_536})
        producer.list_topics(topic, timeout=STALL_TIMEOUT_S)
        n = int(args.flow_gib * GiB) // args.flow_value_bytes
        targets = [(topic, p) for p in range(args.flow_partitions)]
        sampler = Sampler(broker, log_dirs)
        rss_start = broker.rss_mib()
        sampler.start()
        cpu0, self0 = broker.cpu_s(), self_cpu_s()
        t0 = time.monotonic()
        next_note = [t0 + 10]

        def progress(sent: int) -> None:
            now = time.monotonic()
            if now > next_note[0]:
                next_note[0] = now + 10
                note(f"  {sent * args.flow_value_bytes / GiB:.1f} GiB handed to the "
                     f"producer, broker RSS {broker.rss_mib():.0f} MiB")

        try:
            if args.flow_raw:  # the broker's rate, not the client's (see produce_raw)
                produce_raw(broker.port, targets, n, os.urandom(args.flow_value_bytes),
                            args.raw_batch or 100, args.raw_request_partitions,
                            in_flight=args.raw_in_flight)
            else:
                produce_spread(producer, targets, n, os.urandom(args.flow_value_bytes),
                               progress)
        finally:
            sampler.stop()
        t1 = time.monotonic()
        cpu1, self1 = broker.cpu_s(), self_cpu_s()
        del producer
        if errors:
            raise RuntimeError(f"client errors: {errors[:5]}")
        samples = sampler.samples
        final_bytes = samples[-1][3]
        points = crossing_times(samples, GiB, t0)
        per_gib = []
        for i, ((ta, ca), (tb, cb)) in enumerate(itertools.pairwise(points)):
            dt = tb - ta
            inside = [sm for sm in samples if ta <= sm[0] <= tb]
            per_gib.append({
                "gib": i + 1,
                "seconds": round(dt, 2),
                "mib_s": round(1024 / dt, 1),
                "records_s": round(GiB / dt / (final_bytes / n)),
                "broker_cpu_s": round(cb - ca, 2),
                "rss_mib_max": round(max((sm[1] for sm in inside), default=float("nan")), 1),
                "loadavg": round(statistics.mean(sm[4] for sm in inside), 1) if inside else None,
            })
        rss = [s[1] for s in samples]
        seconds = t1 - t0
        out = {
            "gib_requested": args.flow_gib,
            "partitions": args.flow_partitions,
            "value_bytes": args.flow_value_bytes,
            "records": n,
            "log_bytes": final_bytes,
            "seconds": round(seconds, 1),
            "mib_s": round(final_bytes / MiB / seconds, 1),
            "records_s": round(n / seconds),
            "broker_cpu_s_per_m": round((cpu1 - cpu0) / (n / 1e6), 3),
            "broker_cpu_util": round((cpu1 - cpu0) / seconds, 2),
            "client_cpu_util": round((self1 - self0) / seconds, 2),
            "rss_start_mib": round(rss_start, 1),
            "rss_min_mib": round(min(rss), 1),
            "rss_max_mib": round(max(rss), 1),
            "rss_end_mib": round(rss[-1], 1),
            "peak_rss_mib": round(broker.peak_rss_mib(), 1),
            "per_gib": per_gib,
            "samples_fields": ["s", "rss_mib", "broker_cpu_s", "log_bytes", "loadavg"],
            "samples": [[round(t - t0, 2), round(r, 1), round(c - cpu0, 2), b, round(la, 2)]
                        for t, r, c, b, la in samples],
        }
        if args.flow_raw:
            out["bare_write_per_gib"] = bare_write_rates(data_dir, len(per_gib))
        if len(per_gib) >= 2:
            out["last_first_ratio"] = round(per_gib[-1]["mib_s"] / per_gib[0]["mib_s"], 3)
        if len(per_gib) >= 3:  # the rate once the log holds 1 GiB vs at the end
            out["last_second_ratio"] = round(per_gib[-1]["mib_s"] / per_gib[1]["mib_s"], 3)
        return out
    finally:
        rc, _ = broker.stop()
        if rc != 0:
            note(f"warning: odradek exited with {rc} on SIGTERM")
        shutil.rmtree(data_dir, ignore_errors=True)


# --- report ---------------------------------------------------------------------------


def _fmt(x: Any, spec: str = ",.0f") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, spec)


def summarize_partitions(rounds: list[list[dict[str, Any]]]) -> dict[str, Any]:
    by_n: dict[int, list[dict[str, Any]]] = {}
    for rnd in rounds:
        for row in rnd:
            if "error" not in row:
                by_n.setdefault(row["partitions"], []).append(row)
    summary: dict[str, Any] = {"rows": []}
    for n in sorted(by_n):
        rows = by_n[n]
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("records_s", "broker_cpu_s_per_m", "client_cpu_s_per_m",
                         "broker_cpu_util", "create_s")}
        if all("raw_records_s" in r for r in rows):
            med.update({k: statistics.median(r[k] for r in rows)
                        for k in ("raw_records_s", "raw_broker_cpu_s_per_m",
                                  "raw_client_cpu_s_per_m", "raw_broker_cpu_util")})
        summary["rows"].append({
            "partitions": n, "topics": rows[0]["topics"], **med,
            "records_s_all": [r["records_s"] for r in rows],
            "broker_rss_mib": max(r["broker_rss_mib"] for r in rows),
            "broker_peak_rss_mib": max(r["broker_peak_rss_mib"] for r in rows),
            "broker_open_fds": max(r["broker_open_fds"] for r in rows),
        })
    lo, hi = min(by_n, default=None), max(by_n, default=None)
    if lo is not None and hi is not None and lo != hi:
        summary["ratio_partitions"] = [lo, hi]
        for prefix in ("", "raw_"):
            # Per round, the rate with the most partitions over the rate with the fewest.
            key = f"{prefix}records_s"
            ratios = [next(r[key] for r in rnd if r["partitions"] == hi)
                      / next(r[key] for r in rnd if r["partitions"] == lo)
                      for rnd in rounds
                      if {lo, hi} <= {r["partitions"] for r in rnd if key in r}]
            if ratios:
                summary[f"{prefix}ratio_rate"] = round(statistics.median(ratios), 3)
                summary[f"{prefix}ratio_rate_all"] = [round(x, 3) for x in ratios]
    return summary


def _failed_rows(rounds: list[list[dict[str, Any]]]) -> list[str]:
    return [f"- round {i + 1}, {r['partitions']:,} partitions: **failed**: {r['error']}"
            for i, rnd in enumerate(rounds) for r in rnd if "error" in r]


def _ratio_line(summary: dict[str, Any], prefix: str, what: str) -> list[str]:
    if f"{prefix}ratio_rate" not in summary:
        return []
    lo, hi = summary["ratio_partitions"]
    per = ", ".join(f"{x:.2f}" for x in summary[f"{prefix}ratio_rate_all"])
    return [f"- rate with {hi:,} / with {lo:,} partition(s){what}: "
            f"**{summary[f'{prefix}ratio_rate']:.2f}** (per round: {per})"]


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    client = f"confluent-kafka {m['confluent_kafka']} (librdkafka {m['librdkafka']})"
    lines = [f"machine: {machine_line(m, client)}", ""]
    part = results.get("partitions")
    if part:
        s = part["summary"]
        lines += [
            f"**Partitions** — {p['records']:,} records of {p['value_bytes']} bytes per "
            f"row, acks=1, linger.ms={p.get('linger_ms', 5):g}, one confluent-kafka "
            f"producer, "
            + ("record i to topic i mod T, no partition named (the sticky partitioner)"
               if p.get("keyless") else "record i to partition i mod N")
            + f"; {p['rounds']} round(s), medians",
            "",
            "| partitions | topics | create s | records/s | broker CPU s per M "
            "| broker busy (CPUs) | client CPU s per M | broker RSS MB | peak RSS MB "
            "| open fds |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in s["rows"]:
            lines.append(
                f"| {r['partitions']:,} | {r['topics']} | {r['create_s']:.1f} "
                f"| {r['records_s']:,.0f} | {r['broker_cpu_s_per_m']:.2f} "
                f"| {r['broker_cpu_util']:.2f} | {r['client_cpu_s_per_m']:.2f} "
                f"| {r['broker_rss_mib']:,.0f} | {r['broker_peak_rss_mib']:,.0f} "
                f"| {r['broker_open_fds']:,} |")
        lines += _failed_rows(part["rounds"])
        lines += _ratio_line(s, "", "")
        if any("raw_records_s" in r for r in s["rows"]):
            lines += [
                "",
                f"Pre-built batches (`produce_raw`): Produce v3 requests of "
                f"{p['raw_request_partitions']} partitions' batches of {p['raw_batch']} "
                + ("records at every partition count"
                   if p.get("raw_same_batches") else
                   f"records ({p['raw_batch'] * p['raw_request_partitions']:,} records per "
                   "request: one batch of them all with 1 partition)")
                + f", {p.get('raw_in_flight', RAW_IN_FLIGHT)} requests in flight, "
                f"{p.get('raw_records', p['records']):,} records per row",
                "",
                "| partitions | records/s | broker CPU s per M | broker busy (CPUs) "
                "| client CPU s per M |",
                "|---:|---:|---:|---:|---:|",
            ]
            for r in s["rows"]:
                if "raw_records_s" in r:
                    lines.append(
                        f"| {r['partitions']:,} | {r['raw_records_s']:,.0f} "
                        f"| {r['raw_broker_cpu_s_per_m']:.2f} "
                        f"| {r['raw_broker_cpu_util']:.2f} "
                        f"| {r['raw_client_cpu_s_per_m']:.2f} |")
            lines += _ratio_line(s, "raw_", ", pre-built batches")
        mine = {r["partitions"]: r for r in s["rows"]}
        for kind, name in BASELINE_NAMES.items():
            base = results.get(f"partitions_{kind}")
            if not base:
                continue
            bs = base["summary"]
            lines += [
                "",
                f"The same librdkafka load against {name}, each row beside Odradek's "
                "(alternating); Odradek/this as ratios of the medians:",
                "",
                "| partitions | records/s | broker CPU s per M | broker busy (CPUs) "
                "| client CPU s per M | peak RSS MB | Odradek/this rate "
                "| Odradek/this CPU per M | Odradek/this peak RSS |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in bs["rows"]:
                o = mine.get(r["partitions"])
                ratios = "| | " if o is None else " | ".join(
                    f"**{o[k] / r[k]:.2f}**" if r[k] else "n/a"
                    for k in ("records_s", "broker_cpu_s_per_m", "broker_peak_rss_mib"))
                lines.append(
                    f"| {r['partitions']:,} | {r['records_s']:,.0f} "
                    f"| {r['broker_cpu_s_per_m']:.2f} | {r['broker_cpu_util']:.2f} "
                    f"| {r['client_cpu_s_per_m']:.2f} | {r['broker_peak_rss_mib']:,.0f} "
                    f"| {ratios} |")
            lines += _failed_rows(base["rounds"])
            lines += _ratio_line(bs, "", f", {name}")
        lines.append("")
    st = results.get("startup")
    if st:
        lines += [f"**Startup** — {st.get('partitions', 0):,} partitions, "
                  f"{st.get('log_bytes', 0) / MiB:,.0f} MiB of log", ""]
        if "error" in st:
            lines.append(f"- **failed**: {st['error']}")
        lines += ["| start | banner s | Metadata with all partitions s | RSS MB "
                  "| startup CPU s | open fds |", "|---|---:|---:|---:|---:|---:|"]
        for kind, label in (("clean", "after SIGTERM (clean)"),
                            ("unclean", "after SIGKILL (recovery)"),
                            ("clean_again", "after SIGTERM, following the recovery")):
            r = st.get(kind)
            if r:
                lines.append(f"| {label} | {r['banner_s']:.2f} | {r['metadata_s']:.2f} "
                             f"| {r['rss_mib']:,.0f} | {r['startup_cpu_s']:.1f} "
                             f"| {r['open_fds']:,} |")
        if "clean_stop_s" in st:
            lines.append(f"- clean stop (SIGTERM to exit): {st['clean_stop_s']:.2f} s; "
                         f"{st.get('unclean_extra_records', 0):,} records produced across all "
                         "partitions before the SIGKILL")
        if "idle_stop_s" in st:
            lines.append(f"- stop after the recovery: {st['stop_after_recovery_s']:.2f} s; "
                         f"stop with nothing produced since the start: "
                         f"{st['idle_stop_s']:.2f} s; idle broker (no client, "
                         f"{st['idle_seconds']:.0f} s): {st['idle_cpus']:.4f} CPUs")
        lines.append("")
    conn = results.get("connections")
    if conn:
        lines += [
            f"**Connections** — raw asyncio clients: ApiVersions v0, Metadata v1, then "
            f"Produce v3 (1 batch of {p['conn_records']} x {p['value_bytes']} B, acks=1) "
            f"one at a time per connection for {p['conn_seconds']} s; "
            f"{p['conn_partitions']} partitions",
            "",
            "| connections | connect s | requests/s | records/s | errors | p50 ms | p99 ms "
            "| broker CPU us per request | broker busy | client busy | broker RSS MB "
            "| open fds |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in conn:
            if "error" in r:
                lines.append(f"| {r.get('connections', '?')} | **failed**: {r['error']} |")
                continue
            lines.append(
                f"| {r['connections']:,} | {r['connect_s']:.2f} | {r['requests_s']:,} "
                f"| {r['records_s']:,} | {r['errors']} | {_fmt(r['p50_ms'], '.2f')} "
                f"| {_fmt(r['p99_ms'], '.2f')} | {_fmt(r['broker_cpu_us_per_request'], '.0f')} "
                f"| {r['broker_cpu_util']:.2f} | {r['client_cpu_util']:.2f} "
                f"| {r['broker_rss_mib']:,.0f} | {r['broker_open_fds']:,} |")
        kinds = {k: v for r in conn for k, v in r.get("error_kinds", {}).items()}
        if kinds:
            lines.append(f"- error kinds: {kinds}")
        lines.append("")
    flow = results.get("flow")
    if flow:
        if "error" in flow:
            lines.append(f"**Flow** — **failed**: {flow['error']}")
        else:
            lines += [
                f"**Flow** — {flow['log_bytes'] / GiB:.2f} GiB of log "
                f"({flow['records']:,} records of {flow['value_bytes']} B) to "
                f"{flow['partitions']} partition(s), "
                + ("pre-built batches in raw Produce requests (`--flow-raw`)"
                   if p.get("flow_raw") else "one confluent-kafka producer")
                + "; broker VmRSS sampled every second",
                "",
                "| GiB of log | seconds | MiB/s | records/s | broker CPU s | max RSS MB "
                "| load avg | bare os.write MiB/s | its CPU s |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            bare = {b["gib"]: b for b in flow.get("bare_write_per_gib", [])}
            for g in flow["per_gib"]:
                b = bare.get(g["gib"], {})
                lines.append(f"| {g['gib']} | {g['seconds']:.1f} | {g['mib_s']:,.0f} "
                             f"| {g['records_s']:,} | {g['broker_cpu_s']:.1f} "
                             f"| {_fmt(g['rss_mib_max'])} | {_fmt(g['loadavg'], '.1f')} "
                             f"| {_fmt(b.get('mib_s'))} | {_fmt(b.get('cpu_s'), '.2f')} |")
            ratio = flow.get("last_first_ratio")
            lines.append(
                f"- overall {flow['mib_s']:,.0f} MiB/s ({flow['records_s']:,} records/s), "
                f"broker {flow['broker_cpu_s_per_m']:.2f} CPU s per M records, broker busy "
                f"{flow['broker_cpu_util']:.2f} CPUs, client {flow['client_cpu_util']:.2f}; "
                f"broker RSS min {flow['rss_min_mib']:,.0f} / max {flow['rss_max_mib']:,.0f} "
                f"MB (start {flow['rss_start_mib']:,.0f}, end {flow['rss_end_mib']:,.0f}); "
                f"rate of the last GiB / the first {_fmt(ratio, '.2f')}, / the second "
                f"(the log at 1 GiB) {_fmt(flow.get('last_second_ratio'), '.2f')}")
        lines.append("")
    return "\n".join(lines).rstrip()


# --- main -----------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


PARTS = ("partitions", "startup", "connections", "flow")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true",
                    help="a few minutes: partitions 1,1000 with 200,000 records, 1 round, "
                         "connections 1,10,100 for 3 s, 1 GiB flow")
    ap.add_argument("--only", default=",".join(PARTS),
                    help=f"comma-separated parts to run (default all: {','.join(PARTS)}); "
                         "startup needs partitions")
    ap.add_argument("--partitions", default="1,100,1000,10000",
                    help="partition counts of part 1 (default 1,100,1000,10000)")
    ap.add_argument("--topics", type=int, default=100, help="topics sharing them (100)")
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records produced per partition row (default 1,000,000)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of part 1, ascending then descending (default 3)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record size (100)")
    ap.add_argument("--linger-ms", type=float, default=5.0,
                    help="the part 1 producer's linger.ms (5)")
    ap.add_argument("--keyless", action="store_true",
                    help="part 1: record i to topic i mod T with no partition named "
                         "(librdkafka's sticky partitioner) instead of partition i mod N")
    ap.add_argument("--kafka", action="store_true",
                    help="part 1: each row's librdkafka load also against Apache Kafka 4.4.0 "
                         "(one KRaft node; needs the jars of scripts/fetch_jvm.sh)")
    ap.add_argument("--tansu", action="store_true",
                    help="part 1: each row's librdkafka load also against Tansu 0.6 (memory "
                         "storage, the Rust broker of broker_bench.py), alternating: does a "
                         "native broker keep more of its rate at 10,000 partitions?")
    ap.add_argument("--connections", default="1,10,100,1000",
                    help="concurrent connections of part 3 (default 1,10,100,1000)")
    ap.add_argument("--conn-seconds", type=float, default=10.0,
                    help="measured seconds per connection count (10)")
    ap.add_argument("--raw-batch", type=int, default=100,
                    help="part 1 also produces the same records as pre-built batches of "
                         "this many records (0: not); one partition gets one batch of "
                         "--raw-batch x --raw-request-partitions records per request")
    ap.add_argument("--raw-request-partitions", type=int, default=10,
                    help="partitions' batches per Produce request of that load (10)")
    ap.add_argument("--raw-records", type=int, default=5_000_000,
                    help="records of that load per row (5,000,000: it runs at 1-3 M/s, "
                         "and a run of under a second is mostly noise)")
    ap.add_argument("--raw-in-flight", type=int, default=RAW_IN_FLIGHT,
                    help=f"requests outstanding in that load ({RAW_IN_FLIGHT})")
    ap.add_argument("--raw-same-batches", action="store_true",
                    help="that load's batches hold --raw-batch records at every partition "
                         "count (requests to fewer partitions are smaller)")
    ap.add_argument("--conn-records", type=int, default=10,
                    help="records per Produce request in part 3 (10)")
    ap.add_argument("--conn-partitions", type=int, default=10,
                    help="partitions of part 3's topic; connection i writes to i mod P (10)")
    ap.add_argument("--connect-concurrency", type=int, default=100,
                    help="connection handshakes in progress at once (100)")
    ap.add_argument("--idle-seconds", type=float, default=10.0,
                    help="seconds the restarted broker sits idle while its CPU is measured")
    ap.add_argument("--flow-gib", type=float, default=10.0,
                    help="GiB of 1 KiB records in part 4 (default 10)")
    ap.add_argument("--flow-partitions", type=int, default=1, help="partitions of part 4 (1)")
    ap.add_argument("--flow-raw", action="store_true",
                    help="part 4 produces pre-built batches in raw requests (produce_raw) "
                         "instead of through confluent-kafka: the broker is the limit")
    ap.add_argument("--flow-value-bytes", type=int, default=1024, help="record size (1024)")
    ap.add_argument("--dir", default="/tmp", help="where data dirs go (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "scale.json"),
                    help="JSON results file (default bench/results/scale.json)")
    args = ap.parse_args(argv)
    if args.quick:
        defaults = {"partitions": "1,1000", "records": 200_000, "raw_records": 1_000_000,
                    "rounds": 1,
                    "connections": "1,10,100", "conn_seconds": 3.0, "flow_gib": 1.0}
        for name, value in defaults.items():
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(args.only) - set(PARTS)
    if unknown:
        ap.error(f"unknown part(s) {sorted(unknown)}; choose from {PARTS}")
    if args.kafka:
        from broker_bench import kafka_jars_present

        if not (kafka_jars_present() and shutil.which("java")):
            ap.error("--kafka needs java and Kafka's jars: bash scripts/fetch_jvm.sh")
    if args.rounds < 1 or args.records < 1 or args.flow_gib <= 0:
        ap.error("--rounds, --records and --flow-gib must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    partition_counts = _ints(args.partitions)
    tmp_root = tempfile.mkdtemp(prefix="odradek-scale-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "scale",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": bench_machine_info(),
        "params": {
            "parts": args.only,
            "partitions": partition_counts,
            "topics": args.topics,
            "records": args.records,
            "rounds": args.rounds,
            "value_bytes": args.value_bytes,
            "producer": {"acks": 1, "linger.ms": args.linger_ms, "batch.num.messages": 100_000,
                         "compression.type": "none"},
            "linger_ms": args.linger_ms,
            "keyless": args.keyless,
            "tansu": args.tansu,
            "kafka": args.kafka,
            "connections": _ints(args.connections),
            "conn_seconds": args.conn_seconds,
            "raw_batch": args.raw_batch,
            "raw_records": args.raw_records,
            "raw_request_partitions": args.raw_request_partitions,
            "raw_same_batches": args.raw_same_batches,
            "raw_in_flight": args.raw_in_flight,
            "conn_records": args.conn_records,
            "conn_partitions": args.conn_partitions,
            "connect_concurrency": args.connect_concurrency,
            "flow_gib": args.flow_gib,
            "flow_partitions": args.flow_partitions,
            "flow_raw": args.flow_raw,
            "flow_value_bytes": args.flow_value_bytes,
            "odradek": "odradek serve, default config, fresh data dir per part or row",
        },
    }
    started = time.monotonic()
    try:
        if "partitions" in args.only:
            rounds: list[list[dict[str, Any]]] = []
            baselines = [k for k in BASELINE_NAMES if getattr(args, k)]
            base_rounds: dict[str, list[list[dict[str, Any]]]] = {k: [] for k in baselines}
            biggest = max(partition_counts)
            for i in range(args.rounds):
                order = sorted(partition_counts, reverse=bool(i % 2))
                rnd = []
                base_rnd: dict[str, list[dict[str, Any]]] = {k: [] for k in baselines}
                for n in order:
                    if i % 2:  # the baselines' rows first in odd rounds (ABBA)
                        for kind in baselines[::-1]:
                            base_rnd[kind].append(baseline_row(kind, n, args, tmp_root, i))
                    want_startup = ("startup" in args.only and n == biggest
                                    and "startup" not in results)
                    note(f"partitions, round {i + 1}/{args.rounds}: {n:,} partitions, "
                         f"{args.records:,} records ...")
                    try:
                        row, kept = partitions_row(n, args, tmp_root, want_startup)
                    except Exception as exc:  # report and go on with the next row
                        note(f"  FAILED: {exc}")
                        rnd.append({"partitions": n, "error": str(exc)[:500]})
                        if want_startup:
                            results["startup"] = {"partitions": n,
                                                  "error": "the partitions row failed"}
                        continue
                    note(f"  {row['records_s']:,} records/s, {row['broker_cpu_s_per_m']} "
                         f"broker CPU s/M, RSS {row['broker_rss_mib']} MiB, topics created "
                         f"in {row['create_s']} s")
                    rnd.append(row)
                    if kept is not None:
                        note(f"startup with {n:,} partitions ...")
                        try:
                            results["startup"] = startup_part(kept, n, args)
                        except Exception as exc:
                            note(f"  FAILED: {exc}")
                            results["startup"] = {"partitions": n, "error": str(exc)[:500]}
                    if not i % 2:
                        for kind in baselines:
                            base_rnd[kind].append(baseline_row(kind, n, args, tmp_root, i))
                rounds.append(rnd)
                for kind in baselines:
                    base_rounds[kind].append(base_rnd[kind])
            results["partitions"] = {"rounds": rounds, "summary": summarize_partitions(rounds)}
            for kind in baselines:
                results[f"partitions_{kind}"] = {
                    "rounds": base_rounds[kind],
                    "summary": summarize_partitions(base_rounds[kind])}
        if "connections" in args.only:
            try:
                results["connections"] = connections_part(_ints(args.connections), args,
                                                          tmp_root)
            except Exception as exc:
                note(f"  FAILED: {exc}")
                results["connections"] = [{"error": str(exc)[:500]}]
        if "flow" in args.only:
            note(f"flow: {args.flow_gib} GiB of {args.flow_value_bytes}-byte records ...")
            try:
                results["flow"] = flow_part(args, tmp_root)
                f = results["flow"]
                note(f"  {f['mib_s']} MiB/s, RSS {f['rss_min_mib']}-{f['rss_max_mib']} MiB, "
                     f"last/first GiB {f.get('last_first_ratio')}")
            except Exception as exc:
                note(f"  FAILED: {exc}")
                results["flow"] = {"error": str(exc)[:500]}
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    results["seconds"] = round(time.monotonic() - started, 1)
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
