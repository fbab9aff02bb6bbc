"""Partitions benchmark: acks=all latency and throughput of a 3-broker cluster as the
partition count grows (issue 31, targets 1 and 2), Odradek against Apache Kafka.

Systems (``cluster_bench.py``'s, imported), fresh each round on 127.0.0.1, the one that
goes first alternating: a 3-broker Odradek cluster on a private ZooKeeper (``Cluster``,
default config) and, with ``--kafka``, a 3-node Apache Kafka 4.4 cluster
(``KafkaCluster``). One topic per partition count (RF 3, ``min.insync.replicas=2``),
made just before its loads (so beside the earlier counts' idle topics), loaded once
every replica is in the ISR and Metadata names every leader.

1. ``--load latency``: per count of ``--partitions`` and client of ``--clients`` (their
   order rotating by round), ``--rate`` records/s of 100 bytes paced for ``--warmup`` +
   ``--seconds`` s (the last ``--seconds`` measured), acks=all, linger 1 ms; latency =
   the send call to its acknowledgement. ``rdkafka``: confluent_kafka in a process of
   its own (latency_bench.py's pacing and settings: no idempotence, Nagle off), record i
   to partition i mod P, ``Message.latency()`` (to the delivery report, which the next
   ``poll(0)`` serves); librdkafka puts one partition in a ProduceRequest (its issue
   #1700), so over 30+ partitions at linger 1 ms its requests carry ~1 record each.
   ``franz``: ``bench/go``'s franz-go program (built on first use into
   ``.cache/go/bench``): franz's defaults (idempotent) but linger 1 ms, the same pacing,
   record i to partition i mod P. ``java``: Kafka's ``ProducerPerformance``
   (kafka-producer-perf-test) from scripts/fetch_jvm.sh's jars with
   ``--warmup-records``: Java's defaults (idempotent) but linger.ms=1, its sticky
   partitioner, whole-millisecond percentiles. Reported: achieved rate, p50, p99,
   p99.9, max, the brokers' CPU (3 processes, /proc) and the client's per 1,000
   records sent over the client's whole run; targets (Odradek): p50 <= 3 ms, p99 <= 10
   ms in every run, p99 <= Kafka's (same count, client and round).
2. ``--load throughput``: per count of ``--throughput-partitions``,
   ``cluster_bench.produce_load`` (librdkafka, linger.ms=5, acks=all, ``--records``
   round-robin after an acknowledged warm-up): records/s, broker CPU per record, x the
   1-partition rate (target >= 0.5), x Kafka's (>= 1.0).

Every process it starts is stopped by its pid at the end, on errors and on Ctrl-C; the
brokers' logs are scanned for errors and warnings before each cluster is removed.
Run: ``.venv/bin/python bench/partitions_bench.py [--kafka] [--rounds 3]`` (see
bench/README.md).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer

import cluster_bench as cb
from _common import finish, note, shown_path
from broker_bench import broker_machine_info, broker_machine_line, java_version
from cluster_bench import CLUSTER, KAFKA_CLUSTER, MIN_ISR, SINGLE, SIZE, check_interrupted
from latency_bench import CHUNK, latency_stats_ms
from odradek.devcluster import ZooKeeperServer
from odradek.devcluster.apache_kafka import KAFKA_VERSION, kafka_jars_present
from odradek.devcluster.jvm import REPO, JvmError, java_command
from odradek.devcluster.processes import spawn, stop_process

CLIENTS = ("rdkafka", "franz", "java")
SYSTEM_NAMES = {CLUSTER: "Odradek", KAFKA_CLUSTER: f"Kafka {KAFKA_VERSION}",
                SINGLE: "Odradek single"}
P50_TARGET_MS, P99_TARGET_MS = 3.0, 10.0
SCALE_TARGET, KAFKA_TARGET = 0.5, 1.0  # throughput: x the 1-partition rate, x Kafka's
SUSTAINED_FRACTION = 0.97
CLIENT_SLACK_S = 120.0  # beyond warm-up + seconds: start-up, first records, flush
PERF_MAIN = "org.apache.kafka.tools.ProducerPerformance"  # kafka-producer-perf-test.sh's
GO_SRC = Path(__file__).resolve().parent / "go"
GO_OUT = REPO / ".cache" / "go"  # scripts/fetch_go.sh's module and build caches
FRANZ_BIN = GO_OUT / "bench" / "franzbench"
_PERF_LINE = re.compile(
    r"(\d+)( steady state)? records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), "
    r"([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, "
    r"(\d+) ms 99th, (\d+) ms 99\.9th")
_RUN_NO = itertools.count(1)
_PROBLEM = re.compile(r"\bERROR\b|\bCRITICAL\b|Traceback")


# --- clients --------------------------------------------------------------------------


def rdkafka_main(conn: Connection, bootstrap: str, topic: str, partitions: int, rate: int,
                 seconds: float, warmup: float, value_bytes: int, linger_ms: float) -> None:
    """The rdkafka client, in a process of its own: paced, record i to i mod partitions."""
    errors: list[str] = []
    lat = array("q")
    lost_n = [0]

    def lost(err: Any) -> None:
        lost_n[0] += 1
        if len(errors) < 10:
            errors.append(str(err))

    def measured(err: Any, msg: Any) -> None:
        if err is not None:
            lost(err)
        else:
            lat.append(int(msg.latency() * 1e9))

    def warming(err: Any, _msg: Any) -> None:
        if err is not None:
            lost(err)

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
        "socket.nagle.disable": True, "compression.type": "none",
        "enable.idempotence": False,
        "error_cb": lambda err: errors.append(str(err)) if len(errors) < 10 else None,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000,
    })
    value = bytes(value_bytes)
    produce, now_ns = producer.produce, time.monotonic_ns
    for p in range(partitions):  # one acknowledged record each: every leader connected
        produce(topic, value, partition=p)
    if producer.flush(60):
        raise RuntimeError("rdkafka: first records not acknowledged in 60 s")
    interval_ns = 1e9 / rate
    total, warm = math.ceil(rate * (warmup + seconds)), math.ceil(rate * warmup)
    sent = max_lag = first = last = 0
    start = now_ns()
    while sent < total:
        now = now_ns()
        due = min(total, int((now - start) / interval_ns) + 1)
        if due <= sent:
            time.sleep((start + sent * interval_ns - now) / 1e9)
            continue
        if sent >= warm:
            max_lag = max(max_lag, int(now - (start + sent * interval_ns)))
        for _ in range(min(due - sent, CHUNK)):
            if sent == warm:
                first = now_ns()
            produce(topic, value, partition=sent % partitions,
                    on_delivery=measured if sent >= warm else warming)
            sent += 1
        last = now_ns()
        producer.poll(0)
    remaining = producer.flush(60)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    window = (last - first) / 1e9
    conn.send({"records": total - warm, "total": total, "setup_records": partitions,
               "achieved_rate": (total - warm - 1) / window if window > 0 else 0.0,
               "max_lag_ms": max_lag / 1e6, "lost": lost_n[0] + remaining,
               "errors": errors, "client_cpu_s": ru.ru_utime + ru.ru_stime,
               "lat_ns": lat.tobytes()})


def run_rdkafka(bootstrap: str, topic: str, partitions: int,
                args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("spawn")  # no fork of a process with librdkafka threads
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=rdkafka_main, daemon=True, args=(
        child, bootstrap, topic, partitions, args.rate, args.seconds, args.warmup,
        args.value_bytes, args.linger_ms))
    proc.start()
    assert proc.pid is not None
    cb._LIVE[proc.pid] = proc.kill
    try:
        deadline = time.monotonic() + args.warmup + args.seconds + CLIENT_SLACK_S
        while not parent.poll(0.1):
            check_interrupted()
            if not proc.is_alive():
                raise RuntimeError(f"rdkafka: the producer exited with {proc.exitcode}")
            if time.monotonic() > deadline:
                raise RuntimeError("rdkafka: no result in time")
        out: dict[str, Any] = parent.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        cb._LIVE.pop(proc.pid, None)
    out["lat_ns"] = array("q", out["lat_ns"])
    return out


def run_process(cmd: list[str], workdir: Path, name: str,
                timeout_s: float) -> tuple[int, float, str, str]:
    """Run ``cmd`` (odradek.devcluster's launcher: output to files, a session of its own),
    stopped by its pid on a timeout or interruption. Returns (exit code, its CPU
    seconds from wait4, stdout, stderr)."""
    name = f"{name}-{next(_RUN_NO)}"  # the launcher appends to a file of that name
    out, err = workdir / f"{name}.out", workdir / f"{name}.err"
    proc = spawn(cmd, out, stderr_path=err)
    cb._LIVE[proc.pid] = lambda: stop_process(proc, 10)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            check_interrupted()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: still running after {timeout_s:.0f} s")
            time.sleep(0.05)
    except BaseException:
        stop_process(proc, 10)
        raise
    finally:
        cb._LIVE.pop(proc.pid, None)
    return (proc.returncode, ru.ru_utime + ru.ru_stime, out.read_text(errors="replace"),
            err.read_text(errors="replace"))


def franz_binary(program: str = "franzbench") -> Path:
    """bench/go's ``cmd/<program>`` (franzbench; etl_bench.py's franzetl), built as
    scripts/fetch_go.sh builds the interop programs (module and build caches under
    .cache/go, no toolchain download) into .cache/go/bench when its sources are newer
    than the binary."""
    binary = FRANZ_BIN.with_name(program)
    sources = [*GO_SRC.rglob("*.go"), GO_SRC / "go.mod", GO_SRC / "go.sum"]
    if binary.exists() and binary.stat().st_mtime >= max(
            s.stat().st_mtime for s in sources):
        return binary
    if shutil.which("go") is None:
        raise RuntimeError("franz: needs Go (go 1.26+) to build bench/go")
    note(f"building {shown_path(str(binary))} from bench/go ...")
    env = {**os.environ, "GOMODCACHE": str(GO_OUT / "mod"), "GOCACHE": str(GO_OUT / "build"),
           "GOTOOLCHAIN": "local", "GOFLAGS": "-modcacherw"}
    built = subprocess.run(["go", "build", "-trimpath", "-o", str(binary),
                            f"./cmd/{program}"], cwd=GO_SRC, env=env, capture_output=True,
                           text=True, timeout=600)
    if built.returncode != 0:
        raise RuntimeError(f"franz: go build failed:\n{built.stderr[-2000:]}")
    return binary


def run_franz(bootstrap: str, topic: str, partitions: int, args: argparse.Namespace,
              workdir: Path) -> dict[str, Any]:
    cmd = [str(franz_binary()), "-bootstrap", bootstrap, "-topic", topic,
           "-partitions", str(partitions), "-rate", str(args.rate),
           "-seconds", str(args.seconds), "-warmup", str(args.warmup),
           "-value-bytes", str(args.value_bytes), "-linger", f"{args.linger_ms:g}ms"]
    rc, cpu, out, err = run_process(cmd, workdir, f"franz-{topic}",
                                    args.warmup + args.seconds + CLIENT_SLACK_S)
    line = next((x for x in reversed(out.splitlines()) if x.startswith("{")), None)
    r = json.loads(line) if line else {}
    if rc != 0 or "error" in r or not r:
        raise RuntimeError(f"franz: exit {rc}: {r.get('error', '')} {err[-1500:]}")
    us = r.pop("latencies_us")
    r["lat_ns"] = array("q", (x * 1000 for x in us if x >= 0))
    r.update(client_cpu_s=cpu, setup_records=partitions)
    return r


def run_java(bootstrap: str, topic: str, partitions: int, args: argparse.Namespace,
             workdir: Path) -> dict[str, Any]:
    total, warm = math.ceil(args.rate * (args.warmup + args.seconds)), math.ceil(
        args.rate * args.warmup)
    cmd = java_command(PERF_MAIN, "--topic", topic, "--num-records", str(total),
                       "--record-size", str(args.value_bytes), "--throughput", str(args.rate),
                       *(["--warmup-records", str(warm)] if warm else []),
                       "--producer-props", "acks=all", f"linger.ms={round(args.linger_ms)}",
                       f"bootstrap.servers={bootstrap}")
    rc, cpu, out, err = run_process(cmd, workdir, f"java-{topic}",
                                    args.warmup + args.seconds + CLIENT_SLACK_S)
    found = {bool(m.group(2)): m for m in _PERF_LINE.finditer(out)}
    m = found.get(bool(warm)) or found.get(False)
    if rc != 0 or m is None:
        raise RuntimeError(f"java: exit {rc}, no summary line: {(out + err)[-1500:]}")
    return {"records": int(m.group(1)), "total": total, "setup_records": 0,
            "achieved_rate": float(m.group(3)), "client_cpu_s": cpu, "lost": 0,
            "errors": [x for x in err.splitlines() if "ERROR" in x or "Exception" in x][:10],
            "perf_ms": {"mean_ms": float(m.group(4)), "max_ms": float(m.group(5)),
                        "p50_ms": int(m.group(6)), "p95_ms": int(m.group(7)),
                        "p99_ms": int(m.group(8)), "p99_9_ms": int(m.group(9))}}


def latency_run(client: str, cluster: Any, topic: str, partitions: int,
                args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One client's paced run on ``topic``: its row."""
    cpu0, t0 = cluster.cpu_s(), time.monotonic()
    if client == "rdkafka":
        r = run_rdkafka(cluster.bootstrap, topic, partitions, args)
    elif client == "franz":
        r = run_franz(cluster.bootstrap, topic, partitions, args, workdir)
    else:
        r = run_java(cluster.bootstrap, topic, partitions, args, workdir)
    broker_cpu, wall = cluster.cpu_s() - cpu0, time.monotonic() - t0
    lat = r.pop("lat_ns", array("q"))
    stats = r.pop("perf_ms", None) or latency_stats_ms(lat)
    sent = r["total"] + r["setup_records"]
    r.update({k: round(v, 3) for k, v in stats.items()})
    r.update(achieved_rate=round(r["achieved_rate"]),
             sustained=r["achieved_rate"] >= SUSTAINED_FRACTION * args.rate
             and not r["lost"],
             broker_cpu_s=round(broker_cpu, 3), wall_s=round(wall, 2),
             broker_cpu_s_per_1k=round(broker_cpu / sent * 1000, 4),
             client_cpu_s_per_1k=round(r["client_cpu_s"] / sent * 1000, 4),
             broker_cpu_util=round(broker_cpu / wall, 3))
    return r


# --- clusters -------------------------------------------------------------------------


def make_topic(cluster: Any, name: str, partitions: int) -> float:
    """Topic of the system's replication factor (RF 3, min.insync.replicas=2 on a
    cluster; RF 1 on ``SingleNode``); waits for every replica in the ISR and a leader in
    Metadata for every partition. Returns the seconds it took."""
    t0 = time.monotonic()
    rf = cluster.replication_factor
    cb.create_topic(cluster.bootstrap, name, partitions, rf,
                    {"min.insync.replicas": str(MIN_ISR)} if rf > 1 else {})
    timeout = cb.START_TIMEOUT_S + partitions * 0.1  # 3,000 partitions on 2 busy cores
    cluster.wait_for(lambda: cluster.full_isr(name, partitions), timeout,
                     f"every replica of {name} in sync")
    cluster.wait_for(lambda: min(cluster.metadata_leaders(name, partitions)) >= 0, timeout,
                     f"a leader for every partition of {name}")
    return round(time.monotonic() - t0, 2)


def log_problems(cluster: Any) -> dict[str, Any]:
    """ERROR / CRITICAL lines and tracebacks in each broker's log (count, first 5), and
    its warnings (count, first 3)."""
    out: dict[str, Any] = {}
    paths = ({n: node.log_file for n, node in cluster.kafka.nodes.items()}
             if isinstance(cluster, cb.KafkaCluster) else
             {n: b.log_path for n, b in cluster.brokers.items()})
    for n, path in paths.items():
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        hits = [x[:300] for x in lines if _PROBLEM.search(x)]
        warns = [x[:300] for x in lines if re.search(r"\bWARN(ING)?\b", x)]
        if hits or warns:
            out[str(n)] = {"count": len(hits), "first": hits[:5],
                           "warnings": len(warns), "first_warnings": warns[:3]}
    return out


def problem_lines(results: dict[str, Any], name: Callable[[str], str],
                  describe: Callable[[dict[str, Any]], str]) -> list[str]:
    """A report's closing lines: each broker log with ERROR lines or tracebacks
    (``on_cluster``'s ``log_problems``), then each failed run (``describe(run)``: which
    load it was); ``name(system)`` names a system."""
    lines = []
    for entry in results["clusters"]:
        for node, prob in entry["log_problems"].items():
            if prob["count"]:
                lines.append(f"- round {entry['round']}, {name(entry['system'])} broker "
                             f"{node}: {prob['count']} ERROR/traceback line(s) in its log, "
                             f"first: `{prob['first'][0][:200]}`")
    for r in results["runs"]:
        if "failed" in r:
            lines.append(f"- failed: round {r['round']}, {name(r['system'])}, {describe(r)}: "
                         f"{r['failed'][:300]}")
    return lines


def on_cluster(kind: str, zk: ZooKeeperServer, tmp_root: str,
               loads: Callable[[Any, list[dict[str, Any]]], None]) -> dict[str, Any]:
    """A fresh cluster of ``kind`` (default config; ``SINGLE``: one broker),
    ``loads(cluster, rows)``, then the cluster stopped, its logs scanned and removed."""
    cluster = (cb.SingleNode(tmp_root) if kind == SINGLE
               else cb.new_cluster(kind, zk, tmp_root, {}))
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.monotonic()
        cluster.start()
        note(f"  {SYSTEM_NAMES[kind]} cluster up in {time.monotonic() - t0:.1f} s")
        loads(cluster, rows)
    except (RuntimeError, KafkaException, OSError) as exc:
        note(f"  {SYSTEM_NAMES[kind]} cluster failed: {str(exc)[:1500]}")
        rows.append({"failed": str(exc)[:2000], "cluster_failed": True})
    finally:
        if isinstance(cluster, cb.KafkaCluster):
            cluster._admin = None  # its polling client would log every refused reconnect
        codes = cluster.stop()
        problems = log_problems(cluster)
        cluster.remove()
    if any(codes.values()):
        note(f"  warning: brokers exited with {codes}")
    if problems:
        note(f"  broker logs: {json.dumps(problems)[:1500]}")
    return {"rows": rows, "exit_codes": codes, "log_problems": problems}


def latency_loads(cluster: Any, rows: list[dict[str, Any]], args: argparse.Namespace,
                  workdir: Path, clients: Sequence[str]) -> None:
    for count in args.partitions:
        topic = f"lat-{count}"
        made = make_topic(cluster, topic, count)
        note(f"  topic {topic}: {count} partitions ready in {made} s")
        for client in clients:
            check_interrupted()
            try:
                r = latency_run(client, cluster, topic, count, args, workdir)
                note(f"    {client}: {r['achieved_rate']:,}/s, p50 {r['p50_ms']:.2f} p99 "
                     f"{r['p99_ms']:.2f} p99.9 {r['p99_9_ms']:.2f} max {r['max_ms']:.2f} ms; "
                     f"broker CPU {r['broker_cpu_s_per_1k']:.3f} s/1k, client "
                     f"{r['client_cpu_s_per_1k']:.3f} s/1k")
            except (RuntimeError, KafkaException, OSError, JvmError) as exc:
                note(f"    {client}: failed: {str(exc)[:1500]}")
                r = {"failed": str(exc)[:2000]}
            rows.append({**r, "partitions": count, "client": client, "topic_ready_s": made})


def throughput_loads(cluster: Any, rows: list[dict[str, Any]],
                     args: argparse.Namespace) -> None:
    for count in args.throughput_partitions:
        check_interrupted()
        topic = f"tput-{count}"
        made = make_topic(cluster, topic, count)
        cb.WARMUP_RECORDS = max(1, args.throughput_warmup_records // count)  # per partition
        try:
            r = cb.produce_load(cluster.bootstrap, topic, count, args.records,
                                args.value_bytes, "all", cluster.cpu_by_node)
            r.pop("end_offsets")
            note(f"    {count} partitions: {r['records_s']:,} records/s, broker CPU "
                 f"{r['broker_cpu_s_per_m']:.2f} us/record")
        except (RuntimeError, KafkaException) as exc:
            note(f"    {count} partitions: failed: {str(exc)[:1500]}")
            r = {"failed": str(exc)[:2000]}
        rows.append({**r, "partitions": count, "topic_ready_s": made,
                     "warmup_records_per_partition": cb.WARMUP_RECORDS})


# --- summary and report ---------------------------------------------------------------


def _ok(runs: list[dict[str, Any]], failed: bool = False,
        **match: Any) -> list[dict[str, Any]]:
    """The runs matching ``match`` that succeeded (or, with ``failed``, did not)."""
    return [r for r in runs if ("failed" in r) == failed
            and all(r.get(k) == v for k, v in match.items())]


def summarize_latency(runs: list[dict[str, Any]], args: argparse.Namespace,
                      systems: Sequence[str]) -> list[dict[str, Any]]:
    """Per (system, count, client): the worst run's percentiles (the targets hold in
    every run), medians of CPU; Odradek/Kafka p99 per round, the largest shown."""
    out = []
    for count in args.partitions:
        for client in args.clients:
            for kind in systems:
                mine = _ok(runs, system=kind, partitions=count, client=client)
                row: dict[str, Any] = {"system": kind, "partitions": count, "client": client,
                                       "runs": len(mine), "failed_runs": len(_ok(
                                           runs, True, system=kind, partitions=count,
                                           client=client))}
                if mine:
                    row.update({k: max(r[k] for r in mine) for k in
                                ("p50_ms", "p99_ms", "p99_9_ms", "max_ms")})
                    row["achieved_rate"] = min(r["achieved_rate"] for r in mine)
                    row["sustained"] = all(r["sustained"] for r in mine)
                    for k in ("broker_cpu_s_per_1k", "client_cpu_s_per_1k"):
                        row[k] = statistics.median(r[k] for r in mine)
                if kind == KAFKA_CLUSTER:
                    ratios = [o["p99_ms"] / k["p99_ms"] for o in
                              _ok(runs, system=CLUSTER, partitions=count, client=client)
                              for k in mine if k["round"] == o["round"] and k["p99_ms"]]
                    row["ratio_p99_all"] = [round(x, 3) for x in ratios]
                    row["ratio_p99_worst"] = round(max(ratios), 3) if ratios else None
                out.append(row)
    return out


def summarize_throughput(runs: list[dict[str, Any]], args: argparse.Namespace,
                         systems: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for count in args.throughput_partitions:
        for kind in systems:
            mine = _ok(runs, system=kind, partitions=count)
            row: dict[str, Any] = {"system": kind, "partitions": count,
                                   "failed_runs": len(_ok(runs, True, system=kind,
                                                          partitions=count))}
            if mine:
                row.update(records_s=statistics.median(r["records_s"] for r in mine),
                           records_s_all=[r["records_s"] for r in mine],
                           broker_cpu_us_per_record=statistics.median(
                               r["broker_cpu_s_per_m"] for r in mine),
                           client_cpu_us_per_record=statistics.median(
                               r["client_cpu_s_per_m"] for r in mine))
            others = {"vs_1_partition": _ok(runs, system=kind, partitions=1)}
            if kind == CLUSTER and KAFKA_CLUSTER in systems:
                others["vs_kafka"] = _ok(runs, system=KAFKA_CLUSTER, partitions=count)
            for name, base in others.items():
                xs = [r["records_s"] / o["records_s"] for r in mine for o in base
                      if o["round"] == r["round"]]
                row[f"ratio_{name}"] = round(statistics.median(xs), 3) if xs else None
                row[f"ratio_{name}_all"] = [round(x, 3) for x in xs]
            out.append(row)
    return out


def _met(value: float | None, ok: bool) -> str:
    return "-" if value is None else f"**{value:.2f}** ({'met' if ok else 'NOT met'})"


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    lines = [f"machine: {broker_machine_line(m)}, ZooKeeper {m.get('zookeeper')}, "
             f"{m.get('java') or 'no java'}",
             f"clusters: 3 brokers each, default config, topic RF {SIZE}, "
             f"min.insync.replicas={MIN_ISR}, one topic per partition count; {p['rounds']} "
             "round(s), the system that goes first alternating", ""]
    if p["load"] == "latency":
        lines += [
            f"latency: {p['rate']:,} records/s of {p['value_bytes']} bytes, acks=all, linger "
            f"{p['linger_ms']:g} ms, {p['seconds']:g} s measured after {p['warmup']:g} s; "
            "latency = send call to acknowledgement; rdkafka and franz: record i to "
            "partition i mod P; java (kafka-producer-perf-test): its sticky partitioner, "
            "whole-ms percentiles; percentiles are the worst run's; CPU per 1k records "
            "sent, over the client's whole run (median of runs); targets (Odradek): "
            f"p50 <= {P50_TARGET_MS:g} ms, p99 <= {P99_TARGET_MS:g} ms in every run", "",
            "| system | partitions | client | achieved/s | p50 ms | p99 ms | p99.9 ms "
            "| max ms | broker CPU s/1k | client CPU s/1k |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results["summary"]:
            head = f"| {SYSTEM_NAMES[r['system']]} | {r['partitions']:,} | {r['client']} "
            if not r["runs"]:
                lines.append(head + "| failed | | | | | | |")
                continue
            p50, p99 = f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"
            if r["system"] == CLUSTER:
                p50 = _met(r["p50_ms"], r["p50_ms"] <= P50_TARGET_MS)
                p99 = _met(r["p99_ms"], r["p99_ms"] <= P99_TARGET_MS)
            rate = f"{r['achieved_rate']:,}" + ("" if r["sustained"] else " (not sustained)")
            lines.append(head + f"| {rate} | {p50} | {p99} | {r['p99_9_ms']:.2f} "
                         f"| {r['max_ms']:.2f} | {r['broker_cpu_s_per_1k']:.3f} "
                         f"| {r['client_cpu_s_per_1k']:.3f} |")
        kafka = [r for r in results["summary"] if "ratio_p99_worst" in r]
        if kafka:
            lines += ["", "Odradek p99 / Kafka p99 (same count, client and round; target "
                          "<= 1.0 in every round):", "",
                      "| partitions | client | worst round | per round |", "|---:|---|---:|---|"]
            for r in kafka:
                w = r["ratio_p99_worst"]
                lines.append(f"| {r['partitions']:,} | {r['client']} "
                             f"| {_met(w, w is not None and w <= 1.0)} "
                             f"| {', '.join(f'{x:.2f}' for x in r['ratio_p99_all'])} |")
    else:
        lines += [
            f"throughput: cluster_bench.produce_load, {p['records']:,} records of "
            f"{p['value_bytes']} bytes round-robin, librdkafka linger.ms=5, "
            "batch.num.messages=100,000, acks=all, after an acknowledged warm-up of "
            f"{p['throughput_warmup_records']:,} records spread over the partitions; medians "
            f"of rounds; targets: >= {SCALE_TARGET}x the 1-partition rate, >= "
            f"{KAFKA_TARGET}x Kafka's", "",
            "| system | partitions | records/s | broker CPU us/record | client CPU us/record "
            "| x 1-partition rate | Odradek / Kafka |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in results["summary"]:
            head = f"| {SYSTEM_NAMES[r['system']]} | {r['partitions']:,} "
            if "records_s" not in r:
                lines.append(head + "| failed | | | | |")
                continue
            scale = r["ratio_vs_1_partition"]
            scale_s = "-" if scale is None or r["partitions"] == 1 else (
                _met(scale, scale >= SCALE_TARGET) if r["system"] == CLUSTER else f"{scale:.2f}")
            vk = r.get("ratio_vs_kafka")
            lines.append(head + f"| {r['records_s']:,.0f} | {r['broker_cpu_us_per_record']:.2f} "
                         f"| {r['client_cpu_us_per_record']:.2f} | {scale_s} "
                         f"| {_met(vk, vk is not None and vk >= KAFKA_TARGET)} |")
    lines += problem_lines(results, SYSTEM_NAMES.__getitem__, lambda r: (
        f"{r.get('partitions', '-')} partitions, {r.get('client', '')}"))
    return "\n".join(lines).rstrip() + "\n"


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--load", choices=("latency", "throughput"), default="latency")
    ap.add_argument("--kafka", action="store_true", help="a 3-node Apache Kafka cluster too")
    ap.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    ap.add_argument("--partitions", type=cb.int_list, default=[1, 30, 300, 1000],
                    help="latency: partition counts (default 1,30,300,1000)")
    ap.add_argument("--clients", default=",".join(CLIENTS),
                    help=f"latency: clients, comma-separated (default {','.join(CLIENTS)})")
    ap.add_argument("--rate", type=int, default=10_000, help="latency: records/s (10,000)")
    ap.add_argument("--seconds", type=float, default=10.0, help="latency: measured s (10)")
    ap.add_argument("--warmup", type=float, default=2.0, help="latency: paced s before (2)")
    ap.add_argument("--linger-ms", type=float, default=1.0, help="latency: linger (1 ms)")
    ap.add_argument("--throughput-partitions", type=cb.int_list, default=[1, 300, 3000],
                    help="throughput: partition counts (default 1,300,3000)")
    ap.add_argument("--records", type=int, default=300_000, help="throughput: records (300k)")
    ap.add_argument("--throughput-warmup-records", type=int, default=30_000,
                    help="throughput: warm-up records over all partitions (>= 1 each; 30k)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--dir", default="/tmp", help="temporary data dirs (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "partitions.json"),
                    help="JSON results (default bench/results/partitions.json)")
    args = ap.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if (set(args.clients) - set(CLIENTS) or not args.clients or args.rounds < 1
            or args.rate < 1 or args.records < 1 or args.value_bytes < 1):
        ap.error(f"--clients from {','.join(CLIENTS)}; rounds, rate, records, value "
                 "size >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.kafka and not kafka_jars_present():
        raise SystemExit("--kafka needs Apache Kafka's jars: bash scripts/fetch_jvm.sh")
    if args.load == "latency" and "franz" in args.clients:
        franz_binary()  # fail early when it cannot be built
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, cb._raise_interrupt)  # stop what was started, then exit
    systems = (CLUSTER, KAFKA_CLUSTER) if args.kafka else (CLUSTER,)
    tmp_root = tempfile.mkdtemp(prefix="odradek-partitions-bench-", dir=args.dir)
    workdir = Path(tmp_root) / "clients"
    workdir.mkdir()
    results: dict[str, Any] = {
        "benchmark": "partitions",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(java=java_version()),
        "params": {**{k: v for k, v in vars(args).items() if k not in ("dir", "out")},
                   "systems": list(systems), "replication_factor": SIZE,
                   "min_insync_replicas": MIN_ISR, "kafka_version": KAFKA_VERSION,
                   "franz_go": "v1.22.3 (bench/go/go.mod)"},
        "clusters": [], "runs": [],
    }
    zk: ZooKeeperServer | None = None
    try:
        zk = ZooKeeperServer(Path(tmp_root) / "zookeeper")
        zk.start()
        cb._LIVE[zk.pid] = zk.stop
        results["machine"]["zookeeper"] = cb.zookeeper_version(zk)
        for i in range(args.rounds):
            for kind in (systems if i % 2 == 0 else systems[::-1]):
                check_interrupted()
                note(f"round {i + 1}/{args.rounds}: {SYSTEM_NAMES[kind]}, {args.load} ...")
                shift = i % len(args.clients)  # the clients take turns going first
                clients = args.clients[shift:] + args.clients[:shift]
                loads = (partial(latency_loads, args=args, workdir=workdir, clients=clients)
                         if args.load == "latency" else partial(throughput_loads, args=args))
                got = on_cluster(kind, zk, tmp_root, loads)
                for r in got.pop("rows"):
                    results["runs"].append({**r, "system": kind, "round": i + 1})
                results["clusters"].append({**got, "system": kind, "round": i + 1})
    finally:
        cb.tear_down(zk, tmp_root)
    summarize = summarize_latency if args.load == "latency" else summarize_throughput
    results["summary"] = summarize(results["runs"], args, systems)
    results["brokers_killed_after_ignoring_sigterm"] = cb.HUNG
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
