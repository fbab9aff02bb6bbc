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

Run: ``.venv/bin/python bench/metrics_bench.py [--records 1000000] [--rounds 4]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import broker_bench
from _common import finish, free_port, note
from broker_bench import ODRADEK, broker_machine_info, broker_machine_line


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
            url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
            cpu0 = broker.cpu_s()
            for _ in range(args.scrapes):
                with urllib.request.urlopen(url, timeout=10) as answer:
                    size = len(answer.read())
            result["scrape_cpu_ms"] = (broker.cpu_s() - cpu0) * 1000 / args.scrapes
            result["scrape_bytes"] = size
        return result
    finally:
        broker.stop()


def main(argv: Sequence[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scrapes", type=int, default=50, help="scrapes timed per round (50)")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--out", default=str(here / "results" / "metrics.json"))
    args = ap.parse_args(argv)
    machine = broker_machine_info()
    note(broker_machine_line(machine))
    rounds = []
    with tempfile.TemporaryDirectory(prefix="metrics-bench-", dir=args.dir) as tmp_root:
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            round_result: dict[str, Any] = {}
            for on in order:
                note(f"round {i + 1}/{args.rounds}: metrics {'on' if on else 'off'}")
                round_result["on" if on else "off"] = one_broker(on, args, tmp_root)
                r = round_result["on" if on else "off"]
                note(f"  produce {r['produce']['broker_cpu_s_per_m']:.3f}, consume "
                     f"{r['consume']['broker_cpu_s_per_m']:.3f} broker CPU s per M")
            rounds.append(round_result)
    summary: dict[str, Any] = {}
    lines = ["| workload | broker CPU s per M, off | on | on / off (median of rounds) | "
             "per-round ratios |", "|---|---:|---:|---:|---|"]
    for workload in ("produce", "consume"):
        off = [r["off"][workload]["broker_cpu_s_per_m"] for r in rounds]
        on = [r["on"][workload]["broker_cpu_s_per_m"] for r in rounds]
        ratios = [b / a for a, b in zip(off, on, strict=True)]
        summary[workload] = {"off": statistics.median(off), "on": statistics.median(on),
                             "ratio": statistics.median(ratios), "ratios": ratios}
        lines.append(f"| {workload} | {statistics.median(off):.3f} | "
                     f"{statistics.median(on):.3f} | {statistics.median(ratios):.3f} | "
                     + ", ".join(f"{x:.3f}" for x in ratios) + " |")
    both = statistics.median([summary["produce"]["ratio"], summary["consume"]["ratio"]])
    scrape_ms = [r["on"]["scrape_cpu_ms"] for r in rounds]
    summary["scrape_cpu_ms"] = statistics.median(scrape_ms)
    lines.append("")
    lines.append(f"one scrape of /metrics ({rounds[0]['on']['scrape_bytes']:,} bytes): "
                 f"{statistics.median(scrape_ms):.2f} broker CPU ms (median of rounds; "
                 + ", ".join(f"{x:.2f}" for x in scrape_ms) + ")")
    lines.append(f"target (issue 19): on / off <= 1.03: produce "
                 f"{'met' if summary['produce']['ratio'] <= 1.03 else 'not met'}, consume "
                 f"{'met' if summary['consume']['ratio'] <= 1.03 else 'not met'}")
    results = {"when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "command": " ".join([os.path.relpath(sys.argv[0]), *(argv or sys.argv[1:])]),
               "machine": machine, "rounds": rounds, "summary": summary,
               "median_of_both": both}
    return finish(results, "\n".join(lines), args.out)


if __name__ == "__main__":
    sys.exit(main())
