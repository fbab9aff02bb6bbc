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

``--count`` counts instead of timing: both brokers run at once under valgrind's callgrind
(``valgrind --tool=callgrind --instr-atstart=no``, PYTHONHASHSEED=0), instrumented only
for the load's requests (``callgrind_control -i on`` / ``off``, then ``-d``), one side
after the other (the order alternating by round), and the figure is instructions per
request (callgrind's Ir, every thread of the broker) and their after/before ratio.
Only ``raw-produce`` (the default with ``--count``) and ``spaced-fetch`` (its fetches
without the pauses and the cache sweeper: instructions do not depend on them) can be
counted: the other loads' clients batch at the broker's pace, so their requests differ
from run to run. The storage duties that run on the wall clock (the log cleaner's pass
every 15 s, ~1 M instructions even with nothing to compact; checkpoints, retention and
flush checks) are put off past the run on both sides: where a cleaner pass fell in one
side's requests, it added ~1% to spaced-fetch. Thus quieted, the same code on both sides
(``--before HEAD``) counts 1.000-1.001 (raw-produce) and 0.997 (spaced-fetch), each
side repeating to ~0.05% and ~0.3%, so one round (the default) settles a difference of
1%; seconds add what the caches make of the code, which the timed loads show. It is the
same function, ``count_instructions``, as metrics_bench.py's ``count-`` loads. A broker
starts in seconds to minutes under callgrind (imports run ~50x slower); ``--records
100000`` is 100 produce requests, ``3900000`` 500 fetches (a run ~25 s here).
``--keep-dumps DIR`` keeps callgrind's files (``callgrind.before.N``,
``callgrind.after.N``) for ``callgrind_annotate``, which names CPython's C functions
only (no Python frames on 3.11).

    .venv/bin/python bench/ab_bench.py --before HEAD~3 [--load produce] [--records 1000000]
        [--producers 2] [--rounds 3] [--raw-batch 100] [--raw-partitions 100] [--gap-ms 40]
        [--count [--keep-dumps DIR]]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from _common import machine_info, machine_line, note, proc_cpu_s
from odradek.client.codec import decode_response
from odradek.devcluster import BrokerProcess as DevBroker
from odradek.devcluster import ClusterError, free_port, stop_process
from scale_bench import (
    encode_request,
    produce_raw,
    raw_produce_frames,
    recv_exactly,
    send_raw_produce,
)

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
          start_timeout_s: float = 30, env: Mapping[str, str] | None = None
          ) -> tuple[subprocess.Popen[bytes], str]:
    """``odradek serve`` from source tree ``src`` (``extra_args``: more of its options;
    ``prefix``: a command it runs under, ``count_instructions``' valgrind; ``env``: more
    of its environment), with the load's topic of ``partitions`` made; the process and
    its address. A broker that does not get that far is stopped."""
    broker = DevBroker(None, Path(data_dir), Path(data_dir + ".out"), port=free_port(),
                       args=extra_args, argv_prefix=prefix,
                       env={**(env or {}), "PYTHONPATH": str(src)})
    broker.start()
    assert broker.process is not None
    proc, bootstrap = broker.process, broker.bootstrap
    try:
        try:
            broker.wait_ready(time.monotonic() + start_timeout_s)
        except ClusterError as exc:
            raise RuntimeError(f"broker from {src} did not start: {exc}") from None
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    except BaseException:
        stop_process(proc, 60)
        raise
    return proc, bootstrap


def run_load(load: str, bootstrap: str, records: int, producers: int, lines: str,
             pid: int, raw_batch: int = 100, raw_partitions: int = 100,
             gap_ms: float = 40.0, fetch_version: int = 12) -> float:
    """Broker CPU seconds spent on the timed part of ``load``."""
    kcat = ["kcat", "-b", bootstrap, "-t", TOPIC, "-p", "0"]
    if load in ("kcat-consume", "consume"):  # needs the records first, untimed
        subprocess.run([*kcat, "-P", "-X", "linger.ms=5", "-l", lines], check=True)
        subprocess.run([*kcat, "-C", "-o", "beginning", "-c", "1", "-q", "-f", "x"],
                       check=True, capture_output=True)
    if load == "consume":
        subprocess.run([sys.executable, "-c", CONSUMER, bootstrap, "1"], check=True)
    if load == "spaced-fetch":
        return spaced_fetch(bootstrap, records, pid, gap_ms, fetch_version)
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


def spaced_fetch(bootstrap: str, records: int, pid: int, gap_ms: float,
                 fetch_version: int = 12) -> float:
    """The spaced-fetch load: broker CPU seconds of its timed fetches."""
    port = int(bootstrap.rsplit(":", 1)[1])
    batches = max(1, records // SPACED_BATCH)
    produce_raw(port, [(TOPIC, 0)], batches * SPACED_BATCH, b"x" * 100, SPACED_BATCH, 1)
    topic_id = None
    if fetch_version >= 13:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            topic_id = topic_id_of(sock)
    frames = [fetch_frame(i, i * SPACED_BATCH, fetch_version, topic_id)
              for i in range(batches)]
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


def fetch_frame(correlation_id: int, offset: int, version: int = 12,
                topic_id: uuid.UUID | None = None) -> bytes:
    """A raw Fetch of partition 0 from ``offset``, as librdkafka asks (read_committed,
    1 MiB per partition): v12 by name, or v13+ by ``topic_id`` (librdkafka 2.16 sends
    v16)."""
    topic: dict[str, Any] = ({"topic": TOPIC} if version < 13 else {"topic_id": topic_id})
    body: dict[str, Any] = {
        "max_wait": 500, "min_bytes": 1, "max_bytes": 50 << 20,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1,
        "topics": [{**topic, "partitions": [{
            "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
            "log_start_offset": -1, "current_leader_epoch": -1}]}]}
    if version < 15:
        body["replica_id"] = -1
    return encode_request(1, version, correlation_id, body)


def topic_id_of(sock: socket.socket) -> uuid.UUID:
    """The load topic's id, asked on ``sock`` (Metadata v12)."""
    sock.sendall(encode_request(3, 12, 0, {"topics": [{"name": TOPIC, "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False}))
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    answer = decode_response(recv_exactly(sock, size), 3, 12, 0, "the broker")
    return answer.topics[0].topic_id


def fetch_one(sock: socket.socket, frame: bytes) -> None:
    """Send one ``fetch_frame`` and read its answer, which must hold a whole batch."""
    sock.sendall(frame)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    if len(recv_exactly(sock, size)) < SPACED_BATCH * 100:
        raise RuntimeError("a fetch returned less than a batch")


def stop_all(procs: Mapping[str, tuple[subprocess.Popen[bytes], str]],
             timeout_s: float) -> None:
    """Stop every side's broker (the paired and counted loads' way out, whatever it is)."""
    for proc, _ in procs.values():
        stop_process(proc, timeout_s)


def connect(cleanup: contextlib.ExitStack,
            procs: Mapping[str, tuple[subprocess.Popen[bytes], str]],
            timeout_s: float) -> dict[str, socket.socket]:
    """A client connection to each side's broker, closed with ``cleanup``."""
    socks = {}
    for side, (_, bootstrap) in procs.items():
        socks[side] = cleanup.enter_context(socket.create_connection(
            ("127.0.0.1", int(bootstrap.rsplit(":", 1)[1])), timeout=timeout_s))
        socks[side].setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return socks


def produce_requests(records: int, raw_batch: int, raw_partitions: int
                     ) -> tuple[list[bytearray], int]:
    """raw-produce's requests: the distinct frames and how many requests to send."""
    return raw_produce_frames([(TOPIC, p) for p in range(raw_partitions)], records,
                              b"x" * 100, raw_batch, 10, same_batches=True)


def write_for_fetches(records: int, socks: Mapping[str, socket.socket], version: int = 12
                      ) -> dict[str, list[bytes]]:
    """spaced-fetch's fetches of each side, one per batch, after writing the batches to
    every side (not measured); by topic id from v13 (each side's topic has its own)."""
    batches = max(1, records // SPACED_BATCH)
    frames, requests = raw_produce_frames([(TOPIC, 0)], batches * SPACED_BATCH, b"x" * 100,
                                          SPACED_BATCH, 1)
    fetches = {}
    for side, sock in socks.items():
        send_raw_produce(sock, frames, 0, requests)
        topic_id = topic_id_of(sock) if version >= 13 else None
        fetches[side] = [fetch_frame(i, i * SPACED_BATCH, version, topic_id)
                         for i in range(batches)]
    return fetches


COUNTED_LOADS = ("raw-produce", "spaced-fetch")
VALGRIND_START_S = 900  # a broker's start under callgrind: its imports run ~50x slower
# The storage duties that run on the wall clock, not per request, put off past any count:
# the log cleaner's pass (every log.cleaner.backoff.ms, 15 s) costs ~1.06 M instructions
# with nothing to compact, the offset checkpoint (60 s) ~0.5 M. A window the cleaner fell
# in counted ~2,100 more instructions per spaced-fetch request (~1%), and since which
# window it falls in depends on how long each lasts, same-code A/A runs came out 1.012.
QUIET_DUTIES = tuple(arg for setting in (
    "log.cleaner.backoff.ms", "log.flush.offset.checkpoint.interval.ms",
    "log.retention.check.interval.ms", "log.flush.scheduler.interval.ms")
    for arg in ("--override", f"{setting}={24 * 3600 * 1000}"))


def count_instructions(load: str, sides: Mapping[str, tuple[Path, Sequence[str]]],
                       records: int, tmp_root: str, raw_batch: int = 100,
                       raw_partitions: int = 100, keep_dumps: str | None = None,
                       fetch_version: int = 12) -> dict[str, dict[str, Any]]:
    """Instructions per request of ``load`` (``raw-produce`` or ``spaced-fetch``) on each
    of ``sides`` (name -> (source tree, more ``odradek serve`` options)): all their
    brokers start at once under valgrind's callgrind, instrumentation off; then, side
    after side in the order of ``sides``, it is switched on for exactly the load's
    requests (spaced-fetch's batches are written before, on every side), off, and
    dumped, and the dump's Ir total (every thread of the process) is the side's count.
    The storage duties driven by the wall clock (``QUIET_DUTIES``) are put off on every
    side, so that a count holds the requests' work only. Deterministic where CPU seconds
    on a shared machine are not (same hash seed, same requests); it counts the work the
    code does, not what cold caches make it cost. ``keep_dumps``: a directory to copy
    the dumps to (``callgrind.SIDE.N``), for callgrind_annotate."""
    if load not in COUNTED_LOADS:
        raise ValueError(f"cannot count load {load!r}: only {', '.join(COUNTED_LOADS)}")
    dumps_dir = tempfile.mkdtemp(prefix="callgrind-", dir=tmp_root)
    out = {side: os.path.join(dumps_dir, f"callgrind.{side}") for side in sides}
    procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(stop_all, procs, 120)

        def start(side: str) -> None:
            src, extra = sides[side]
            prefix = ("valgrind", "--tool=callgrind", "--instr-atstart=no",
                      f"--callgrind-out-file={out[side]}")
            partitions = raw_partitions if load == "raw-produce" else 1
            procs[side] = serve(src, tempfile.mkdtemp(dir=tmp_root), partitions,
                                (*QUIET_DUTIES, *extra), prefix, VALGRIND_START_S,
                                env={"PYTHONHASHSEED": "0"})  # dicts and sets alike

        starters = [threading.Thread(target=start, args=(side,)) for side in sides]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        if set(procs) != set(sides):
            raise RuntimeError("a broker did not start under valgrind")
        socks = connect(cleanup, procs, 600)
        if load == "spaced-fetch":
            fetches = write_for_fetches(records, socks, fetch_version)
            requests = len(next(iter(fetches.values())))

            def run(side: str) -> None:
                for frame in fetches[side]:
                    fetch_one(socks[side], frame)
        else:
            frames, requests = produce_requests(records, raw_batch, raw_partitions)

            def run(side: str) -> None:
                send_raw_produce(socks[side], frames, 0, requests)

        result: dict[str, dict[str, Any]] = {}
        for side in sides:
            pid = str(procs[side][0].pid)
            subprocess.run(["callgrind_control", "-i", "on", pid], check=True,
                           capture_output=True)
            run(side)
            for control in (["-i", "off"], ["-d"]):
                subprocess.run(["callgrind_control", *control, pid], check=True,
                               capture_output=True)
            instructions = dumped_instructions(out[side])
            if keep_dumps:  # for callgrind_annotate: where the difference is
                os.makedirs(keep_dumps, exist_ok=True)
                for dump in Path(dumps_dir).glob(f"callgrind.{side}.*"):
                    shutil.copy(dump, keep_dumps)
            result[side] = {"instructions_per_request": instructions / requests,
                            "requests": requests,
                            "instructions_per_record": instructions / records}
        return result


def dumped_instructions(prefix: str) -> int:
    """Ir of the last dump of the callgrind run writing ``prefix``.N: its ``totals:``
    line (its ``summary:`` says 0 when the dump is asked for with instrumentation off)."""
    dumps = sorted(Path(prefix).parent.glob(Path(prefix).name + ".*"),
                   key=lambda p: int(p.suffix[1:]))
    if not dumps:
        raise RuntimeError(f"no callgrind dump {prefix}.N")
    for line in reversed(dumps[-1].read_text().splitlines()):
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {dumps[-1]}")


def add_load_options(ap: argparse.ArgumentParser) -> None:
    """The options of the raw-produce and spaced-fetch loads (metrics_bench.py has them too)."""
    ap.add_argument("--raw-batch", type=int, default=100,
                    help="records per batch of the raw-produce load (100)")
    ap.add_argument("--raw-partitions", type=int, default=100,
                    help="partitions of the raw-produce load's topic (100)")
    ap.add_argument("--gap-ms", type=float, default=40.0,
                    help="pause between the spaced-fetch load's fetches (40)")
    ap.add_argument("--fetch-version", type=int, default=12,
                    help="the spaced-fetch load's Fetch version (12; 13+ by topic id)")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--before", required=True, help="git revision to compare against")
    ap.add_argument("--load", default=None,
                    choices=["produce", "kcat-produce", "kcat-consume", "consume", "raw-produce",
                             "spaced-fetch"],
                    help="produce (default), or raw-produce with --count")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds, each side once per round (3; 1 with --count)")
    ap.add_argument("--count", action="store_true",
                    help="count instructions per request under callgrind instead of timing "
                    "(raw-produce and spaced-fetch only)")
    ap.add_argument("--keep-dumps", default=None, metavar="DIR",
                    help="--count: copy callgrind's dumps here (callgrind_annotate)")
    add_load_options(ap)
    args = ap.parse_args(argv)
    if args.load is None:
        args.load = "raw-produce" if args.count else "produce"
    if args.rounds is None:
        args.rounds = 1 if args.count else 3
    if args.count and args.load not in COUNTED_LOADS:
        ap.error(f"--count takes --load {' or '.join(COUNTED_LOADS)}, not {args.load}: the "
                 "other loads' clients (confluent-kafka, kcat) batch at the broker's pace, so "
                 "their requests, and the instructions counted, differ from run to run")
    if args.keep_dumps and not args.count:
        ap.error("--keep-dumps goes with --count")
    partitions = args.raw_partitions if args.load == "raw-produce" else 1
    tmp = tempfile.mkdtemp(prefix="odradek-ab-")
    worktree = os.path.join(tmp, "before")
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", worktree,
                    args.before], check=True, capture_output=True)
    lines = os.path.join(tmp, "records.txt")
    if args.load in ("kcat-produce", "kcat-consume", "consume"):
        Path(lines).write_bytes((b"x" * 100 + b"\n") * args.records)
    sides = {"before": Path(worktree) / "src", "after": REPO / "src"}
    figure: dict[str, list[float]] = {"before": [], "after": []}
    try:
        for i in range(args.rounds):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            if args.count:  # both brokers in one go, counted in turn
                note(f"round {i + 1}/{args.rounds}: {' then '.join(order)} under callgrind")
                counts = count_instructions(
                    args.load, {side: (sides[side], ()) for side in order}, args.records,
                    tmp, args.raw_batch, args.raw_partitions, args.keep_dumps,
                    args.fetch_version)
                for side in sides:
                    figure[side].append(counts[side]["instructions_per_request"])
                    note(f"round {i + 1} {side}: {figure[side][-1]:,.0f} instructions per "
                         f"request ({counts[side]['requests']} requests)")
                continue
            for side in order:
                data_dir = tempfile.mkdtemp(dir=tmp)
                proc, bootstrap = serve(sides[side], data_dir, partitions)
                try:
                    cpu = run_load(args.load, bootstrap, args.records, args.producers, lines,
                                   proc.pid, args.raw_batch, args.raw_partitions, args.gap_ms,
                                   args.fetch_version)
                finally:
                    stop_process(proc, 60)
                figure[side].append(cpu / (args.records / 1e6))
                note(f"round {i + 1} {side}: {figure[side][-1]:.3f} broker CPU s per M")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", worktree],
                       check=False, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    ratios = [a / b for a, b in zip(figure["after"], figure["before"], strict=True) if b]
    print(machine_line(machine_info()))
    shape = (f" (batches of {args.raw_batch} to {args.raw_partitions} partitions)"
             if args.load == "raw-produce" else "")
    how = ("counted under callgrind" if args.count
           else f"{args.rounds} rounds alternating")
    print(f"load {args.load}{shape}, {args.records:,} records, {how}; "
          f"before = {args.before}, after = working tree")
    unit, shown, ratio_shown = (("instructions per request", ",.0f", ".4f") if args.count
                                else ("broker CPU s per M records", ".3f", ".2f"))
    print(f"{unit}: before {statistics.median(figure['before']):{shown}} "
          f"(rounds {', '.join(f'{x:{shown}}' for x in figure['before'])}), after "
          f"{statistics.median(figure['after']):{shown}} "
          f"(rounds {', '.join(f'{x:{shown}}' for x in figure['after'])}); after/before "
          f"median {statistics.median(ratios):{ratio_shown}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
