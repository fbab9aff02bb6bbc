"""ETL benchmark: a consume-transform-produce load through consumer groups on a 3-broker
cluster (issue 31, target 5, the "group ETL"), Odradek against Apache Kafka.

The issue: franz-go producing N records while a consumer group reads them and writes them
on through two more topics, committing as it goes, finished 500,000 records in about a
minute and a half on one broker, but on the 3-broker RF 3 cluster 300,000 records took
760 s and 500,000 did not finish in 13 minutes.

Systems (``cluster_bench.py``'s, imported), fresh each round on 127.0.0.1, their order
reversed every other round: a 3-broker Odradek cluster on a private ZooKeeper
(``Cluster``, default config); with ``--kafka`` a 3-node Apache Kafka 4.4 cluster
(``KafkaCluster``); with ``--single`` one ``odradek serve`` (``broker_bench.Broker``, as
cluster_bench's single broker). Three topics ``etl-0``, ``etl-1``, ``etl-2`` of
``--partitions`` partitions, RF 3 and ``min.insync.replicas=2`` on the clusters (made and
waited for as partitions_bench.py's ``make_topic`` does: every replica in the ISR, a
leader for every partition in Metadata), RF 1 on the single broker.

The load is ``bench/go``'s franzetl (franz-go, built on first use into
``.cache/go/bench``), three processes at once: two stages, each a consumer group member
(``etl-g1`` reading etl-0 and writing etl-1, ``etl-g2`` reading etl-1 and writing
etl-2) that produces every record it reads, its value uppercased, and commits as it goes,
until it has seen ``--records`` distinct keys. ``--write``: ``record`` (default): each
record produced and acknowledged before the next (``ProduceSync``), so a stage's rate is
one over an acks=all round trip (the issue's rates, ~5,500 records/s on one broker and
~400 on the cluster, are of this kind); ``poll``: a poll's records produced together,
then ``Flush`` (large batches: the brokers' per-record costs). ``--commit``: ``marks``
(default): records marked once their output is acknowledged, franz's autocommit
committing the marks every 5 s; ``sync``: a commit after each poll's output is
acknowledged; ``auto``: franz's plain autocommit. The third process, started once both
stages have their partitions and ``__consumer_offsets`` (which their groups created) has
every replica in sync, produces ``--records`` records of ``--value-bytes`` bytes to
etl-0, key i for record i (franz's key-hash partitioner spreads them over every
partition). Every client uses franz's defaults otherwise: acks=all, idempotent
producers, linger 10 ms.

Measured: end to end, from the producer's first record to the second stage's last
output acknowledged (records/s = ``--records`` / that time); when each process got done,
from the same start; each topic's end offsets afterwards (exactly ``--records`` each,
more is reported as duplicates, a stage's rereading after a rebalance); the brokers' CPU
(``/proc``, summed over the brokers, from the producer's start until every process has
exited) and the clients' (wait4) per million source records; the processes' progress
every second (records acknowledged in etl-0, etl-1, etl-2). After ``--timeout-s`` the
run is stopped and reported as not finished, with how far each topic got. With
``--kafka``: Odradek / Kafka for records/s and for broker CPU per record, medians of the
per-round ratios.

Every process it starts is stopped by its pid at the end, on errors and on Ctrl-C; the
brokers' logs are scanned for errors and warnings before each cluster is removed.
Run: ``.venv/bin/python bench/etl_bench.py [--kafka] [--single] [--rounds 1]`` (see
bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

import cluster_bench as cb
from _common import finish, note, proc_cpu_s, shown_path
from broker_bench import broker_machine_info, broker_machine_line, java_version
from cluster_bench import CLUSTER, KAFKA_CLUSTER, MIN_ISR, SINGLE, SIZE, check_interrupted
from odradek.devcluster import ZooKeeperServer, spawn, stop_process
from odradek.devcluster.apache_kafka import KAFKA_VERSION, kafka_jars_present
from partitions_bench import franz_binary, make_topic, on_cluster, problem_lines

NAMES = {CLUSTER: "Odradek, 3 brokers", KAFKA_CLUSTER: f"Kafka {KAFKA_VERSION}, 3 nodes",
         SINGLE: "Odradek, 1 broker"}
TOPICS = ("etl-0", "etl-1", "etl-2")
GROUPS = ("etl-g1", "etl-g2")
STAGES = ("stage1", "stage2")
WRITES = {"record": "each record acknowledged before the next", "poll": "a poll's records "
          "produced together, then flushed"}
PROGRAM = "franzetl"
OFFSETS_TOPIC, OFFSETS_PARTITIONS = "__consumer_offsets", 50  # both systems' default
JOIN_TIMEOUT_S = 180.0  # a stage's first assignment (it creates __consumer_offsets)
STOP_TIMEOUT_S = 10.0
NOTE_EVERY_S = 15.0


# --- the franzetl processes -----------------------------------------------------------


@dataclass
class Client:
    """One franzetl process (odradek.devcluster's launcher: output to files, a session of
    its own), in cluster_bench's ``_LIVE`` while it runs."""

    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    rc: int | None = None
    cpu_s: float | None = None
    stopped: bool = False  # by this script (a timeout or a failure), not by itself
    _lines: list[dict[str, Any]] = field(default_factory=list)
    _read: int = 0

    @classmethod
    def start(cls, cmd: list[str], workdir: Path, name: str) -> Client:
        out, err = workdir / f"{name}.out", workdir / f"{name}.err"
        proc = spawn(cmd, out, stderr_path=err)
        client = cls(name, proc, out, err)
        cb._LIVE[proc.pid] = client.stop
        return client

    def reap(self) -> bool:
        """Whether it has exited (its exit code and CPU then kept)."""
        if self.rc is not None:
            return True
        pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
        if not pid:
            return False
        self.rc = self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_s = ru.ru_utime + ru.ru_stime
        cb._LIVE.pop(self.proc.pid, None)
        return True

    def stop(self) -> None:
        """SIGTERM (franzetl dies at once), SIGKILL after STOP_TIMEOUT_S; its CPU read
        from /proc just before."""
        if self.reap():
            return
        with contextlib.suppress(OSError):
            self.cpu_s = proc_cpu_s(self.proc.pid)
        self.stopped = True
        rc, _killed = stop_process(self.proc, STOP_TIMEOUT_S)
        self.rc = rc
        cb._LIVE.pop(self.proc.pid, None)

    def lines(self) -> list[dict[str, Any]]:
        """Its JSON lines so far (read on from where the last call stopped)."""
        try:
            with open(self.out, "rb") as f:
                f.seek(self._read)
                data = f.read()
        except OSError:
            return self._lines
        end = data.rfind(b"\n") + 1
        self._read += end
        for raw in data[:end].splitlines():
            if raw.startswith(b"{"):
                with contextlib.suppress(ValueError):
                    self._lines.append(json.loads(raw))
        return self._lines

    def last(self, event: str) -> dict[str, Any] | None:
        return next((x for x in reversed(self.lines()) if x.get("event") == event), None)

    def stderr_tail(self) -> str:
        try:
            return self.err.read_text(errors="replace")[-1500:]
        except OSError:
            return ""


def stage_cmd(binary: Path, bootstrap: str, i: int, args: argparse.Namespace) -> list[str]:
    return [str(binary), "-mode", "stage", "-bootstrap", bootstrap, "-in", TOPICS[i],
            "-out", TOPICS[i + 1], "-group", GROUPS[i], "-records", str(args.records),
            "-commit", args.commit, "-write", args.write]


def _timeline(clients: dict[str, Client], t0_ns: int, every_s: float) -> list[list[float]]:
    """[seconds from the start, records acknowledged in etl-0, etl-1, etl-2] every
    ``every_s`` s, from each process's progress lines (its latest at or before then)."""
    series = {name: [(x["t_ns"], x["acked"]) for x in c.lines()
                     if x.get("event") == "progress"] for name, c in clients.items()}
    for name, c in clients.items():
        done = c.last("done")
        if done is not None:  # the last figure, at the moment it was done
            series[name].append((done.get("end_ns") or done["done_ns"], done["acked"]))
    end = max((t for s in series.values() for t, _ in s), default=t0_ns)
    out: list[list[float]] = []
    t = t0_ns
    while True:
        row: list[float] = [round((t - t0_ns) / 1e9, 1)]
        for name in ("producer", *STAGES):
            row.append(max((a for ts, a in series[name] if ts <= t), default=0))
        out.append(row)
        if t >= end:
            return out
        t = min(end, t + int(every_s * 1e9))


def etl_run(target: Any, partitions: int, args: argparse.Namespace, workdir: Path,
            offsets_in_sync: Callable[[], None] | None) -> dict[str, Any]:
    """The three processes on ``target`` (its ``bootstrap`` and ``cpu_by_node``): the
    stages, once both have partitions (and ``offsets_in_sync`` has returned) the producer;
    until the second stage is done or ``--timeout-s`` has passed."""
    binary = franz_binary(PROGRAM)
    bootstrap = target.bootstrap
    clients: dict[str, Client] = {}
    try:
        t_join = time.monotonic()
        for i, name in enumerate(STAGES):
            clients[name] = Client.start(stage_cmd(binary, bootstrap, i, args), workdir,
                                         f"{name}-{GROUPS[i]}-{time.monotonic_ns()}")
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while not all(c.last("assigned") for c in clients.values()):
            check_interrupted()
            for c in clients.values():
                if c.reap():
                    raise RuntimeError(f"{c.name} exited with {c.rc} before joining its "
                                       f"group: {c.lines()[-1:]} {c.stderr_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stages had no partitions after {JOIN_TIMEOUT_S:.0f} "
                                   "s")
            time.sleep(0.05)
        joined_s = time.monotonic() - t_join
        if offsets_in_sync is not None:
            offsets_in_sync()
        ready_s = time.monotonic() - t_join
        note(f"    stages in their groups after {joined_s:.1f} s, {OFFSETS_TOPIC} ready "
             f"after {ready_s:.1f} s; producing {args.records:,} records ...")
        cpu0 = target.cpu_by_node()
        spawned_ns, t_spawn = time.time_ns(), time.monotonic()
        clients["producer"] = Client.start(
            [str(binary), "-mode", "produce", "-bootstrap", bootstrap, "-topic", TOPICS[0],
             "-records", str(args.records), "-value-bytes", str(args.value_bytes)],
            workdir, f"producer-{time.monotonic_ns()}")
        deadline = t_spawn + args.timeout_s
        failed: str | None = None
        timed_out = False
        next_note = t_spawn + NOTE_EVERY_S
        while True:
            check_interrupted()
            done = {name: c.reap() for name, c in clients.items()}
            bad = [c for name, c in clients.items() if done[name] and c.rc != 0]
            if bad:
                failed = "; ".join(f"{c.name} exited with {c.rc}: {c.lines()[-1:]} "
                                   f"{c.stderr_tail()}" for c in bad)
                break
            if all(done.values()):
                break
            now = time.monotonic()
            if now > deadline:
                timed_out = True
                break
            if now >= next_note:
                next_note += NOTE_EVERY_S
                got = [(c.last("done") or c.last("progress") or {}).get("acked", 0)
                       for c in (clients["producer"], *(clients[s] for s in STAGES))]
                note(f"    {now - t_spawn:.0f} s: acknowledged in {', '.join(TOPICS)}: "
                     f"{', '.join(f'{x:,}' for x in got)}")
            time.sleep(0.05)
        for c in clients.values():
            c.stop()
        cpu1 = target.cpu_by_node()
        wall_s = time.monotonic() - t_spawn
    except BaseException:
        for c in clients.values():
            c.stop()
        raise
    try:
        ends = {t: cb.end_offsets(bootstrap, t, partitions) for t in TOPICS}
        end_totals = {t: sum(e) for t, e in ends.items()}
    except KafkaException as exc:
        ends, end_totals = {}, {}
        note(f"    end offsets not read: {exc}")
    dones = {name: c.last("done") for name, c in clients.items()}
    prod = dones["producer"]
    t0_ns = prod["start_ns"] if prod else spawned_ns
    by_node = {n: cpu1[n] - cpu0[n] for n in cpu1 if n in cpu0}
    broker_cpu = sum(by_node.values())
    client_cpu = {name: round(c.cpu_s, 3) if c.cpu_s is not None else None
                  for name, c in clients.items()}
    m = args.records / 1e6
    r: dict[str, Any] = {
        "finished": failed is None and not timed_out,
        "timed_out": timed_out, "wall_s": round(wall_s, 2),
        "join_s": round(joined_s, 2), "offsets_topic_ready_s": round(ready_s, 2),
        "end_offsets": ends, "topic_records": end_totals,
        "duplicates": {t: n - args.records for t, n in end_totals.items()
                       if n > args.records},
        "broker_cpu_s": round(broker_cpu, 3),
        "broker_cpu_s_per_m": round(broker_cpu / m, 3),
        "broker_cpu_s_per_m_by_broker": {str(n): round(c / m, 3) for n, c in by_node.items()},
        "broker_cpu_util": round(broker_cpu / wall_s, 3),
        "client_cpu_s": client_cpu,
        "exit_codes": {name: c.rc for name, c in clients.items()},
        "stopped_by_bench": [name for name, c in clients.items() if c.stopped],
        "clients": dones,
        "assignments": {s: [x for x in clients[s].lines() if x.get("event") == "assigned"]
                        for s in STAGES},
        "timeline": _timeline(clients, t0_ns, 1.0),
    }
    if all(client_cpu.values()):
        r["client_cpu_s_per_m"] = round(sum(c for c in client_cpu.values() if c) / m, 3)
    done_at: dict[str, int | None] = {"producer": (prod or {}).get("end_ns"),
                                      **{s: (dones[s] or {}).get("done_ns") for s in STAGES}}
    r["done_s"] = {k: round((v - t0_ns) / 1e9, 2) if v else None for k, v in done_at.items()}
    if failed is not None:
        r["failed"] = failed[:3000]
    elif timed_out:
        r["failed"] = (f"not finished after {args.timeout_s:g} s: records in "
                       + ", ".join(f"{t} {n:,}" for t, n in end_totals.items())
                       + f" of {args.records:,}")
    else:
        last = done_at["stage2"]
        assert last is not None  # stage 2 exited with 0: it printed its done line
        seconds = (last - t0_ns) / 1e9
        r.update(seconds=round(seconds, 3), records_s=round(args.records / seconds))
        short = [t for t, n in end_totals.items() if n < args.records]
        if short:
            r["failed"] = f"finished, but topics {short} hold fewer records: {end_totals}"
            r["finished"] = False
    return r


# --- systems --------------------------------------------------------------------------


def cluster_loads(cluster: Any, rows: list[dict[str, Any]], args: argparse.Namespace,
                  workdir: Path) -> None:
    made = {t: make_topic(cluster, t, args.partitions) for t in TOPICS}
    note(f"  topics ready in {made} s")

    def offsets_in_sync() -> None:
        cluster.wait_for(lambda: cluster.full_isr(OFFSETS_TOPIC, OFFSETS_PARTITIONS),
                         JOIN_TIMEOUT_S, f"every replica of {OFFSETS_TOPIC} in sync")

    rows.append({**etl_run(cluster, args.partitions, args, workdir, offsets_in_sync),
                 "topic_ready_s": made})


def describe(r: dict[str, Any]) -> str:
    d = r.get("done_s", {})
    return (f"producer done {d.get('producer')} s, stage 1 {d.get('stage1')} s, stage 2 "
            f"{d.get('stage2')} s; records {r.get('topic_records')}; broker CPU "
            f"{r.get('broker_cpu_s_per_m')} s per M records "
            f"(by broker {r.get('broker_cpu_s_per_m_by_broker')}); client CPU "
            f"{r.get('client_cpu_s')} s")


# --- summary and report ---------------------------------------------------------------


def _ratios(runs: list[dict[str, Any]], a: str, b: str, key: str) -> list[float]:
    """Per round, ``a``'s ``key`` / ``b``'s, over finished runs."""
    out = []
    for i in sorted({r["round"] for r in runs}):
        x = [r for r in runs if r["system"] == a and r["round"] == i and r.get("finished")]
        y = [r for r in runs if r["system"] == b and r["round"] == i and r.get("finished")]
        if x and y and y[0].get(key):
            out.append(x[0][key] / y[0][key])
    return out


def summarize(runs: list[dict[str, Any]], systems: Sequence[str],
              args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for kind in systems:
        mine = [r for r in runs if r["system"] == kind]
        ok = [r for r in mine if r.get("finished")]
        row: dict[str, Any] = {"system": kind, "runs": len(mine), "finished": len(ok)}
        if ok:
            for k in ("records_s", "seconds", "broker_cpu_s_per_m", "broker_cpu_util"):
                row[k] = statistics.median(r[k] for r in ok)
            row["records_s_all"] = [r["records_s"] for r in ok]
            cl = [r["client_cpu_s_per_m"] for r in ok if "client_cpu_s_per_m" in r]
            row["client_cpu_s_per_m"] = statistics.median(cl) if cl else None
            for s in ("producer", *STAGES):
                row[f"{s}_done_s"] = statistics.median(r["done_s"][s] for r in ok)
        unfinished = [r for r in mine if not r.get("finished") and "topic_records" in r]
        if unfinished:
            row["unfinished"] = [{"round": r["round"], "wall_s": r["wall_s"],
                                  "topic_records": r["topic_records"],
                                  "done_s": r["done_s"]} for r in unfinished]
        row["duplicates"] = [r["duplicates"] for r in mine if r.get("duplicates")]
        for other, suffix in ((KAFKA_CLUSTER, "kafka"), (SINGLE, "single")):
            if kind != CLUSTER or other not in systems:
                continue
            for name, key in (("throughput", "records_s"), ("cpu_per_record",
                                                             "broker_cpu_s_per_m")):
                xs = _ratios(runs, CLUSTER, other, key)
                row[f"ratio_{name}_vs_{suffix}"] = (round(statistics.median(xs), 3)
                                                    if xs else None)
                row[f"ratio_{name}_vs_{suffix}_all"] = [round(x, 3) for x in xs]
        out.append(row)
    return out


def _f(x: float | None, fmt: str = ",.1f") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    lines = [
        f"machine: {broker_machine_line(m)}, ZooKeeper {m.get('zookeeper')}, "
        f"{m.get('java') or 'no java'}",
        f"group ETL (franz-go {p['franz_go']}, its defaults: acks=all, idempotent, linger "
        f"10 ms): a producer of {p['records']:,} records of {p['value_bytes']} bytes "
        f"(keyed) to {TOPICS[0]}, and at the same time two consumer-group stages "
        f"({TOPICS[0]} -> {TOPICS[1]}, {TOPICS[1]} -> {TOPICS[2]}), each producing every "
        f"record it reads ({WRITES[p['write']]}), commits: {p['commit']}; topics of "
        f"{p['partitions']} partitions, "
        f"RF {SIZE} and min.insync.replicas={MIN_ISR} on the clusters (RF 1 on one broker); "
        f"{p['rounds']} round(s), fresh systems each, the order alternating; time = first "
        "record produced to the last acknowledged in the last topic; CPU per million source "
        "records, brokers summed; medians of finished runs", "",
        "| system | records/s | end to end s | producer done s | stage 1 done s "
        "| stage 2 done s | broker CPU s/M | client CPU s/M | broker CPUs busy "
        "| finished |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results["summary"]:
        head = f"| {NAMES[r['system']]} "
        fin = f"{r['finished']}/{r['runs']}"
        if not r["finished"]:
            lines.append(head + "| not finished | | | | | | | | " + fin + " |")
            continue
        lines.append(
            head + f"| {r['records_s']:,.0f} | {r['seconds']:,.1f} "
            f"| {_f(r['producer_done_s'])} | {_f(r['stage1_done_s'])} "
            f"| {_f(r['stage2_done_s'])} | {r['broker_cpu_s_per_m']:,.1f} "
            f"| {_f(r['client_cpu_s_per_m'])} | {r['broker_cpu_util']:.2f} | {fin} |")
    lines.append("")
    for r in results["summary"]:
        for name, label in (("kafka", "Kafka's cluster"), ("single", "one Odradek broker")):
            if f"ratio_throughput_vs_{name}" not in r:
                continue
            t, c = r[f"ratio_throughput_vs_{name}"], r[f"ratio_cpu_per_record_vs_{name}"]
            lines.append(f"- Odradek's cluster / {label}: records/s **{_f(t, '.3f')}**, "
                         f"broker CPU per record **{_f(c, '.3f')}** (medians of per-round "
                         f"ratios: {r[f'ratio_throughput_vs_{name}_all']}, "
                         f"{r[f'ratio_cpu_per_record_vs_{name}_all']})")
    for run in results["runs"]:
        if run.get("finished"):
            continue
        got = run.get("topic_records")
        d = run.get("done_s") or {}
        lines.append(f"- round {run['round']}, {NAMES[run['system']]}: "
                     + (f"not finished after {run['wall_s']:,.0f} s: records in "
                        + ", ".join(f"{t} {n:,}" for t, n in got.items())
                        + f" of {p['records']:,}; done at (s): producer "
                        f"{_f(d.get('producer'), ',.2f')}, stage 1 {_f(d.get('stage1'), ',.2f')}, "
                        f"stage 2 {_f(d.get('stage2'), ',.2f')}"
                        if got else "failed")
                     + (f": {run['failed'][:300]}" if "failed" in run and not got else ""))
    for run in results["runs"]:
        tl = run.get("timeline")
        if tl and len(tl) > 4:
            at = [tl[min(len(tl) - 1, round(f * (len(tl) - 1)))] for f in (0.25, 0.5, 0.75)]
            lines.append(f"- round {run['round']}, {NAMES[run['system']]}: records in "
                         f"{'/'.join(TOPICS)} at " + "; ".join(
                             f"{x[0]:,.0f} s: {x[1]:,.0f}/{x[2]:,.0f}/{x[3]:,.0f}" for x in at))
        if run.get("duplicates"):
            lines.append(f"- round {run['round']}, {NAMES[run['system']]}: duplicates "
                         f"{run['duplicates']}")
        rebalanced = {s: len(a) for s, a in run.get("assignments", {}).items() if len(a) > 1}
        if rebalanced:
            lines.append(f"- round {run['round']}, {NAMES[run['system']]}: assignments per "
                         f"stage {rebalanced} (a rebalance during the run)")
    # Failed runs are listed above, with how far they got: here only the brokers' logs.
    lines += problem_lines({**results, "runs": []}, NAMES.__getitem__, lambda r: "")
    return "\n".join(lines).rstrip() + "\n"


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--kafka", action="store_true", help="a 3-node Apache Kafka cluster too")
    ap.add_argument("--single", action="store_true",
                    help="one Odradek broker too (topics RF 1), as a reference")
    ap.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    ap.add_argument("--records", type=int, default=60_000,
                    help="records through the pipeline (default 60,000: ~2 minutes on "
                         "Odradek's cluster with --write record)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--partitions", type=int, default=6, help="partitions per topic (6)")
    ap.add_argument("--write", choices=("record", "poll"), default="record",
                    help="how the stages produce: each record acknowledged before the next "
                         "(record, default) or a poll's records together (poll)")
    ap.add_argument("--commit", choices=("marks", "sync", "auto"), default="marks",
                    help="how the stages commit (default marks; see the module docstring)")
    ap.add_argument("--timeout-s", type=float, default=600.0,
                    help="a run not done this long after the producer's start is stopped "
                         "and reported as not finished (600)")
    ap.add_argument("--dir", default="/tmp", help="temporary data dirs (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "etl.json"),
                    help="JSON results (default bench/results/etl.json)")
    args = ap.parse_args(argv)
    if (args.rounds < 1 or args.records < 1 or args.value_bytes < 1 or args.partitions < 1
            or args.timeout_s <= 0):
        ap.error("rounds, records, value size, partitions >= 1, timeout > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.kafka and not kafka_jars_present():
        raise SystemExit("--kafka needs Apache Kafka's jars: bash scripts/fetch_jvm.sh")
    franz_binary(PROGRAM)  # fail early when it cannot be built
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, cb._raise_interrupt)  # stop what was started, then exit
    systems = (CLUSTER, *((KAFKA_CLUSTER,) if args.kafka else ()),
               *((SINGLE,) if args.single else ()))
    tmp_root = tempfile.mkdtemp(prefix="odradek-etl-bench-", dir=args.dir)
    workdir = Path(tmp_root) / "clients"
    workdir.mkdir()
    results: dict[str, Any] = {
        "benchmark": "etl",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(java=java_version() if args.kafka else None),
        "params": {**{k: v for k, v in vars(args).items() if k not in ("dir", "out")},
                   "systems": list(systems), "topics": list(TOPICS), "groups": list(GROUPS),
                   "replication_factor": SIZE, "min_insync_replicas": MIN_ISR,
                   "kafka_version": KAFKA_VERSION, "franz_go": "v1.22.3 (bench/go/go.mod)"},
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
                note(f"round {i + 1}/{args.rounds}: {NAMES[kind]} ...")
                t0 = time.monotonic()
                got = on_cluster(kind, zk, tmp_root, lambda c, rows: cluster_loads(
                    c, rows, args, workdir))
                for r in got.pop("rows"):
                    results["runs"].append({**r, "system": kind, "round": i + 1})
                    if r.get("finished"):
                        note(f"  {r['records_s']:,} records/s ({r['seconds']:.1f} s); "
                             + describe(r))
                    else:
                        note(f"  failed: {r.get('failed', '')[:1500]}"
                             + (f"; {describe(r)}" if "done_s" in r else ""))
                results["clusters"].append({**got, "system": kind, "round": i + 1,
                                            "system_s": round(time.monotonic() - t0, 1)})
    finally:
        cb.tear_down(zk, tmp_root)
    results["summary"] = summarize(results["runs"], systems, args)
    results["brokers_killed_after_ignoring_sigterm"] = cb.HUNG
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
