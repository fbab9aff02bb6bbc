"""A/B: broker CPU per million records of two versions of Odradek, side by side.

For a change to the hot path, the question is "how much broker CPU per record did it
save?", measured on a shared, noisy machine. This runs ``odradek serve`` from two source
trees — a git revision (checked out into a temporary worktree) and the working tree —
alternately, round after round, under the same load, and prints broker CPU seconds per
million records (utime + stime from /proc) for each and their ratio per round.

Loads (each against a fresh broker and data directory):
- ``produce``: N confluent-kafka producer processes, 100-byte records, acks=1,
  linger.ms=5 (the broker_bench.py settings), to a 1-partition topic;
- ``kcat-produce`` / ``kcat-consume``: kcat (librdkafka without Python) sends the
  records from a file / reads them back from offset 0;
- ``consume``: a confluent-kafka ``Consumer`` process (broker_bench.py's settings: a
  group id it never joins, no commits) reads the records kcat wrote back from offset 0,
  after one untimed consumer has read a record (so the broker's one-off first request
  of each API version a consumer sends is not in the timed part);
- ``raw-produce``: pre-built batches of ``--raw-batch`` records in raw Produce v3
  requests to ``--raw-partitions`` partitions, 10 partitions' batches per request, 5 in
  flight (scale_bench.produce_raw): a client that costs almost nothing, so the broker's
  cost per batch shows (with librdkafka the client is the limit);
- ``spaced-fetch``: what a Python consumer reading a backlog costs the broker, without
  that consumer's noise: batches of 7,800 records (~860 KB, librdkafka's size for these
  records) are written untimed; then one raw Fetch v12 (read_committed, 1 MiB per
  partition, as librdkafka asks) per batch, ``--gap-ms`` apart (a Python consumer comes
  back every ~45 ms), while a process sweeps 48 MB of memory so that the broker meets
  each fetch with cold caches, as it does beside a busy client.

    .venv/bin/python bench/ab_bench.py --before HEAD~3 [--load produce] [--records 1000000]
        [--producers 2] [--rounds 3] [--raw-batch 100] [--raw-partitions 100] [--gap-ms 40]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from _common import machine_info, machine_line, note, proc_cpu_s
from odradek.devcluster import BrokerProcess as DevBroker
from odradek.devcluster import ClusterError, free_port, stop_process
from scale_bench import encode_request, produce_raw, recv_exactly

REPO = Path(__file__).resolve().parent.parent
TOPIC = "ab"
CONSUMER = r"""
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, n = sys.argv[1], int(sys.argv[2])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ab", "enable.auto.commit": False,
              "enable.auto.offset.store": False, "auto.offset.reset": "earliest"})
c.assign([TopicPartition("ab", 0, 0)])
got = 0
while got < n:
    for m in c.consume(num_messages=min(10000, n - got), timeout=1.0):
        if m.error() is not None:
            sys.exit(str(m.error()))
        got += 1
c.close()
if got != n:
    sys.exit(f"read {got} of {n} records")
"""
PRODUCER = r"""
import sys
from confluent_kafka import Producer
bootstrap, n = sys.argv[1], int(sys.argv[2])
p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
              "batch.num.messages": 100000, "enable.idempotence": False,
              "queue.buffering.max.messages": 2000000, "queue.buffering.max.kbytes": 2000000})
value = b"x" * 100
for _ in range(n):
    try:
        p.produce("ab", value, partition=0)
    except BufferError:
        p.poll(0.05)
        p.produce("ab", value, partition=0)
if p.flush(120):
    sys.exit("records left unsent")
"""


def serve(src: Path, data_dir: str, partitions: int = 1,
          extra_args: Sequence[str] = (), prefix: Sequence[str] = (),
          start_timeout_s: float = 30) -> tuple[subprocess.Popen[bytes], str]:
    """``odradek serve`` from source tree ``src`` (``extra_args``: more of its options;
    ``prefix``: a command it runs under, metrics_bench.py's valgrind), with the load's
    topic of ``partitions`` made; the process and its address."""
    broker = DevBroker(None, Path(data_dir), Path(data_dir + ".out"), port=free_port(),
                       args=extra_args, argv_prefix=prefix, env={"PYTHONPATH": str(src)})
    broker.start()
    try:
        broker.wait_ready(time.monotonic() + start_timeout_s)
    except ClusterError as exc:
        raise RuntimeError(f"broker from {src} did not start: {exc}") from None
    assert broker.process is not None
    proc, bootstrap = broker.process, broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    return proc, bootstrap


def run_load(load: str, bootstrap: str, records: int, producers: int, lines: str,
             pid: int, raw_batch: int = 100, raw_partitions: int = 100,
             gap_ms: float = 40.0) -> float:
    """Broker CPU seconds spent on the timed part of ``load``."""
    kcat = ["kcat", "-b", bootstrap, "-t", TOPIC, "-p", "0"]
    if load in ("kcat-consume", "consume"):  # needs the records first, untimed
        subprocess.run([*kcat, "-P", "-X", "linger.ms=5", "-l", lines], check=True)
        subprocess.run([*kcat, "-C", "-o", "beginning", "-c", "1", "-q", "-f", "x"],
                       check=True, capture_output=True)
    if load == "consume":
        subprocess.run([sys.executable, "-c", CONSUMER, bootstrap, "1"], check=True)
    if load == "spaced-fetch":
        return spaced_fetch(bootstrap, records, pid, gap_ms)
    cpu0 = proc_cpu_s(pid)
    if load == "produce":
        procs = [subprocess.Popen([sys.executable, "-c", PRODUCER, bootstrap,
                                   str(records // producers)]) for _ in range(producers)]
        if any(p.wait() for p in procs):
            raise RuntimeError("a producer failed")
    elif load == "consume":
        subprocess.run([sys.executable, "-c", CONSUMER, bootstrap, str(records)], check=True)
    elif load == "raw-produce":
        port = int(bootstrap.rsplit(":", 1)[1])
        produce_raw(port, [(TOPIC, p) for p in range(raw_partitions)], records, b"x" * 100,
                    raw_batch, 10, same_batches=True)
    elif load == "kcat-produce":
        subprocess.run([*kcat, "-P", "-X", "linger.ms=5", "-X", "batch.num.messages=100000",
                        "-l", lines], check=True)
    else:
        out = subprocess.run([*kcat, "-C", "-o", "beginning", "-c", str(records), "-e", "-q",
                              "-f", "x"], check=True, capture_output=True).stdout
        if len(out) != records:
            raise RuntimeError(f"kcat read {len(out)} of {records} records")
    return proc_cpu_s(pid) - cpu0


SPACED_BATCH = 7_800  # records per batch: librdkafka's batches of 100-byte records here
HOG = r"""
import sys, time
a = bytearray(48 << 20)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    a[::4096] = b"x" * len(a[::4096])
    bytes(a[:24 << 20])
"""


def spaced_fetch(bootstrap: str, records: int, pid: int, gap_ms: float) -> float:
    """The spaced-fetch load: broker CPU seconds of its timed fetches."""
    port = int(bootstrap.rsplit(":", 1)[1])
    batches = max(1, records // SPACED_BATCH)
    produce_raw(port, [(TOPIC, 0)], batches * SPACED_BATCH, b"x" * 100, SPACED_BATCH, 1)
    frames = [fetch_frame(i, i * SPACED_BATCH) for i in range(batches)]
    hog = subprocess.Popen([sys.executable, "-c", HOG,
                            str(batches * (gap_ms / 1000 + 0.01) + 30)])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            time.sleep(0.5)  # the hog's start is not the broker's cost
            cpu0 = proc_cpu_s(pid)
            for frame in frames:
                fetch_one(sock, frame)
                time.sleep(gap_ms / 1000)
            return proc_cpu_s(pid) - cpu0
    finally:
        hog.kill()
        hog.wait()


def fetch_frame(correlation_id: int, offset: int) -> bytes:
    """A raw Fetch v12 of partition 0 from ``offset``, as librdkafka asks (read_committed,
    1 MiB per partition)."""
    return encode_request(1, 12, correlation_id, {
        "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 50 << 20,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": TOPIC, "partitions": [{
            "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
            "log_start_offset": -1, "current_leader_epoch": -1}]}]})


def fetch_one(sock: socket.socket, frame: bytes) -> None:
    """Send one ``fetch_frame`` and read its answer, which must hold a whole batch."""
    sock.sendall(frame)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    if len(recv_exactly(sock, size)) < SPACED_BATCH * 100:
        raise RuntimeError("a fetch returned less than a batch")


def add_load_options(ap: argparse.ArgumentParser) -> None:
    """The options of the raw-produce and spaced-fetch loads (metrics_bench.py has them too)."""
    ap.add_argument("--raw-batch", type=int, default=100,
                    help="records per batch of the raw-produce load (100)")
    ap.add_argument("--raw-partitions", type=int, default=100,
                    help="partitions of the raw-produce load's topic (100)")
    ap.add_argument("--gap-ms", type=float, default=40.0,
                    help="pause between the spaced-fetch load's fetches (40)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--before", required=True, help="git revision to compare against")
    ap.add_argument("--load", default="produce",
                    choices=["produce", "kcat-produce", "kcat-consume", "consume", "raw-produce",
                             "spaced-fetch"])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    add_load_options(ap)
    args = ap.parse_args(argv)
    partitions = args.raw_partitions if args.load == "raw-produce" else 1
    tmp = tempfile.mkdtemp(prefix="odradek-ab-")
    worktree = os.path.join(tmp, "before")
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", worktree,
                    args.before], check=True, capture_output=True)
    lines = os.path.join(tmp, "records.txt")
    Path(lines).write_bytes((b"x" * 100 + b"\n") * args.records)
    sides = {"before": Path(worktree) / "src", "after": REPO / "src"}
    per_m: dict[str, list[float]] = {"before": [], "after": []}
    try:
        for i in range(args.rounds):
            for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
                data_dir = tempfile.mkdtemp(dir=tmp)
                proc, bootstrap = serve(sides[side], data_dir, partitions)
                try:
                    cpu = run_load(args.load, bootstrap, args.records, args.producers, lines,
                                   proc.pid, args.raw_batch, args.raw_partitions, args.gap_ms)
                finally:
                    stop_process(proc, 60)
                per_m[side].append(cpu / (args.records / 1e6))
                note(f"round {i + 1} {side}: {per_m[side][-1]:.3f} broker CPU s per M")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", worktree],
                       check=False, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    ratios = [a / b for a, b in zip(per_m["after"], per_m["before"], strict=True) if b]
    print(machine_line(machine_info()))
    shape = (f" (batches of {args.raw_batch} to {args.raw_partitions} partitions)"
             if args.load == "raw-produce" else "")
    print(f"load {args.load}{shape}, {args.records:,} records, {args.rounds} rounds alternating; "
          f"before = {args.before}, after = working tree")
    print(f"broker CPU s per M records: before {statistics.median(per_m['before']):.3f} "
          f"(rounds {', '.join(f'{x:.3f}' for x in per_m['before'])}), after "
          f"{statistics.median(per_m['after']):.3f} "
          f"(rounds {', '.join(f'{x:.3f}' for x in per_m['after'])}); after/before "
          f"median {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
