"""Metrics benchmark (issue 19): Odradek's broker CPU per record with ``metrics.listen``
on against off, same load, in one run.

Each round starts two ``odradek serve`` processes one after the other - without
``metrics.listen`` and with it (alternating which goes first: ABBA) - and runs
broker_bench.py's confluent-kafka load on each: N records of 100-byte values produced to
a 1-partition topic (``LOAD_PRODUCER``), then read back by an assigned consumer. Broker
CPU is utime + stime of the broker process over each timed part (``/proc``); the ratio
is the median of the per-round ratios of on / off: what the hot paths' counting costs.
Target (issue 19): within 3% (ratio <= 1.03).

A scrape's cost is measured apart, after the load, on the "on" broker: ``--scrapes``
scrapes of ``/metrics`` one after the other, the broker's CPU over them divided by their
number (the topic's partition, the 50 of ``__consumer_offsets`` and the load's group are
in every scrape). Prometheus scrapes every 15 s by default, so a scrape's milliseconds
are spread over 15 s of whatever the broker does; scraping during the timed parts
would charge them to a few seconds of load instead.

``--load`` picks another load from ab_bench.py, whose request count does not depend on
the client's timing: ``raw-produce`` (pre-built Produce v3 requests, batches of
``--raw-batch`` records to ``--raw-partitions`` partitions, 10 batches per request),
``spaced-fetch`` (one raw Fetch per 7,800-record batch, ``--gap-ms`` apart, caches
cold), ``kcat-produce`` / ``kcat-consume`` (librdkafka without Python). librdkafka's
batching follows the broker's pace, so with the default load the number of requests per
million records (what the timing costs per) moves from run to run; the raw loads send
the same requests every time, which is what an on/off comparison of a per-request
cost needs.

The ``paired-`` loads go further: both brokers run at once and one client alternates
between them, a chunk of requests to one then the same chunk to the other (the order
flipping every chunk), so that whatever the machine does at any moment falls on both
alike; each broker's CPU is taken over the whole run. ``paired-produce`` is
``raw-produce``'s requests in chunks of 50; ``paired-fetch`` is ``spaced-fetch``'s
fetches (the same batch from one broker, then the other, ``--gap-ms`` between pairs,
caches swept). On this shared 2-core machine these are the figures to trust: the
sequential loads' per-round ratios spread by tens of percent.

The ``count-`` loads count instead of timing: both brokers run under valgrind's
callgrind (``valgrind`` from Debian), instrumented only during the load's requests, and
the figure is instructions per request, metrics on against off. ``count-produce`` is
``paired-produce``'s requests, ``count-fetch`` ``paired-fetch``'s fetches (without the
pauses and the cache sweeper: instructions do not depend on them). Instructions are what
the code does; seconds add what the caches make of it, which the paired loads show.
A broker starts in a few minutes under callgrind, so use fewer records
(``--records 390000``: 50 fetches; ``100000``: 100 produce requests).

Run: ``.venv/bin/python bench/metrics_bench.py [--records 1000000] [--rounds 4]
[--load confluent|raw-produce|spaced-fetch|kcat-produce|kcat-consume|paired-produce|
paired-fetch|count-produce|count-fetch]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ab_bench
import broker_bench
import scale_bench
from _common import finish, note, proc_cpu_s
from broker_bench import ODRADEK, broker_machine_info, broker_machine_line
from odradek.devcluster import free_port, stop_process


class MetricsBroker(broker_bench.Broker):
    """broker_bench's Odradek process, with ``metrics.listen`` on a free port if ``on``."""

    def __init__(self, tmp_root: str, on: bool) -> None:
        self.metrics_port = free_port() if on else None
        if on:
            self.extra_args = ("--override", f"metrics.listen=127.0.0.1:{self.metrics_port}")
        super().__init__(ODRADEK, tmp_root)


def one_broker(on: bool, args: argparse.Namespace, tmp_root: str) -> dict[str, Any]:
    broker = MetricsBroker(tmp_root, on)
    try:
        broker_bench.create_topic(broker.bootstrap)
        produced = broker_bench.produce(broker, args.records, args.value_bytes)
        consumed = broker_bench.consume(broker, args.records)
        result: dict[str, Any] = {"produce": produced.as_dict(), "consume": consumed.as_dict()}
        if on:
            assert broker.metrics_port is not None
            result.update(scrape_cost(broker.metrics_port, broker.pid, args.scrapes))
        return result
    finally:
        broker.stop()


def one_ab_load(on: bool, args: argparse.Namespace, tmp_root: str, lines: str
                ) -> dict[str, Any]:
    """One broker under one of ab_bench.py's loads (``--load``), metrics on or off."""
    data_dir = tempfile.mkdtemp(dir=tmp_root)
    port = free_port() if on else None
    extra = ("--override", f"metrics.listen=127.0.0.1:{port}") if on else ()
    partitions = args.raw_partitions if args.load == "raw-produce" else 1
    proc, bootstrap = ab_bench.serve(ab_bench.REPO / "src", data_dir, partitions, extra)
    try:
        cpu = ab_bench.run_load(args.load, bootstrap, args.records, 1, lines, proc.pid,
                                args.raw_batch, args.raw_partitions, args.gap_ms)
        result: dict[str, Any] = {args.load: {
            "broker_cpu_s_per_m": cpu / (args.records / 1e6)}}
        if port is not None:
            result.update(scrape_cost(port, proc.pid, args.scrapes))
        return result
    finally:
        stop_process(proc, 60)


PAIRED_CHUNK = 50  # requests to one broker before the client turns to the other


def paired(args: argparse.Namespace, tmp_root: str) -> dict[str, dict[str, Any]]:
    """Both brokers at once, one client alternating between them (the paired- loads)."""
    ports = {"off": None, "on": free_port()}
    procs: dict[str, Any] = {}
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(_stop_all, procs, 60)

        for side, port in ports.items():
            extra = ("--override", f"metrics.listen=127.0.0.1:{port}") if port else ()
            partitions = args.raw_partitions if args.load == "paired-produce" else 1
            procs[side] = ab_bench.serve(ab_bench.REPO / "src",
                                         tempfile.mkdtemp(dir=tmp_root), partitions, extra)
        socks = _connect(cleanup, procs, 30)
        pids = {side: proc.pid for side, (proc, _) in procs.items()}
        cpu = (_paired_produce if args.load == "paired-produce" else _paired_fetch)(
            args, socks, pids)
        result: dict[str, dict[str, Any]] = {
            side: {args.load: {"broker_cpu_s_per_m": cpu[side] / (args.records / 1e6)}}
            for side in cpu}
        assert ports["on"] is not None
        result["on"].update(scrape_cost(ports["on"], pids["on"], args.scrapes))
        return result


def _stop_all(procs: dict[str, Any], timeout_s: float) -> None:
    """Stop every side's broker (the paired and counted loads' way out, whatever it is)."""
    for proc, _ in procs.values():
        stop_process(proc, timeout_s)


def _connect(cleanup: contextlib.ExitStack, procs: dict[str, Any], timeout_s: float
             ) -> dict[str, socket.socket]:
    """A client connection to each side's broker, closed with ``cleanup``."""
    socks = {}
    for side, (_, bootstrap) in procs.items():
        socks[side] = cleanup.enter_context(socket.create_connection(
            ("127.0.0.1", int(bootstrap.rsplit(":", 1)[1])), timeout=timeout_s))
        socks[side].setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return socks


def _produce_requests(args: argparse.Namespace) -> tuple[list[bytearray], int]:
    """raw-produce's requests: the distinct frames and how many requests to send."""
    targets = [(ab_bench.TOPIC, p) for p in range(args.raw_partitions)]
    return scale_bench.raw_produce_frames(targets, args.records, b"x" * 100, args.raw_batch,
                                          10, same_batches=True)


def _fetches(args: argparse.Namespace, socks: dict[str, socket.socket]) -> list[bytes]:
    """spaced-fetch's fetches, one per batch, after writing the batches to every side
    (not measured)."""
    batch = ab_bench.SPACED_BATCH
    batches = max(1, args.records // batch)
    frames, requests = scale_bench.raw_produce_frames(
        [(ab_bench.TOPIC, 0)], batches * batch, b"x" * 100, batch, 1)
    for sock in socks.values():
        scale_bench.send_raw_produce(sock, frames, 0, requests)
    return [ab_bench.fetch_frame(i, i * batch) for i in range(batches)]


def _paired_produce(args: argparse.Namespace, socks: dict[str, socket.socket],
                    pids: dict[str, int]) -> dict[str, float]:
    frames, requests = _produce_requests(args)
    cpu0 = {side: proc_cpu_s(pid) for side, pid in pids.items()}
    for k, start in enumerate(range(0, requests, PAIRED_CHUNK)):
        for side in (("off", "on") if k % 2 == 0 else ("on", "off")):
            scale_bench.send_raw_produce(socks[side], frames, start,
                                         min(PAIRED_CHUNK, requests - start))
    return {side: proc_cpu_s(pid) - cpu0[side] for side, pid in pids.items()}


def _paired_fetch(args: argparse.Namespace, socks: dict[str, socket.socket],
                  pids: dict[str, int]) -> dict[str, float]:
    fetches = _fetches(args, socks)
    hog = subprocess.Popen([sys.executable, "-c", ab_bench.HOG,
                            str(len(fetches) * (args.gap_ms / 1000 + 0.02) + 30)])
    try:
        time.sleep(0.5)  # the hog's start is not the brokers' cost
        cpu0 = {side: proc_cpu_s(pid) for side, pid in pids.items()}
        for k, frame in enumerate(fetches):
            for side in (("off", "on") if k % 2 == 0 else ("on", "off")):
                ab_bench.fetch_one(socks[side], frame)
            time.sleep(args.gap_ms / 1000)
        return {side: proc_cpu_s(pid) - cpu0[side] for side, pid in pids.items()}
    finally:
        hog.kill()
        hog.wait()


VALGRIND_START_S = 900  # a broker's start under callgrind: its imports run ~50x slower


def counted(args: argparse.Namespace, tmp_root: str) -> dict[str, dict[str, Any]]:
    """The ``count-`` loads: both brokers under valgrind's callgrind, instrumentation off
    until the timed part (the records of ``count-fetch`` are written before it), on for
    exactly its requests, then dumped: the instructions (callgrind's Ir, every thread of
    the process) per request, metrics on against off. Deterministic where CPU seconds on
    this shared machine are not (same hash seed, same requests); it counts the work the
    code does, not what cold caches make it cost (the paired- loads show that)."""
    procs: dict[str, Any] = {}
    out = {side: os.path.join(tmp_root, f"callgrind.{side}") for side in ("off", "on")}
    prefix = {side: ("valgrind", "--tool=callgrind", "--instr-atstart=no",
                     f"--callgrind-out-file={out[side]}") for side in out}
    os.environ["PYTHONHASHSEED"] = "0"  # the brokers' dicts and sets alike in both runs
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(_stop_all, procs, 120)

        def start(side: str) -> None:
            extra = (("--override", f"metrics.listen=127.0.0.1:{free_port()}")
                     if side == "on" else ())
            partitions = args.raw_partitions if args.load == "count-produce" else 1
            procs[side] = ab_bench.serve(ab_bench.REPO / "src", tempfile.mkdtemp(dir=tmp_root),
                                         partitions, extra, prefix[side], VALGRIND_START_S)

        starters = [threading.Thread(target=start, args=(side,)) for side in out]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        if set(procs) != set(out):
            raise RuntimeError("a broker did not start under valgrind")
        socks = _connect(cleanup, procs, 600)
        pids = {side: proc.pid for side, (proc, _) in procs.items()}
        if args.load == "count-fetch":
            fetches = _fetches(args, socks)
            requests = len(fetches)

            def load(side: str) -> None:
                for frame in fetches:
                    ab_bench.fetch_one(socks[side], frame)
        else:
            frames, requests = _produce_requests(args)

            def load(side: str) -> None:
                scale_bench.send_raw_produce(socks[side], frames, 0, requests)

        result: dict[str, dict[str, Any]] = {}
        for side in out:
            subprocess.run(["callgrind_control", "-i", "on", str(pids[side])], check=True,
                           capture_output=True)
            load(side)
            subprocess.run(["callgrind_control", "-i", "off", str(pids[side])], check=True,
                           capture_output=True)
            subprocess.run(["callgrind_control", "-d", str(pids[side])], check=True,
                           capture_output=True)
            instructions = _dumped_instructions(out[side])
            if args.keep_dumps:  # for callgrind_annotate: where the difference is
                os.makedirs(args.keep_dumps, exist_ok=True)
                for dump in Path(out[side]).parent.glob(Path(out[side]).name + ".*"):
                    shutil.copy(dump, args.keep_dumps)
            result[side] = {args.load: {
                "instructions_per_request": instructions / requests, "requests": requests,
                "instructions_per_record": instructions / args.records}}
        return result


def _dumped_instructions(prefix: str) -> int:
    """Ir of the last dump of the callgrind run writing ``prefix``.N: its ``totals:``
    line (its ``summary:`` says 0 when the dump is asked for with instrumentation off)."""
    dumps = sorted(Path(prefix).parent.glob(Path(prefix).name + ".*"),
                   key=lambda p: int(p.suffix[1:]))
    for line in reversed(dumps[-1].read_text().splitlines()):
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {dumps[-1]}")


def scrape_cost(port: int, pid: int, scrapes: int) -> dict[str, Any]:
    """Broker CPU milliseconds per scrape of /metrics, over ``scrapes`` in a row."""
    url = f"http://127.0.0.1:{port}/metrics"
    cpu0 = proc_cpu_s(pid)
    size = 0
    for _ in range(scrapes):
        with urllib.request.urlopen(url, timeout=10) as answer:
            size = len(answer.read())
    return {"scrape_cpu_ms": (proc_cpu_s(pid) - cpu0) * 1000 / scrapes,
            "scrape_bytes": size}


def main(argv: Sequence[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scrapes", type=int, default=50, help="scrapes timed per round (50)")
    ap.add_argument("--load", default="confluent",
                    choices=["confluent", "raw-produce", "spaced-fetch", "kcat-produce",
                             "kcat-consume", "paired-produce", "paired-fetch", "count-produce",
                             "count-fetch"],
                    help="confluent (default): broker_bench.py's producer and consumer; "
                    "the rest: ab_bench.py's loads of the same names")
    ab_bench.add_load_options(ap)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--keep-dumps", default=None, metavar="DIR",
                    help="count- loads: copy callgrind's dumps here (callgrind_annotate)")
    ap.add_argument("--out", default=None,
                    help="results file (bench/results/metrics.json, or "
                    "metrics_LOAD.json for another load)")
    args = ap.parse_args(argv)
    if args.out is None:
        name = "metrics" if args.load == "confluent" else f"metrics_{args.load}"
        args.out = str(here / "results" / f"{name}.json")
    workloads = ("produce", "consume") if args.load == "confluent" else (args.load,)
    machine = broker_machine_info()
    note(broker_machine_line(machine))
    rounds = []
    with tempfile.TemporaryDirectory(prefix="metrics-bench-", dir=args.dir) as tmp_root:
        records_file = os.path.join(tmp_root, "records.txt")  # what the kcat loads send
        if args.load.startswith("kcat"):
            Path(records_file).write_bytes((b"x" * 100 + b"\n") * args.records)
        for i in range(args.rounds):
            if args.load.startswith(("count", "paired")):  # both brokers in one go
                counting = args.load.startswith("count")
                note(f"round {i + 1}/{args.rounds}: metrics off and on, "
                     + ("under callgrind" if counting else "side by side"))
                rounds.append((counted if counting else paired)(args, tmp_root))
                figure, shown, unit = (
                    ("instructions_per_request", ",.0f", "instructions per request")
                    if counting else ("broker_cpu_s_per_m", ".3f", "broker CPU s per M"))
                note("  " + ", ".join(f"{side} {rounds[-1][side][args.load][figure]:{shown}}"
                                      for side in ("off", "on")) + " " + unit)
                continue
            order = (False, True) if i % 2 == 0 else (True, False)
            round_result: dict[str, Any] = {}
            for on in order:
                note(f"round {i + 1}/{args.rounds}: metrics {'on' if on else 'off'}")
                r = (one_broker(on, args, tmp_root) if args.load == "confluent"
                     else one_ab_load(on, args, tmp_root, records_file))
                round_result["on" if on else "off"] = r
                note("  " + ", ".join(f"{w} {r[w]['broker_cpu_s_per_m']:.3f}"
                                      for w in workloads) + " broker CPU s per M")
            rounds.append(round_result)
    counting = args.load.startswith("count")
    figure, unit = (("instructions_per_request", "instructions per request") if counting
                    else ("broker_cpu_s_per_m", "broker CPU s per M"))
    summary: dict[str, Any] = {}
    lines = [f"| workload | {unit}, off | on | on / off (median of rounds) | "
             "per-round ratios |", "|---|---:|---:|---:|---|"]
    for workload in workloads:
        off = [r["off"][workload][figure] for r in rounds]
        on = [r["on"][workload][figure] for r in rounds]
        ratios = [b / a for a, b in zip(off, on, strict=True)]
        summary[workload] = {"off": statistics.median(off), "on": statistics.median(on),
                             "ratio": statistics.median(ratios), "ratios": ratios}
        shown = ",.0f" if counting else ".3f"
        lines.append(f"| {workload} | {statistics.median(off):{shown}} | "
                     f"{statistics.median(on):{shown}} | {statistics.median(ratios):.3f} | "
                     + ", ".join(f"{x:.3f}" for x in ratios) + " |")
    both = statistics.median([summary[w]["ratio"] for w in workloads])
    if not counting:
        scrape_ms = [r["on"]["scrape_cpu_ms"] for r in rounds]
        summary["scrape_cpu_ms"] = statistics.median(scrape_ms)
        lines.append("")
        lines.append(f"one scrape of /metrics ({rounds[0]['on']['scrape_bytes']:,} bytes): "
                     f"{statistics.median(scrape_ms):.2f} broker CPU ms (median of rounds; "
                     + ", ".join(f"{x:.2f}" for x in scrape_ms) + ")")
    lines.append("target (issue 19): on / off <= 1.03: " + ", ".join(
        f"{w} {'met' if summary[w]['ratio'] <= 1.03 else 'not met'}" for w in workloads))
    results = {"when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "command": " ".join([os.path.relpath(sys.argv[0]), *(argv or sys.argv[1:])]),
               "machine": machine, "load": args.load, "rounds": rounds, "summary": summary,
               "median_of_both": both}
    return finish(results, "\n".join(lines), args.out)


if __name__ == "__main__":
    sys.exit(main())
