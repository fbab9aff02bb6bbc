"""Python calls per replicated produce: what a change to the replication path costs,
counted instead of timed.

On this shared VM the CPU time of a 3-broker cluster moves 10-30% from run to run (the
brokers share two CPUs with the client and wake each other for every request), so a
change worth 5% cannot be told apart in seconds. Counted, it can: one producer sends
``--requests`` one-record Produce v9 requests (acks=all) in sequence to a
1-partition topic of RF 3 (``min.insync.replicas=2``), each after the answer to the one
before, so every request takes the same path through the cluster: the leader's append,
each follower's fetch woken and answered, its append and next fetch, the high
watermark's step and the produce's answer. Each broker runs under cProfile
(``bench/_calls_site/sitecustomize.py`` on its PYTHONPATH: profiling only while the
requests run) and the figures are calls per request on each broker, which repeat run
to run within ~1-2%: of functions written in Python (the headline: each makes a frame,
~0.1-1 us) and of all functions (C ones too: ``len``, ``list.append``, ``socket.send``,
from tens of ns to a system call). The single broker (RF 1) under the same load is the
reference: what replication adds.
(acks=1 is not counted: its producer does not wait for the followers, so how many
produces one fetch answer carries, and with it the calls, depends on timing.)

Calls are not time: a call of a small Python function counts one, as a whole fetch
handler does. The figure says whether a change took work off the path, ``cluster_bench.py`` and
``partitions_bench.py`` what that is worth in CPU and records/s.

``--before REV`` runs the same on a git revision (a temporary worktree) first and
prints after/before per broker role and the functions whose calls per request moved
most.

    .venv/bin/python bench/calls_bench.py [--requests 2000] [--before HEAD~1]
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cluster_bench as cb
from _common import finish, machine_info, machine_line, note
from odradek.client.wire import WireClient
from odradek.devcluster.zookeeper import ZooKeeperServer
from odradek.records import builder
from partitions_bench import make_topic

REPO = Path(__file__).resolve().parent.parent
SITE = Path(__file__).resolve().parent / "_calls_site"
WARMUP = 200  # requests before counting: first-request paths (versions, sessions) out
DUMP_TIMEOUT_S = 30


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        os.kill(pid, sig)


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
BUILTIN = "~("  # cProfile's file name for C functions (len, list.append, socket.send)


def _counts(path: str) -> Counter[str]:
    """Calls per function (``module(name)``: no line numbers, which move between two
    revisions, and no object addresses) of one broker's dump."""
    stats = pstats.Stats(path)
    out: Counter[str] = Counter()
    for (file, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        short = file.split("/src/")[-1].split("/lib/python3.11/")[-1]
        out[f"{short}({_ADDRESS.sub('', name)})"] += row[1]
    return out


def count_load(cluster: Any, requests: int, dumps: Path, label: str) -> dict[str, Any]:
    """``requests`` one-record acks=all produces to a new 1-partition topic; each
    broker's calls per request, by role (leader, follower)."""
    topic = f"calls-{label}"
    make_topic(cluster, topic, 1)
    leader = cluster.metadata_leaders(topic, 1)[0]
    pids = cluster.broker_pids()
    address = getattr(cluster.brokers[leader], "bootstrap", cluster.bootstrap)
    port = int(address.rsplit(":", 1)[1])
    batch = builder.build_simple([os.urandom(100)], timestamp=int(time.time() * 1000))
    body = {"transactional_id": None, "acks": -1, "timeout": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0,
                                                               "records": batch}]}]}
    for old in dumps.glob("calls-*.prof"):
        old.unlink()
    with WireClient(port, timeout=60) as client:
        for _ in range(WARMUP):
            client.request(0, 9, body)
        _signal_all(list(pids.values()), signal.SIGUSR1)
        try:
            for i in range(requests):
                answer = client.request(0, 9, body)
                code = answer.responses[0].partition_responses[0].error_code
                if code:
                    raise RuntimeError(f"request {i}: error {code!r}")
        finally:
            _signal_all(list(pids.values()), signal.SIGUSR1)
    _signal_all(list(pids.values()), signal.SIGUSR2)
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    files = {node: dumps / f"calls-{pid}.prof" for node, pid in pids.items()}
    while not all(f.exists() for f in files.values()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no profile dump from {[n for n, f in files.items()]}")
        time.sleep(0.1)
    time.sleep(0.5)  # written whole (dump_stats writes in one go; give it a moment)
    brokers = {}
    for node, path in files.items():
        counts = _counts(str(path))
        role = "leader" if node == leader else "follower"
        python = sum(n for name, n in counts.items() if not name.startswith(BUILTIN))
        brokers[node] = {"role": role, "calls_per_request": sum(counts.values()) / requests,
                         "python_calls_per_request": python / requests,
                         "functions": {k: v / requests for k, v in counts.most_common(400)}}
    return {"requests": requests, "leader": leader, "brokers": brokers,
            "calls_per_request": sum(b["calls_per_request"] for b in brokers.values()),
            "python_calls_per_request": sum(b["python_calls_per_request"]
                                            for b in brokers.values())}


def run_side(src: Path, requests: int, tmp_root: str) -> dict[str, Any]:
    """The cluster and the single broker from source tree ``src``, counted."""
    dumps = Path(tempfile.mkdtemp(prefix="calls-", dir=tmp_root))
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "BENCH_CALLS_DIR")}
    os.environ["PYTHONPATH"] = f"{SITE}:{src}"
    os.environ["BENCH_CALLS_DIR"] = str(dumps)
    out: dict[str, Any] = {}
    zk = None

    def counted(system: Any, name: str) -> None:
        system.start()
        try:
            out[f"{name} acks=all"] = count_load(system, requests, dumps, name)
        finally:
            system.stop()
            system.remove()

    try:
        counted(cb.SingleNode(tmp_root), "single")
        zk = ZooKeeperServer(Path(tmp_root) / "zookeeper")
        zk.start()
        counted(cb.Cluster(zk, tmp_root, {}), "cluster")
    finally:
        if zk is not None:
            zk.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(dumps, ignore_errors=True)
    return out


def _by_role(load: dict[str, Any], key: str = "python_calls_per_request"
             ) -> dict[str, float]:
    """Calls per request of the leader and of the followers (their mean)."""
    roles: dict[str, list[float]] = {}
    for b in load["brokers"].values():
        roles.setdefault(b["role"], []).append(b[key])
    return {role: sum(v) / len(v) for role, v in roles.items()}


def _functions(load: dict[str, Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    for b in load["brokers"].values():
        for name, n in b["functions"].items():
            total[name] += n
    return total


def markdown(results: dict[str, Any]) -> str:
    sides = results["sides"]
    lines = [machine_line(results["machine"]),
             f"load: one producer, {results['requests']:,} one-record Produce v9 requests in "
             "sequence after a warm-up, to a 1-partition topic (RF 3, min.insync.replicas=2 "
             "on the cluster; RF 1 on the single broker); calls per request (cProfile): of "
             "functions written in Python (each a frame), and of all functions (C ones such "
             "as len or list.append too)", "",
             "| tree | load | leader | each follower | all brokers | x single | all calls |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for side, loads in sides.items():
        single = loads["single acks=all"]["python_calls_per_request"]
        for name, load in loads.items():
            roles = _by_role(load)
            follower = roles.get("follower")
            python = load["python_calls_per_request"]
            lines.append(f"| {side} | {name} | {roles['leader']:,.0f} | "
                         f"{'-' if follower is None else f'{follower:,.0f}'} | "
                         f"{python:,.0f} | {python / single:.2f} | "
                         f"{load['calls_per_request']:,.0f} |")
    if "before" in sides:
        lines += ["", "| load | role | after / before: Python calls | all calls |",
                  "|---|---|---:|---:|"]
        for name in sides["after"]:
            a, b = _by_role(sides["after"][name]), _by_role(sides["before"][name])
            a_all = _by_role(sides["after"][name], "calls_per_request")
            b_all = _by_role(sides["before"][name], "calls_per_request")
            for role in a:
                lines.append(f"| {name} | {role} | {a[role] / b[role]:.3f} | "
                             f"{a_all[role] / b_all[role]:.3f} |")
        moved = _functions(sides["after"]["cluster acks=all"])
        moved.subtract(_functions(sides["before"]["cluster acks=all"]))
        biggest = sorted(moved.items(), key=lambda kv: -abs(kv[1]))[:12]
        lines += ["", "calls per request that moved most (cluster acks=all, all brokers): "
                  + "; ".join(f"{name} {n:+.1f}" for name, n in biggest)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="counted requests (2,000)")
    ap.add_argument("--before", default=None, metavar="REV",
                    help="count a git revision too, first, and print after / before")
    ap.add_argument("--dir", default="/tmp", help="temporary data dirs (default /tmp)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "calls.json"))
    args = ap.parse_args(argv)
    tmp_root = tempfile.mkdtemp(prefix="odradek-calls-bench-", dir=args.dir)
    sides: dict[str, dict[str, Any]] = {}
    worktree = os.path.join(tmp_root, "before")
    try:
        if args.before is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", worktree,
                            args.before], check=True, capture_output=True)
            note(f"before ({args.before}) ...")
            sides["before"] = run_side(Path(worktree) / "src", args.requests, tmp_root)
        note("after (working tree) ..." if args.before else "counting ...")
        sides["after" if args.before else "tree"] = run_side(REPO / "src", args.requests,
                                                             tmp_root)
    finally:
        if args.before is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            worktree], check=False, capture_output=True)
        cb.tear_down(None, tmp_root)
    results = {"machine": machine_info(), "requests": args.requests, "before": args.before,
               "sides": sides}
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
