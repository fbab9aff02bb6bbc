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
the figure is instructions per request, metrics on against off (ab_bench.py's
``count_instructions``, which its ``--count`` uses for two source trees; the storage
duties that run on the wall clock, such as the log cleaner's pass every 15 s, are put
off past the run). ``count-produce`` is ``paired-produce``'s requests, ``count-fetch``
``paired-fetch``'s fetches (without the pauses and the cache sweeper: instructions do
not depend on them). Instructions are what
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
import socket
import statistics
import subprocess
import sys
import tempfile
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
        cleanup.callback(ab_bench.stop_all, procs, 60)

        for side, port in ports.items():
            extra = ("--override", f"metrics.listen=127.0.0.1:{port}") if port else ()
            partitions = args.raw_partitions if args.load == "paired-produce" else 1
            procs[side] = ab_bench.serve(ab_bench.REPO / "src",
                                         tempfile.mkdtemp(dir=tmp_root), partitions, extra)
        socks = ab_bench.connect(cleanup, procs, 30)
        pids = {side: proc.pid for side, (proc, _) in procs.items()}
        cpu = (_paired_produce if args.load == "paired-produce" else _paired_fetch)(
            args, socks, pids)
        result: dict[str, dict[str, Any]] = {
            side: {args.load: {"broker_cpu_s_per_m": cpu[side] / (args.records / 1e6)}}
            for side in cpu}
        assert ports["on"] is not None
        result["on"].update(scrape_cost(ports["on"], pids["on"], args.scrapes))
        return result


def _paired_produce(args: argparse.Namespace, socks: dict[str, socket.socket],
                    pids: dict[str, int]) -> dict[str, float]:
    frames, requests = ab_bench.produce_requests(args.records, args.raw_batch,
                                                 args.raw_partitions)
    cpu0 = {side: proc_cpu_s(pid) for side, pid in pids.items()}
    for k, start in enumerate(range(0, requests, PAIRED_CHUNK)):
        for side in (("off", "on") if k % 2 == 0 else ("on", "off")):
            scale_bench.send_raw_produce(socks[side], frames, start,
                                         min(PAIRED_CHUNK, requests - start))
    return {side: proc_cpu_s(pid) - cpu0[side] for side, pid in pids.items()}


def _paired_fetch(args: argparse.Namespace, socks: dict[str, socket.socket],
                  pids: dict[str, int]) -> dict[str, float]:
    fetches = ab_bench.write_for_fetches(args.records, socks, args.fetch_version)
    count = len(fetches["off"])
    hog = subprocess.Popen([sys.executable, "-c", ab_bench.HOG,
                            str(count * (args.gap_ms / 1000 + 0.02) + 30)])
    try:
        time.sleep(0.5)  # the hog's start is not the brokers' cost
        cpu0 = {side: proc_cpu_s(pid) for side, pid in pids.items()}
        for k in range(count):
            for side in (("off", "on") if k % 2 == 0 else ("on", "off")):
                ab_bench.fetch_one(socks[side], fetches[side][k])
            time.sleep(args.gap_ms / 1000)
        return {side: proc_cpu_s(pid) - cpu0[side] for side, pid in pids.items()}
    finally:
        hog.kill()
        hog.wait()


def counted(args: argparse.Namespace, tmp_root: str) -> dict[str, dict[str, Any]]:
    """The ``count-`` loads: ab_bench.count_instructions on two brokers of this source
    tree under callgrind, metrics off and on: instructions per request of
    ``count-produce`` (raw-produce's requests) or ``count-fetch`` (spaced-fetch's
    fetches, without the pauses and the cache sweeper)."""
    src = ab_bench.REPO / "src"
    sides = {"off": (src, ()),
             "on": (src, ("--override", f"metrics.listen=127.0.0.1:{free_port()}"))}
    load = {"count-produce": "raw-produce", "count-fetch": "spaced-fetch"}[args.load]
    counts = ab_bench.count_instructions(load, sides, args.records, tmp_root, args.raw_batch,
                                         args.raw_partitions, args.keep_dumps)
    return {side: {args.load: figures} for side, figures in counts.items()}


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
