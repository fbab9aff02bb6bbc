"""Producers benchmark: many producers sending one-record batches to a 3-broker cluster
(issue 31, target 5: requests/s per broker CPU-second, Odradek against Apache Kafka).

Systems (``cluster_bench.py``'s, imported, as ``partitions_bench.py`` starts them), fresh
each round on 127.0.0.1, the one that goes first alternating by round: a 3-broker Odradek
cluster on a private ZooKeeper (``Cluster``, default config) and, with ``--kafka``, a
3-node Apache Kafka 4.4 cluster (``KafkaCluster``); with ``--single``, one ``odradek
serve`` (no ZooKeeper, topic RF 1) as a reference. One topic of ``--partitions`` (6)
partitions, RF 3 and ``min.insync.replicas=2`` on the clusters, loaded once every replica
is in the ISR and Metadata names every leader.

The load: ``--producers`` (100) producers, each its own TCP connection to the leader of
its partition (producer i writes partition i mod P; leaders and their addresses from
``AdminClient.list_topics``), spread over ``--client-processes`` (4) worker processes
(multiprocessing, spawn), each an asyncio loop of bare ``asyncio.Protocol`` connections,
so the client costs far less CPU than librdkafka producers would. Each producer is a
closed loop with one request outstanding (linger.ms=0, max.in.flight 1): a Produce
request (``--produce-version``, default v9) carrying one pre-built one-record batch
(``odradek.records.builder.build_simple``, ``--value-bytes`` 100, magic 2, no producer
id, so non-idempotent; the request encoded once by ``odradek.client.wire``, only its
correlation id rewritten), then the next as soon as the answer is in. The first answer
of every connection is decoded in full (kio, ``scale_bench.decode_response``); after that
the correlation id and error code are read at their offsets, and any error code fails
the run. The load runs once per ``--acks`` (1,all; the order alternating by round):
``--warmup`` (5) s, then ``--seconds`` (10) s measured, then the producers stop; the
topic's end offsets must then have grown by exactly the requests answered.

Measured over the window: requests answered in it (by completion time, on
CLOCK_MONOTONIC shared by the processes) per second; the brokers' CPU seconds
(``Measured.cpu_by_node``: /proc of every broker process, summed, ZooKeeper left out);
requests per broker CPU-second (the target's figure) and its inverse, broker CPU us per
request; the workers' CPU per request; request latency (send to answer) p50/p99/p99.9;
the fewest and most requests of one connection. With ``--kafka``: Odradek / Kafka of
requests per broker CPU-second (target >= 1.0) and of requests/s, per acks, medians of
per-round ratios.

``--profile DIR``: after the measured loads on each Odradek cluster, one more load
(``--profile-acks``, default 1; not part of the figures) while ``py-spy record
--format raw`` samples the broker that leads the most partitions for ``--seconds``;
the raw file is kept in DIR and summarized (inclusive and self share of the busy samples
by function, and by module) in the JSON and the printed report. py-spy samples wall
time: its own idle test let every waiting thread through here, so samples whose top
frame is a wait (``IDLE_LEAVES``) are left out, and on a machine with fewer cores than
busy processes the rest includes time spent runnable but not running.
``--profile-pin`` adds a second such load with that broker alone on the first CPU (the
other brokers and the client on the rest), where busy samples come close to its CPU
time; ``--profile-native`` passes ``--native`` (C frames too).

Every process it starts (ZooKeeper, brokers, workers, py-spy) is stopped by its pid at
the end, on errors and on Ctrl-C; the brokers' logs are scanned for errors and warnings
before each cluster is removed.
Run: ``.venv/bin/python bench/producers_bench.py [--kafka] [--rounds 3]`` (see
bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import datetime
import multiprocessing as mp
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from array import array
from collections import Counter
from collections.abc import Sequence
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

import cluster_bench as cb
from _common import finish, note, proc_cpu_s, shown_path
from _pyspy import PROFILE_RATE, pin, profile_summary, start_py_spy
from broker_bench import broker_machine_info, broker_machine_line, java_version
from cluster_bench import CLUSTER, KAFKA_CLUSTER, MIN_ISR, SINGLE, SIZE, check_interrupted
from latency_bench import latency_stats_ms
from odradek.client.wire import encode_request
from odradek.devcluster import ZooKeeperServer
from odradek.devcluster.apache_kafka import KAFKA_VERSION, kafka_jars_present
from odradek.records import builder
from partitions_bench import SYSTEM_NAMES, make_topic, on_cluster, problem_lines
from scale_bench import decode_response

ACKS = {"1": 1, "all": -1}
TARGET = 1.0  # Odradek / Kafka, requests per broker CPU-second
TOPIC = "producers"
CLIENT_ID = "producers-bench"
READY_TIMEOUT_S = 120.0  # spawn, imports, connections, each connection's first answer
REQUEST_TIMEOUT_S = 30.0  # one request, and the producers' stop after the window
TAIL_S = 0.3  # the producers run on this long after the window ends


# --- the client: worker processes of asyncio producers ---------------------------------


def error_offset(topic: str, version: int) -> int:
    """Where the first partition's error code sits in a Produce response payload (size
    prefix removed) answering one partition of ``topic``: correlation id, [header tagged
    fields], topic count, name, partition count, partition index, error code."""
    name = len(topic.encode())
    if version >= 9:  # flexible: compact arrays and strings (uvarints), tagged fields
        return 4 + 1 + 1 + len(_uvarint(name + 1)) + name + 1 + 4
    return 4 + 4 + 2 + name + 4 + 4


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class ProducerConn(asyncio.Protocol):
    """One producer: its own connection, one Produce request outstanding. Each answer is
    timed and checked (correlation id and error code at their offsets); while ``running``
    the next request goes out at once."""

    def __init__(self, frame: bytes, error_at: int, changed: asyncio.Event) -> None:
        self.frame = bytearray(frame)
        self.error_at = error_at
        self.changed = changed  # set when an answer is not followed by a request
        self.buf = bytearray()
        self.corr = 0
        self.sent_ns = 0
        self.running = False
        self.waiting = False  # a request is outstanding
        self.done_ns = array("q")  # when each answer came (CLOCK_MONOTONIC)
        self.lat_ns = array("q")
        self.first: bytes | None = None
        self.error: str | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport  # asyncio sets TCP_NODELAY itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self.error is None and (self.waiting or self.running):
            self.error = f"connection lost: {exc}"
        self.running = self.waiting = False
        self.changed.set()

    def send(self) -> None:
        assert self.transport is not None
        self.corr += 1
        struct.pack_into(">i", self.frame, 8, self.corr)  # after size, api key, version
        self.waiting = True
        self.sent_ns = time.monotonic_ns()
        self.transport.write(self.frame)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        if not buf and len(data) >= 4 and int.from_bytes(data[:4], "big") == len(data) - 4:
            self.answer(data[4:])  # the usual case: one whole answer
            return
        buf += data
        while len(buf) >= 4:
            end = 4 + int.from_bytes(buf[:4], "big")
            if len(buf) < end:
                return
            payload = bytes(buf[4:end])
            del buf[:end]
            self.answer(payload)

    def answer(self, payload: bytes) -> None:
        now = time.monotonic_ns()
        self.waiting = False
        if self.first is None:
            self.first = payload
        corr = struct.unpack_from(">i", payload, 0)[0]
        code = struct.unpack_from(">h", payload, self.error_at)[0]
        if corr != self.corr or code:
            self.error = (f"error code {code}" if corr == self.corr else
                          f"correlation id {corr}, expected {self.corr}")
            self.running = False
            self.changed.set()
            return
        self.done_ns.append(now)
        self.lat_ns.append(now - self.sent_ns)
        if self.running:
            self.send()
        else:
            self.changed.set()


async def _recv(conn: Connection) -> Any:
    """The parent's next message, without blocking the loop."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), readable)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())
    return conn.recv()


async def _settle(producers: list[ProducerConn], changed: asyncio.Event) -> None:
    """Until no producer has a request outstanding (``REQUEST_TIMEOUT_S`` at most)."""
    async with asyncio.timeout(REQUEST_TIMEOUT_S):
        while any(p.waiting for p in producers):
            changed.clear()
            if any(p.waiting for p in producers):
                await changed.wait()


async def _worker(conn: Connection, targets: list[tuple[int, str, int, int]], topic: str,
                  acks: int, version: int, value_bytes: int) -> None:
    loop = asyncio.get_running_loop()
    batch = builder.build_simple([os.urandom(value_bytes)], timestamp=int(time.time() * 1000))
    frames = {p: encode_request(0, version, {
        "transactional_id": None, "acks": acks, "timeout": int(REQUEST_TIMEOUT_S * 1000),
        "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": batch}]}]},
        0, client_id=CLIENT_ID) for p in {t[3] for t in targets}}
    error_at = error_offset(topic, version)
    changed = asyncio.Event()
    producers: list[ProducerConn] = []
    try:
        for _, host, port, partition in targets:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                _, proto = await loop.create_connection(
                    partial(ProducerConn, frames[partition], error_at, changed), host, port)
            producers.append(proto)
        for p in producers:  # one request each, the answer decoded in full
            p.send()
        await _settle(producers, changed)
        for (index, _, _, partition), p in zip(targets, producers, strict=True):
            if p.first is None:
                raise RuntimeError(f"producer {index}: no first answer ({p.error})")
            _, body = decode_response(0, version, p.first)
            part = body.responses[0].partition_responses[0]
            if (body.responses[0].name != topic or part.index != partition
                    or part.error_code != struct.unpack_from(">h", p.first, error_at)[0]
                    or p.error is not None):
                raise RuntimeError(f"producer {index}: first answer {body!r} ({p.error})")
        conn.send({"ready": len(producers)})
        stop_at = (await _recv(conn))["go"]
        for p in producers:
            p.running = True
            p.send()
        while time.monotonic_ns() < stop_at and not any(p.error for p in producers):
            await asyncio.sleep(min(0.1, max(0.0, (stop_at - time.monotonic_ns()) / 1e9)))
        for p in producers:
            p.running = False
        await _settle(producers, changed)
        t0, t1 = (await _recv(conn))["window"]
        counts, lat = [], array("q")
        for p in producers:
            lo, hi = bisect.bisect_left(p.done_ns, t0), bisect.bisect_left(p.done_ns, t1)
            counts.append(hi - lo)
            lat.extend(p.lat_ns[lo:hi])
        errors = [f"producer {t[0]} (partition {t[3]}): {p.error}"
                  for t, p in zip(targets, producers, strict=True) if p.error]
        conn.send({"counts": counts, "lat_ns": lat.tobytes(), "errors": errors,
                   "answered": sum(len(p.done_ns) for p in producers)})
    finally:
        for p in producers:
            if p.transport is not None:
                p.transport.close()


def worker_main(conn: Connection, targets: list[tuple[int, str, int, int]], topic: str,
                acks: int, version: int, value_bytes: int) -> None:
    """A client worker, in a process of its own: connect its producers, answer ready,
    run from ``go`` until its stop time, then report the window's counts and latencies
    (or the error)."""
    try:
        asyncio.run(_worker(conn, targets, topic, acks, version, value_bytes))
    except BaseException as exc:  # the parent reports it
        with contextlib.suppress(OSError):
            conn.send({"error": f"{type(exc).__name__}: {exc}\n"
                                f"{traceback.format_exc()[-1500:]}"})




def _wait_until(t_ns: int, procs: list[Any]) -> None:
    while (left := t_ns - time.monotonic_ns()) > 0:
        check_interrupted()
        for i, proc in enumerate(procs):
            if not proc.is_alive():
                raise RuntimeError(f"client worker {i} exited with {proc.exitcode}")
        time.sleep(min(0.05, left / 1e9))


# --- one load ---------------------------------------------------------------------------


def leaders_and_addresses(bootstrap: str, topic: str, partitions: int
                          ) -> tuple[list[int], dict[int, tuple[str, int]]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    parts = md.topics[topic].partitions
    leaders = [parts[p].leader if p in parts else -1 for p in range(partitions)]
    if min(leaders) < 0:
        raise RuntimeError(f"no leader for some partitions of {topic}: {leaders}")
    return leaders, {b.id: (str(b.host), b.port) for b in md.brokers.values()}


def run_load(cluster: Any, partitions: int, acks: str, args: argparse.Namespace,
             profile_to: Path | None = None, pinned: bool = False) -> dict[str, Any]:
    """The closed-loop load with ``acks`` on ``cluster``'s topic: one row. With
    ``profile_to``, py-spy samples the broker leading the most partitions over the
    window and writes its raw stacks there; ``pinned`` puts that broker alone on the
    first CPU and the other brokers, the workers and py-spy on the rest for the run."""
    leaders, addresses = leaders_and_addresses(cluster.bootstrap, TOPIC, partitions)
    targets = [(i, *addresses[leaders[i % partitions]], i % partitions)
               for i in range(args.producers)]
    workers = max(1, min(args.client_processes, args.producers))
    ends0 = cb.end_offsets(cluster.bootstrap, TOPIC, partitions)
    ctx = mp.get_context("spawn")  # as the other benches: no fork of librdkafka threads
    pipes: list[Connection] = []
    procs: list[Any] = []
    spy: subprocess.Popen[bytes] | None = None
    profiled = Counter(leaders).most_common(1)[0][0] if profile_to is not None else None
    all_cpus = os.sched_getaffinity(0)
    try:
        for w in range(workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, daemon=True, args=(
                child, targets[w::workers], TOPIC, ACKS[acks], args.produce_version,
                args.value_bytes))
            proc.start()
            assert proc.pid is not None
            cb._LIVE[proc.pid] = proc.kill
            pipes.append(parent)
            procs.append(proc)
        cb.receive_all(pipes, procs, time.monotonic() + READY_TIMEOUT_S, "ready",
                       "client worker")
        if pinned and profiled is not None:
            first, rest = {min(all_cpus)}, all_cpus - {min(all_cpus)}
            for node, pid in cluster.broker_pids().items():
                pin(pid, first if node == profiled else rest)
            for proc in procs:
                pin(proc.pid, rest)
        t_go = time.monotonic_ns()
        window_ns = int(args.seconds * 1e9)
        start_ns = t_go + int(args.warmup * 1e9)
        for pipe in pipes:
            pipe.send({"go": start_ns + window_ns + int(TAIL_S * 1e9)})
        _wait_until(start_ns, procs)
        if profile_to is not None and profiled is not None:
            spy = start_py_spy(cluster.broker_pids()[profiled], args.seconds, profile_to,
                               args.profile_native)
            cb._LIVE[spy.pid] = spy.kill
            if pinned:
                pin(spy.pid, all_cpus - {min(all_cpus)})
        t0, cpu0 = time.monotonic_ns(), cluster.cpu_by_node()
        client0 = sum(proc_cpu_s(p.pid) for p in procs)
        _wait_until(t0 + window_ns, procs)
        t1, cpu1 = time.monotonic_ns(), cluster.cpu_by_node()
        client1 = sum(proc_cpu_s(p.pid) for p in procs)
        for pipe in pipes:
            pipe.send({"window": (t0, t1)})
        got = cb.receive_all(pipes, procs, time.monotonic() + REQUEST_TIMEOUT_S + TAIL_S + 10,
                             "results", "client worker")
        if spy is not None:
            try:
                spy_out = spy.communicate(timeout=30)[0].decode(errors="replace")
            except subprocess.TimeoutExpired as exc:
                raise RuntimeError("py-spy did not finish in time") from exc
            if spy.returncode != 0:
                raise RuntimeError(f"py-spy exited with {spy.returncode}: {spy_out[-1500:]}")
    finally:
        if pinned:
            for pid in cluster.broker_pids().values():
                with contextlib.suppress(OSError):
                    pin(pid, all_cpus)
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            cb._LIVE.pop(proc.pid, None)
        if spy is not None:
            if spy.poll() is None:
                spy.kill()
                spy.wait()
            cb._LIVE.pop(spy.pid, None)
    errors = [e for g in got for e in g["errors"]]
    if errors:
        raise RuntimeError(f"{len(errors)} producer(s) got errors: {errors[:5]}")
    ends1 = cb.end_offsets(cluster.bootstrap, TOPIC, partitions)
    answered = sum(g["answered"] for g in got)
    if sum(ends1) - sum(ends0) != answered:
        raise RuntimeError(f"end offsets grew by {sum(ends1) - sum(ends0):,}, but "
                           f"{answered:,} requests (one record each) were answered")
    seconds = (t1 - t0) / 1e9
    counts = [c for g in got for c in g["counts"]]
    requests = sum(counts)
    lat = array("q")
    for g in got:
        lat.frombytes(g["lat_ns"])
    by_node = {n: cpu1[n] - cpu0[n] for n in cpu1}
    broker_cpu, client_cpu = sum(by_node.values()), client1 - client0
    row: dict[str, Any] = {
        "acks": acks, "partitions": partitions, "producers": args.producers,
        "client_processes": workers, "seconds": round(seconds, 3), "requests": requests,
        "requests_s": round(requests / seconds),
        "broker_cpu_s": round(broker_cpu, 3),
        "broker_cpu_s_by_node": {str(n): round(c, 3) for n, c in by_node.items()},
        "broker_cpu_util": round(broker_cpu / seconds, 3),
        "requests_per_broker_cpu_s": round(requests / broker_cpu) if broker_cpu else None,
        "broker_cpu_us_per_request": round(broker_cpu / requests * 1e6, 2) if requests else None,
        "client_cpu_s": round(client_cpu, 3),
        "client_cpu_util": round(client_cpu / seconds, 3),
        "client_cpu_us_per_request": round(client_cpu / requests * 1e6, 2) if requests else None,
        "conn_requests_min": min(counts), "conn_requests_max": max(counts),
        "answered_total": answered, "leaders": leaders,
        "partitions_led_by_node": {str(n): c for n, c in sorted(Counter(leaders).items())},
    }
    row.update({k: round(v, 3) for k, v in latency_stats_ms(lat).items()})
    if profiled is not None:
        row.update(profiled_node=profiled, pinned=pinned)
    return row


# --- systems --------------------------------------------------------------------------


def system_loads(cluster: Any, rows: list[dict[str, Any]], kind: str, acks_order: list[str],
                 args: argparse.Namespace, profiles: list[dict[str, Any]]) -> None:
    check_interrupted()
    made = make_topic(cluster, TOPIC, args.partitions)
    note(f"  topic {TOPIC}: {args.partitions} partitions ready in {made} s")
    for acks in acks_order:
        check_interrupted()
        try:
            r = run_load(cluster, args.partitions, acks, args)
            note(f"    acks={acks}: {r['requests_s']:,} requests/s, p50 {r['p50_ms']:.2f} p99 "
                 f"{r['p99_ms']:.2f} ms; brokers {r['broker_cpu_util']:.2f} CPUs, "
                 f"{r['requests_per_broker_cpu_s']:,} requests per broker CPU-s "
                 f"({r['broker_cpu_us_per_request']:.1f} us/request); client "
                 f"{r['client_cpu_us_per_request']:.1f} us/request")
        except (RuntimeError, KafkaException, OSError) as exc:
            note(f"    acks={acks}: failed: {str(exc)[:1500]}")
            r = {"failed": str(exc)[:2000], "acks": acks}
        rows.append({**r, "topic_ready_s": made})
    if not args.profile or kind != CLUSTER:
        return
    for pinned in (False, True) if args.profile_pin else (False,):
        check_interrupted()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path(args.profile) / (f"producers-odradek-acks{args.profile_acks}"
                                    f"{'-pinned' if pinned else ''}-{stamp}.txt")
        try:
            r = run_load(cluster, args.partitions, args.profile_acks, args, profile_to=out,
                         pinned=pinned)
            summary = profile_summary(out)
            profiles.append({"run": r, "raw": shown_path(str(out)), **summary})
            note(f"    profile (acks={args.profile_acks}, node {r['profiled_node']}"
                 f"{', pinned' if pinned else ''}): {r['requests_s']:,} requests/s, "
                 f"{summary['samples']:,} busy samples in {shown_path(str(out))}")
        except (RuntimeError, KafkaException, OSError) as exc:
            note(f"    profile: failed: {str(exc)[:1500]}")
            profiles.append({"failed": str(exc)[:2000], "pinned": pinned})


# --- summary and report ---------------------------------------------------------------


def _ok(runs: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in runs if "failed" not in r
            and all(r.get(k) == v for k, v in match.items())]


def summarize(runs: list[dict[str, Any]], args: argparse.Namespace,
              systems: Sequence[str]) -> list[dict[str, Any]]:
    """Per (system, acks): medians over rounds; for Odradek's cluster, Odradek / Kafka per
    round (requests per broker CPU-second, requests/s) and their medians."""
    out = []
    for acks in args.acks:
        for kind in systems:
            mine = _ok(runs, system=kind, acks=acks)
            row: dict[str, Any] = {"system": kind, "acks": acks, "runs": len(mine),
                                   "failed_runs": len([r for r in runs if "failed" in r
                                                       and r["system"] == kind
                                                       and r.get("acks") == acks])}
            if mine:
                for k in ("requests_s", "requests_per_broker_cpu_s", "broker_cpu_util",
                          "broker_cpu_us_per_request", "client_cpu_us_per_request",
                          "client_cpu_util", "p50_ms", "p99_ms", "p99_9_ms"):
                    row[k] = statistics.median(r[k] for r in mine)
            if kind == CLUSTER and KAFKA_CLUSTER in systems:
                for key, name in (("requests_per_broker_cpu_s", "per_cpu"),
                                  ("requests_s", "rate")):
                    xs = cb.round_ratios(runs, CLUSTER, KAFKA_CLUSTER, key, acks=acks)
                    row[f"ratio_{name}_all"] = [round(x, 3) for x in xs]
                    row[f"ratio_{name}"] = round(statistics.median(xs), 3) if xs else None
            out.append(row)
    return out


def _met(value: float | None, ok: bool) -> str:
    return "-" if value is None else f"**{value:.2f}** ({'met' if ok else 'NOT met'})"


def profile_markdown(p: dict[str, Any]) -> list[str]:
    if "failed" in p:
        return ["", f"- profile failed: {p['failed'][:300]}"]
    if "samples" not in p:
        return []
    r = p["run"]
    node = str(r["profiled_node"])
    pinned = (" (pinned: that broker alone on one CPU, the other brokers and the client on "
              "the rest)") if r.get("pinned") else ""
    lines = ["", f"profile, round {p['round']}{pinned}: py-spy record ({PROFILE_RATE} Hz) of "
             f"Odradek broker {node} (it leads "
             f"{r['partitions_led_by_node'][node]} of {r['partitions']} partitions) over "
             f"{r['seconds']:.0f} s of an extra acks={r['acks']} load ({r['requests_s']:,} "
             f"requests/s, that broker {r['broker_cpu_s_by_node'][node] / r['seconds']:.2f} "
             f"CPUs, i.e. {r['broker_cpu_s_by_node'][node] * PROFILE_RATE:,.0f} samples' "
             f"worth of CPU); {p['samples']:,} busy samples (on a CPU or waiting for one), "
             f"{p['idle_samples']:,} idle ones left out; % of busy samples; raw stacks: "
             f"{p['raw']}", "",
             "| function (module) | inclusive % | self % |", "|---|---:|---:|"]
    lines += [f"| `{f['function']}` | {f['inclusive_pct']:.1f} | {f['self_pct']:.1f} |"
              for f in p["top_inclusive"]]
    lines += ["", "| module | self % | inclusive % |", "|---|---:|---:|"]
    lines += [f"| {m['module']} | {m['self_pct']:.1f} | {m['inclusive_pct']:.1f} |"
              for m in p["by_module"] if m["self_pct"] >= 0.5 or m["inclusive_pct"] >= 5]
    return lines


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    lines = [f"machine: {broker_machine_line(m)}, ZooKeeper {m.get('zookeeper')}, "
             f"{m.get('java') or 'no java'}",
             f"clusters: 3 brokers each, default config, topic RF {SIZE}, "
             f"min.insync.replicas={MIN_ISR} (single: RF 1); {p['rounds']} round(s), the "
             "system that goes first alternating",
             f"load: {p['producers']} producers (one connection each, to its partition's "
             f"leader; {p['client_processes']} client processes), closed loop, one request "
             f"outstanding, Produce v{p['produce_version']} of one {p['value_bytes']}-byte "
             f"record; {p['partitions']} partitions; {p['seconds']:g} s measured after "
             f"{p['warmup']:g} s; broker CPU summed over the brokers; medians of rounds; "
             f"target: Odradek / Kafka requests per broker CPU-s >= {TARGET:g}", "",
             "| system | acks | requests/s | p50 ms | p99 ms | broker CPUs | broker CPU "
             "us/request | requests / broker CPU-s | client CPU us/request | Odradek / Kafka "
             "per CPU-s | Odradek / Kafka requests/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["summary"]:
        head = f"| {SYSTEM_NAMES[r['system']]} | {r['acks']} "
        if not r["runs"]:
            lines.append(head + "| failed | | | | | | | | |")
            continue
        ratio = rate = "-"
        if "ratio_per_cpu" in r:
            v = r["ratio_per_cpu"]
            ratio = _met(v, v is not None and v >= TARGET)
            rate = "-" if r["ratio_rate"] is None else f"{r['ratio_rate']:.2f}"
        lines.append(head + f"| {r['requests_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
                     f"| {r['broker_cpu_util']:.2f} | {r['broker_cpu_us_per_request']:.1f} "
                     f"| {r['requests_per_broker_cpu_s']:,.0f} "
                     f"| {r['client_cpu_us_per_request']:.1f} | {ratio} | {rate} |")
    lines += problem_lines(results, SYSTEM_NAMES.__getitem__,
                           lambda r: f"acks={r.get('acks', '-')}")
    for prof in results["profiles"]:
        lines += profile_markdown(prof)
    return "\n".join(lines).rstrip() + "\n"


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--kafka", action="store_true", help="a 3-node Apache Kafka cluster too")
    ap.add_argument("--single", action="store_true",
                    help="one odradek serve (topic RF 1) too, as a reference")
    ap.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    ap.add_argument("--partitions", type=int, default=6, help="topic partitions (6)")
    ap.add_argument("--producers", type=int, default=100,
                    help="producers, one connection each (100)")
    ap.add_argument("--client-processes", type=int, default=4,
                    help="worker processes the producers are spread over (4)")
    ap.add_argument("--acks", default="1,all", help="acks values, comma-separated (1,all)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds (10)")
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds of load before the measured window (5)")
    ap.add_argument("--produce-version", type=int, default=9,
                    help="Produce request version, 3-9 (9)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--profile", metavar="DIR",
                    help="py-spy an Odradek broker over an extra load; raw stacks to DIR")
    ap.add_argument("--profile-acks", choices=tuple(ACKS), default="1",
                    help="the extra load's acks (1)")
    ap.add_argument("--profile-pin", action="store_true",
                    help="a second profiled load with that broker alone on one CPU")
    ap.add_argument("--profile-native", action="store_true",
                    help="py-spy --native: C frames too")
    ap.add_argument("--dir", default="/tmp", help="temporary data dirs (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "producers.json"),
                    help="JSON results (default bench/results/producers.json)")
    args = ap.parse_args(argv)
    args.acks = [a.strip() for a in args.acks.split(",") if a.strip()]
    if (set(args.acks) - set(ACKS) or not args.acks or args.rounds < 1 or args.partitions < 1
            or args.producers < 1 or args.client_processes < 1 or args.seconds <= 0
            or args.warmup < 0 or not 3 <= args.produce_version <= 9 or args.value_bytes < 1):
        ap.error("--acks from 1,all; rounds, partitions, producers, client processes, value "
                 "size >= 1; seconds > 0; --produce-version 3..9")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.kafka and not kafka_jars_present():
        raise SystemExit("--kafka needs Apache Kafka's jars: bash scripts/fetch_jvm.sh")
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, cb._raise_interrupt)  # stop what was started, then exit
    systems = tuple(s for s, on in ((CLUSTER, True), (KAFKA_CLUSTER, args.kafka),
                                    (SINGLE, args.single)) if on)
    tmp_root = tempfile.mkdtemp(prefix="odradek-producers-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "producers",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(java=java_version()),
        "params": {**{k: v for k, v in vars(args).items() if k not in ("dir", "out")},
                   "systems": list(systems), "replication_factor": SIZE,
                   "min_insync_replicas": MIN_ISR, "kafka_version": KAFKA_VERSION,
                   "client": "asyncio.Protocol connections, one request outstanding each, "
                             "a pre-built one-record batch per request, non-idempotent"},
        "clusters": [], "runs": [], "profiles": [],
    }
    zk: ZooKeeperServer | None = None
    try:
        zk = ZooKeeperServer(Path(tmp_root) / "zookeeper")
        zk.start()
        cb._LIVE[zk.pid] = zk.stop
        results["machine"]["zookeeper"] = cb.zookeeper_version(zk)
        for i in range(args.rounds):
            acks_order = args.acks if i % 2 == 0 else args.acks[::-1]
            for kind in (systems if i % 2 == 0 else systems[::-1]):
                check_interrupted()
                note(f"round {i + 1}/{args.rounds}: {SYSTEM_NAMES[kind]}, acks "
                     f"{','.join(acks_order)} ...")
                profiles: list[dict[str, Any]] = []
                loads = partial(system_loads, kind=kind, acks_order=acks_order, args=args,
                                profiles=profiles)
                got = on_cluster(kind, zk, tmp_root, loads)
                for r in got.pop("rows"):
                    results["runs"].append({**r, "system": kind, "round": i + 1})
                results["clusters"].append({**got, "system": kind, "round": i + 1})
                results["profiles"] += [{**p, "round": i + 1} for p in profiles]
    finally:
        cb.tear_down(zk, tmp_root)
    results["summary"] = summarize(results["runs"], args, systems)
    results["brokers_killed_after_ignoring_sigterm"] = cb.HUNG
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
