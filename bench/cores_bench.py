"""Cores benchmark: does a second Odradek broker on the same host raise records/s (issue
31, target 4, "every core of a host")?

Odradek is one Python process per broker, so one broker keeps about one core busy; ``odradek
cluster up --brokers-per-host 2`` runs two on a host instead, each its own process and data
directory, both with ``broker.rack`` set to the host. This asks, on this machine, whether
that pays for a topic of 2+ partitions, and what a record costs in broker CPU.

Systems, fresh each round on 127.0.0.1 (``cluster_bench.py``'s private ZooKeeper and
``Cluster``, the brokers' default config, every broker with ``broker.rack=host-1``), the
one that goes first alternating by round: ``one``, a 1-broker cluster, and ``two``, a
2-broker cluster. Per count of ``--partitions`` (2,4) and per load, a fresh topic of
replication factor 1, loaded once Metadata names a leader for every partition (with two
brokers the partitions' leaders are spread over both; the report lists them):

1. ``raw``: the client costs little, so the rate is the brokers'. One sender
   process per partition (multiprocessing, spawn), connected to its partition's leader,
   sends pre-built batches of ``--per-batch`` records of ``--value-bytes`` bytes in raw
   Produce v3 requests (acks=1, one partition per request, ``scale_bench.py``'s
   ``raw_produce_frames`` and ``send_raw_produce``: ``--in-flight`` requests outstanding,
   every answer decoded), ``--raw-records`` / P records each after an untimed warm-up of
   ``--raw-warmup-requests`` requests. The senders start together (an event) and are
   timed from it to the last one done; afterwards the end offsets must add up. On a
   2-core host the senders share the cores with the brokers: with batches of 1,000
   records (the default) they take about half a core, with 100 about two thirds of one,
   which leaves a second broker no core to use.
2. ``rdkafka``: ``cluster_bench.produce_load`` (one librdkafka producer in this process,
   linger.ms=5, batch.num.messages=100,000, acks=1, ``--records`` records round-robin
   after an acknowledged warm-up of 1,000 per partition).

Reported per (load, partitions) and system: records/s, the brokers' CPU seconds per million
records (from /proc, summed over the brokers, and by broker), the client's (the senders'
own CPU for ``raw``, this process's for ``rdkafka``) and how many CPUs each kept busy;
and two/one for records/s and for broker CPU per record, medians of per-round ratios.

Every process it starts is stopped by its pid at the end, on errors and on Ctrl-C; the
brokers' logs are scanned for errors and warnings before each cluster is removed.
Run: ``.venv/bin/python bench/cores_bench.py [--rounds 3]`` (see bench/README.md).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

import cluster_bench as cb
from _common import finish, note, shown_path
from broker_bench import broker_machine_info, broker_machine_line
from cluster_bench import check_interrupted
from odradek.devcluster import ZooKeeperServer, host_racks
from partitions_bench import log_problems, problem_lines
from scale_bench import RAW_IN_FLIGHT, REQUEST_TIMEOUT_S, raw_produce_frames, send_raw_produce

SYSTEMS = {"one": 1, "two": 2}  # system -> brokers on this host
LOADS = ("raw", "rdkafka")
SENDER_READY_TIMEOUT_S = 120.0  # spawn, imports, connection, warm-up
SENDER_MIN_RATE = 5_000  # records/s below which a raw run is declared stuck


# --- raw load -------------------------------------------------------------------------


def sender_main(conn: Connection, go: Any, port: int, topic: str, partition: int,
                records: int, value_bytes: int, per_batch: int, in_flight: int,
                warmup_requests: int) -> None:
    """One raw sender, in a process of its own: connect to ``partition``'s leader on
    ``port``, send the warm-up, say ready, wait for ``go``, send ``records`` records,
    report its timing and CPU (or the error)."""
    try:
        value = os.urandom(value_bytes)
        frames, requests = raw_produce_frames([(topic, partition)], records, value,
                                              per_batch, 1)
        with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT_S) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            send_raw_produce(sock, frames, 0, warmup_requests, in_flight)
            conn.send({"ready": True})
            go.wait()
            ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            send_raw_produce(sock, frames, warmup_requests, requests, in_flight)
            t1, ru1 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
        conn.send({"start": t0, "end": t1, "requests": requests,
                   "records": requests * per_batch,
                   "warmup_records": warmup_requests * per_batch,
                   "cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)})
    except BaseException as exc:  # the parent reports it
        conn.send({"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"})




def raw_load(cluster: cb.Cluster, topic: str, partitions: int, leaders: list[int],
             args: argparse.Namespace) -> dict[str, Any]:
    """``partitions`` sender processes, one per partition, each to its leader's port,
    started together; records/s from the start to the last one done."""
    ctx = mp.get_context("spawn")  # as the other benches: no fork of librdkafka threads
    go = ctx.Event()
    per_partition = args.raw_records // partitions
    pipes: list[Connection] = []
    procs: list[Any] = []
    try:
        for p, leader in enumerate(leaders):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=sender_main, daemon=True, args=(
                child, go, cluster.node(leader).port, topic, p, per_partition,
                args.value_bytes, args.per_batch, args.in_flight, args.raw_warmup_requests))
            proc.start()
            assert proc.pid is not None
            cb._LIVE[proc.pid] = proc.kill
            pipes.append(parent)
            procs.append(proc)
        cb.receive_all(pipes, procs, time.monotonic() + SENDER_READY_TIMEOUT_S, "the warm-up",
                       "raw sender")
        cpu0 = cluster.cpu_by_node()
        t0 = time.monotonic()
        go.set()
        done = cb.receive_all(pipes, procs, t0 + 60 + args.raw_records / SENDER_MIN_RATE,
                              "the timed records", "raw sender")
        t1 = max(d["end"] for d in done)
        cpu1 = cluster.cpu_by_node()
    finally:
        go.set()  # a sender still waiting ends (it is killed below if it does not)
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
            cb._LIVE.pop(proc.pid, None)
    n = sum(d["records"] for d in done)
    warm = sum(d["warmup_records"] for d in done)
    ends = cb.end_offsets(cluster.bootstrap, topic, partitions)
    if sum(ends) != n + warm:
        raise RuntimeError(f"raw: end offsets {ends} add up to {sum(ends):,}, not {n:,} "
                           f"+ {warm:,} of warm-up")
    seconds = t1 - t0
    sender_cpu = sum(d["cpu_s"] for d in done)
    out = _figures(n, seconds, cpu0, cpu1)
    out.update(client_cpu_s_per_m=round(sender_cpu / (n / 1e6), 3),
               client_cpu_util=round(sender_cpu / seconds, 3),
               sender_seconds=[round(d["end"] - d["start"], 3) for d in done],
               start_skew_ms=round((max(d["start"] for d in done) - t0) * 1000, 1),
               end_offsets=ends, warmup_records=warm)
    return out


def _figures(n: int, seconds: float, cpu0: dict[int, float],
             cpu1: dict[int, float]) -> dict[str, Any]:
    """records/s and the brokers' CPU, as ``cluster_bench.produce_load`` reports them."""
    by_broker = {b: cpu1[b] - cpu0[b] for b in cpu1}
    broker_cpu, m = sum(by_broker.values()), n / 1e6
    return {"records": n, "seconds": round(seconds, 4), "records_s": round(n / seconds),
            "broker_cpu_s": round(broker_cpu, 3),
            "broker_cpu_s_per_m": round(broker_cpu / m, 3),
            "broker_cpu_s_per_m_by_broker": {str(b): round(c / m, 3)
                                             for b, c in by_broker.items()},
            "broker_cpu_util": round(broker_cpu / seconds, 3)}


# --- clusters -------------------------------------------------------------------------


def make_topic(cluster: cb.Cluster, name: str, partitions: int) -> list[int]:
    """A topic of replication factor 1; waits for a leader in Metadata for every
    partition. Returns the leaders."""
    cb.create_topic(cluster.bootstrap, name, partitions, 1)
    cluster.wait_for(lambda: min(cluster.metadata_leaders(name, partitions)) >= 0,
                     cb.START_TIMEOUT_S, f"a leader for every partition of {name}")
    return cluster.metadata_leaders(name, partitions)


def loads_on(cluster: cb.Cluster, args: argparse.Namespace, loads: Sequence[str],
             rows: list[dict[str, Any]]) -> None:
    for count in args.partitions:
        for load in loads:
            check_interrupted()
            topic = f"{load}-{count}"
            r: dict[str, Any]
            try:
                leaders = make_topic(cluster, topic, count)
                if load == "raw":
                    r = raw_load(cluster, topic, count, leaders, args)
                else:
                    r = cb.produce_load(cluster.bootstrap, topic, count, args.records,
                                        args.value_bytes, 1, cluster.cpu_by_node)
                    r["client_cpu_util"] = round(
                        r["client_cpu_s_per_m"] * r["records"] / 1e6 / r["seconds"], 3)
                r["leaders"] = leaders
                note(f"    {load}, {count} partitions (leaders {leaders}): "
                     f"{r['records_s']:,} records/s, broker CPU {r['broker_cpu_s_per_m']:.2f} "
                     f"s per M (by broker {r['broker_cpu_s_per_m_by_broker']}), client "
                     f"{r['client_cpu_s_per_m']:.2f} s per M; busy CPUs: brokers "
                     f"{r['broker_cpu_util']:.2f}, client {r['client_cpu_util']:.2f}")
            except (RuntimeError, KafkaException, OSError) as exc:
                note(f"    {load}, {count} partitions: failed: {str(exc)[:1500]}")
                r = {"failed": str(exc)[:2000]}
            rows.append({**r, "load": load, "partitions": count})


def on_cluster(size: int, zk: ZooKeeperServer, tmp_root: str, args: argparse.Namespace,
               loads: Sequence[str]) -> dict[str, Any]:
    """A fresh cluster of ``size`` brokers on one host (all in rack ``host-1``:
    ``host_racks``), the loads, then the cluster stopped, its logs scanned and removed."""
    cluster = cb.Cluster(zk, tmp_root, {}, size=size,
                         node_settings=host_racks(size, size))
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.monotonic()
        cluster.start()
        note(f"  {size} broker(s) up in {time.monotonic() - t0:.1f} s")
        loads_on(cluster, args, loads, rows)
    except (RuntimeError, KafkaException, OSError) as exc:
        note(f"  cluster failed: {str(exc)[:1500]}")
        rows.append({"failed": str(exc)[:2000], "cluster_failed": True})
    finally:
        codes = cluster.stop()
        problems = log_problems(cluster)
        cluster.remove()
    if any(codes.values()):
        note(f"  warning: brokers exited with {codes}")
    if problems:
        note(f"  broker logs: {str(problems)[:1500]}")
    return {"rows": rows, "exit_codes": codes, "log_problems": problems}


# --- summary and report ---------------------------------------------------------------


def summarize(runs: list[dict[str, Any]], args: argparse.Namespace,
              loads: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for load in loads:
        for count in args.partitions:
            row: dict[str, Any] = {"load": load, "partitions": count}
            for system in SYSTEMS:
                mine = [r for r in runs if r.get("load") == load and r.get("partitions") == count
                        and r["system"] == system and "failed" not in r]
                failed = sum(1 for r in runs if r.get("load") == load
                             and r.get("partitions") == count and r["system"] == system
                             and "failed" in r)
                row[system] = {"failed_runs": failed} if not mine else {
                    **{k: statistics.median(r[k] for r in mine) for k in (
                        "records_s", "broker_cpu_s_per_m", "client_cpu_s_per_m",
                        "broker_cpu_util", "client_cpu_util")},
                    "records_s_all": [r["records_s"] for r in mine],
                    "broker_cpu_s_per_m_by_broker": [r["broker_cpu_s_per_m_by_broker"]
                                                     for r in mine],
                    "leaders": [r["leaders"] for r in mine], "failed_runs": failed}
            for name, key in (("throughput", "records_s"), ("cpu_per_m", "broker_cpu_s_per_m")):
                xs = cb.round_ratios(runs, "two", "one", key, load=load, partitions=count)
                row[f"ratio_{name}"] = cb._median(xs)
                row[f"ratio_{name}_all"] = [round(x, 3) for x in xs]
            out.append(row)
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"**{value:.2f}**"


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    lines = [
        f"machine: {broker_machine_line(m)}, ZooKeeper {m.get('zookeeper')}",
        "systems: `one` = 1 Odradek broker, `two` = 2 brokers, on this host (each its own "
        f"process and data dir, broker.rack=host-1), the brokers' default config, a private "
        f"ZooKeeper; topics RF 1, one per (load, partition count); {p['rounds']} round(s), "
        "fresh clusters each, the system that goes first alternating; medians of rounds, "
        "two/one ratios are medians of per-round ratios",
        f"raw: {p['raw_records']:,} records of {p['value_bytes']} bytes, one sender process "
        f"per partition to its leader, pre-built batches of {p['per_batch']} records in "
        f"Produce v3 (acks=1, one partition per request, {p['in_flight']} in flight), "
        "started together; rdkafka: cluster_bench.produce_load, "
        f"{p['records']:,} records round-robin, one librdkafka producer (linger.ms=5, "
        "acks=1) in the bench's process; CPU s per M records: brokers summed (by broker), "
        "client = the senders' own CPU (raw) or the producer's process (rdkafka)", "",
        "| load | partitions | one: records/s | two: records/s | two/one records/s "
        "| one: broker CPU s/M | two: broker CPU s/M (by broker) | two/one CPU per record "
        "| client CPU s/M one / two | busy CPUs one / two: brokers + client |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|---|"]
    for row in results["summary"]:
        one, two = row["one"], row["two"]
        head = f"| {row['load']} | {row['partitions']} "
        if "records_s" not in one or "records_s" not in two:
            shown = [f"{r['records_s']:,.0f}" if "records_s" in r else "failed"
                     for r in (one, two)]
            lines.append(head + f"| {shown[0]} | {shown[1]} | | | | | | |")
            continue
        by = "; ".join(", ".join(f"{b}: {c:.2f}" for b, c in d.items())
                       for d in two["broker_cpu_s_per_m_by_broker"])
        lines.append(
            head + f"| {one['records_s']:,.0f} | {two['records_s']:,.0f} "
            f"| {_x(row['ratio_throughput'])} | {one['broker_cpu_s_per_m']:.2f} "
            f"| {two['broker_cpu_s_per_m']:.2f} ({by}) | {_x(row['ratio_cpu_per_m'])} "
            f"| {one['client_cpu_s_per_m']:.2f} / {two['client_cpu_s_per_m']:.2f} "
            f"| {one['broker_cpu_util']:.2f} + {one['client_cpu_util']:.2f} / "
            f"{two['broker_cpu_util']:.2f} + {two['client_cpu_util']:.2f} |")
    lines.append("")
    for row in results["summary"]:
        for system in SYSTEMS:
            r = row[system]
            if "records_s_all" in r:
                lines.append(f"- {row['load']}, {row['partitions']} partitions, {system}: "
                             "records/s per round "
                             + ", ".join(f"{x:,}" for x in r["records_s_all"])
                             + f"; leaders {', '.join(str(x) for x in r['leaders'])}"
                             + (f"; {r['failed_runs']} run(s) failed" if r["failed_runs"]
                                else ""))
    lines += problem_lines(results, str, lambda r: (
        f"{r.get('load', '-')}, {r.get('partitions', '-')} partitions"))
    return "\n".join(lines).rstrip() + "\n"


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    ap.add_argument("--partitions", type=cb.int_list, default=[2, 4],
                    help="partition counts, comma-separated (default 2,4)")
    ap.add_argument("--loads", default=",".join(LOADS),
                    help=f"loads, comma-separated (default {','.join(LOADS)})")
    ap.add_argument("--raw-records", type=int, default=40_000_000,
                    help="raw: records per run, split over the partitions (40,000,000)")
    ap.add_argument("--per-batch", type=int, default=1000,
                    help="raw: records per batch, one batch per request (1000)")
    ap.add_argument("--in-flight", type=int, default=RAW_IN_FLIGHT,
                    help=f"raw: requests outstanding per sender ({RAW_IN_FLIGHT})")
    ap.add_argument("--raw-warmup-requests", type=int, default=10,
                    help="raw: untimed requests per sender before the start (10)")
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="rdkafka: records per run (1,000,000)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--dir", default="/tmp", help="temporary data dirs (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "cores.json"),
                    help="JSON results (default bench/results/cores.json)")
    args = ap.parse_args(argv)
    args.loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    if (set(args.loads) - set(LOADS) or not args.loads or not args.partitions
            or min(args.partitions) < 1 or args.rounds < 1 or args.records < 1
            or args.per_batch < 1 or args.in_flight < 1 or args.raw_warmup_requests < 0
            or args.value_bytes < 1 or args.raw_records < max(args.partitions)):
        ap.error(f"--loads from {','.join(LOADS)}; partitions, rounds, records, per-batch, "
                 "in-flight, value size >= 1; raw records >= partitions")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, cb._raise_interrupt)  # stop what was started, then exit
    tmp_root = tempfile.mkdtemp(prefix="odradek-cores-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "cores",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(),
        "params": {**{k: v for k, v in vars(args).items() if k not in ("dir", "out")},
                   "systems": SYSTEMS, "broker_rack": "host-1", "replication_factor": 1,
                   "broker_settings": "default (cluster_bench.Cluster, settings {})",
                   "rdkafka_warmup_records_per_partition": cb.WARMUP_RECORDS,
                   "rdkafka_producer": {"acks": 1, "linger.ms": 5,
                                        "batch.num.messages": 100_000}},
        "clusters": [], "runs": [],
    }
    zk: ZooKeeperServer | None = None
    try:
        zk = ZooKeeperServer(Path(tmp_root) / "zookeeper")
        zk.start()
        cb._LIVE[zk.pid] = zk.stop
        results["machine"]["zookeeper"] = cb.zookeeper_version(zk)
        systems = list(SYSTEMS)
        for i in range(args.rounds):
            for system in (systems if i % 2 == 0 else systems[::-1]):
                check_interrupted()
                note(f"round {i + 1}/{args.rounds}: {system} ({SYSTEMS[system]} broker(s)) ...")
                got = on_cluster(SYSTEMS[system], zk, tmp_root, args, args.loads)
                for r in got.pop("rows"):
                    results["runs"].append({**r, "system": system, "round": i + 1})
                results["clusters"].append({**got, "system": system, "round": i + 1})
    finally:
        cb.tear_down(zk, tmp_root)
    results["summary"] = summarize(results["runs"], args, args.loads)
    results["brokers_killed_after_ignoring_sigterm"] = cb.HUNG
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
