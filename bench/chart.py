"""One PNG of the latest benchmark results: throughput, broker CPU per million records and
end-to-end latency, per system (Odradek, Tansu, RabbitMQ, NATS JetStream).

Reads what the benchmarks wrote (bench/results/broker.json, peers.json, latency.json;
whichever exist) and draws docs/benchmarks.png. It measures nothing itself: run it after
the benchmarks, and the chart shows their latest figures.

    .venv/bin/python bench/chart.py [--results bench/results] [--out docs/benchmarks.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
BROKER_LABELS = {"odradek": "Odradek", "tansu": "Tansu 0.6 (memory)"}
PEER_LABELS = {"rabbitmq-queue": "RabbitMQ queue", "rabbitmq-stream": "RabbitMQ stream",
               "nats-jetstream": "NATS JetStream"}
COLORS = {"Odradek": "#1b6ca8", "Tansu 0.6 (memory)": "#d1495b", "RabbitMQ queue": "#edae49",
          "RabbitMQ stream": "#f4d35e", "NATS JetStream": "#66a182"}


def load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def rows(broker: dict[str, Any] | None, peers: dict[str, Any] | None,
         workload: str) -> list[tuple[str, float, float]]:
    """(system, records/s, broker CPU s per M) for a workload, Python clients only (the
    one kind of client every system was driven with)."""
    out = []
    if broker:
        for kind, label in BROKER_LABELS.items():
            r = broker["summary"].get(workload, {}).get(kind)
            if r and "failed" not in r:
                out.append((label, r["records_s"], r["broker_cpu_s_per_m"]))
    if peers:
        for key, label in PEER_LABELS.items():
            r = peers["summary"].get(key, {}).get(workload)
            if r:
                out.append((label, r["records_s"], r["server_cpu_s_per_m"]))
    return out


def bars(ax: Any, data: list[tuple[str, float]], title: str, log: bool) -> None:
    labels = [d[0] for d in data]
    values = [d[1] for d in data]
    ax.barh(labels, values, color=[COLORS.get(label, "#888888") for label in labels])
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    ax.set_title(title, fontsize=10)
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,.0f}" if v >= 100 else f" {v:.2f}", va="center", fontsize=8)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--out", default=str(HERE.parent / "docs" / "benchmarks.png"))
    args = ap.parse_args(argv)
    results = Path(args.results)
    broker, peers = load(results / "broker.json"), load(results / "peers.json")
    latency = load(results / "latency.json")
    fig, axes = plt.subplots(3, 2, figsize=(12, 11))
    for col, workload in enumerate(("produce", "consume")):
        data = rows(broker, peers, workload)
        bars(axes[0][col], [(s, r) for s, r, _ in data],
             f"{workload}: records/s (100-byte records, Python clients; log)", True)
        bars(axes[1][col], [(s, c) for s, _, c in data],
             f"{workload}: server CPU s per M records (log; lower is better)",
             True)
    if latency:
        for col, fetch_wait in enumerate(sorted({r["fetch_wait_max_ms"]
                                                 for r in latency["summary"]})[:2]):
            ax = axes[2][col]
            for kind, label in BROKER_LABELS.items():
                pts = sorted((r["rate"], r["p50_ms"], r["p99_ms"]) for r in latency["summary"]
                             if r["system"] == kind and r["fetch_wait_max_ms"] == fetch_wait)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-",
                            color=COLORS[label], label=f"{label} p50")
                    ax.plot([p[0] for p in pts], [p[2] for p in pts], "s--",
                            color=COLORS[label], label=f"{label} p99")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("records/s")
            ax.set_ylabel("end-to-end latency, ms")
            ax.set_title(f"latency (fetch.wait.max.ms={fetch_wait}; log-log)", fontsize=10)
            ax.legend(fontsize=7)
    else:
        for ax in axes[2]:
            ax.axis("off")
    dates = ", ".join(f"{name} {d['date'][:10]}" for name, d in
                      (("broker", broker), ("peers", peers), ("latency", latency)) if d)
    fig.suptitle(f"Odradek benchmarks (bench/results: {dates}; 2-CPU shared VM)", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"chart written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
