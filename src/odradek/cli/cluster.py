"""``odradek cluster``: a development cluster in one command, and what a cluster says
about itself.

- ``odradek cluster up [--brokers 3] [--brokers-per-host K] [--zookeeper HOST:PORT/CHROOT]
  [--data-dir DIR] [--port BASE] [--override NAME=VALUE ...]`` starts a ZooKeeper (unless
  given one) and N brokers on 127.0.0.1:BASE, BASE+1, ... (node ids 1..N), data under
  ``./odradek-cluster``; with ``--brokers-per-host`` each K consecutive brokers share a
  ``broker.rack`` (``host-1``, ``host-2``, ...: the layout of K brokers per host, one
  per core, rehearsed on one machine); it waits until every broker sees every other, prints
  ``Odradek cluster ready: bootstrap.servers=...`` and runs until Ctrl-C or SIGTERM,
  then stops the brokers one at a time (each a controlled shutdown), the controller
  last, and ZooKeeper. The processes themselves are ``odradek.devcluster``'s.
- ``odradek cluster status [--bootstrap-server HOST:PORT]``: the brokers, the
  controller, and the under-replicated and offline partitions, from a Metadata answer
  (``odradek.client.metadata``).

Exit codes: 0 done (``up``: stopped cleanly), 1 a failure (``up``: a broker failed to
start, died or did not stop cleanly), 2 bad usage, 130 interrupted while starting.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from odradek.cli.tools import _positive
from odradek.client.metadata import PartitionState
from odradek.devcluster import ClusterError, DevCluster, host_racks

READY_PREFIX = "Odradek cluster ready: bootstrap.servers="
DEFAULT_DATA_DIR = "odradek-cluster"


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text}")
    return value


def add_cluster_command(subparsers: Any) -> None:
    """Add ``cluster up|status`` to the ``odradek`` subcommands."""
    from odradek.cli.tools import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP
    from odradek.devcluster import DEFAULT_BASE_PORT

    cluster = subparsers.add_parser(
        "cluster", help="run a local cluster, or show a cluster's state",
        description="A development cluster in one command, and a cluster's health.")
    csub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    up = csub.add_parser(
        "up", help="start ZooKeeper and N brokers here; Ctrl-C stops them",
        description="Start a ZooKeeper (unless --zookeeper names one) and N brokers on "
                    "127.0.0.1, print the bootstrap servers, and run until Ctrl-C or "
                    "SIGTERM. The same --data-dir again is the same cluster.")
    up.add_argument("--brokers", type=_positive, default=3, metavar="N",
                    help="number of brokers, node ids 1..N (default 3)")
    up.add_argument("--brokers-per-host", type=_positive, default=None, metavar="K",
                    help="lay the brokers out K to a host: brokers 1..K get broker.rack "
                         "host-1, the next K host-2, ..., so a partition's replicas go to "
                         "different hosts (default: no racks)")
    up.add_argument("--zookeeper", default=None, metavar="HOST:PORT[/CHROOT]",
                    help="use this ZooKeeper instead of starting one")
    up.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                    help=f"where ZooKeeper, the brokers and their logs keep their files "
                         f"(default ./{DEFAULT_DATA_DIR})")
    up.add_argument("--port", type=_port, default=DEFAULT_BASE_PORT, metavar="BASE",
                    help=f"broker N listens on BASE+N-1 (default {DEFAULT_BASE_PORT})")
    up.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                    help="a broker setting for every broker (repeatable)")

    status = csub.add_parser(
        "status", help="brokers, controller, under-replicated and offline partitions")
    status.add_argument(
        "--bootstrap-server", default=None, metavar="HOST:PORT",
        help=f"the broker(s) to ask, comma-separated (default ${BOOTSTRAP_ENV}, else "
             f"{DEFAULT_BOOTSTRAP})")
    status.add_argument("--request-timeout-ms", type=_positive, default=30_000,
                        metavar="MS", help="how long to wait for an answer (default 30000)")


def run_cluster_command(args: argparse.Namespace) -> int:
    if args.cluster_command == "up":
        return _up(args)
    return _status(args)


# --- up ------------------------------------------------------------------------------------


def _say(text: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def _up(args: argparse.Namespace) -> int:
    overrides: dict[str, str] = {}
    for item in args.override:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            _say(f"odradek cluster up: --override needs NAME=VALUE, got {item!r}", err=True)
            return 2
        overrides[name.strip()] = value
    fixed = ("node.id", "broker.id", "zookeeper.connect",
             *(("broker.rack",) if args.brokers_per_host else ()))
    for name in fixed:
        if name in overrides:
            why = "--brokers-per-host" if name == "broker.rack" else "the cluster itself"
            _say(f"odradek cluster up: {name} is set by {why}", err=True)
            return 2
    if args.port + args.brokers - 1 > 65535:
        _say(f"odradek cluster up: {args.brokers} brokers from port {args.port} go past "
             "65535", err=True)
        return 2

    root = Path(args.data_dir)
    # Stopping is the main thread's: a signal only asks for it (a second one hurries).
    signals: list[int] = []
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        signals.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    racks = host_racks(args.brokers, args.brokers_per_host) if args.brokers_per_host else {}
    cluster = DevCluster(root, args.brokers, zookeeper=args.zookeeper, base_port=args.port,
                         settings=overrides, node_settings=racks, die_with_parent=True)
    try:
        return _run(cluster, stop, signals)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(cluster: DevCluster, stop: threading.Event, signals: list[int]) -> int:
    def zookeeper_started() -> None:
        if cluster.zookeeper is not None:
            _say(f"ZooKeeper on {cluster.zookeeper.connect_string} "
                 f"(pid {cluster.zookeeper.pid}; data {cluster.zookeeper.data_dir}, "
                 f"log {cluster.zookeeper.log_path})")
        else:
            _say(f"ZooKeeper: {cluster.zookeeper_connect}")
        _say(f"starting {cluster.size} broker{'s' if cluster.size > 1 else ''} ...")

    try:
        cluster.start(interrupted=stop.is_set, on_zookeeper=zookeeper_started)
    except ClusterError as exc:
        if stop.is_set():
            _say("odradek cluster up: interrupted while starting; stopped", err=True)
            return 130
        _say(f"odradek cluster up: {exc}", err=True)
        return 1
    for broker in cluster.brokers.values():
        rack = broker.settings.get("broker.rack")
        _say(f"broker {broker.node_id} on {broker.bootstrap} ("
             + (f"rack {rack}; " if rack else "")
             + f"pid {broker.pid}; data {broker.data_dir}, log {broker.log_path})")
    _say(f"cluster id {cluster.cluster_id}, controller: broker {cluster.controller()}")
    # The line a script waits for, last of the startup.
    _say(READY_PREFIX + cluster.bootstrap)
    _say("Ctrl-C stops the cluster.")

    reported: set[object] = set()
    while not stop.wait(0.5):
        for broker in cluster.dead():
            if broker.node_id not in reported:
                reported.add(broker.node_id)
                _say(f"odradek cluster up: broker {broker.node_id} (pid {broker.pid}) exited "
                     f"with code {broker.returncode}; the others go on\n"
                     f"{broker.describe_log(15)}", err=True)
        zk = cluster.zookeeper
        if zk is not None and not zk.running and "zookeeper" not in reported:
            reported.add("zookeeper")
            _say(f"odradek cluster up: ZooKeeper exited with code {zk.returncode}; the "
                 f"brokers cannot elect leaders or change ISRs until it is back\n"
                 f"--- {zk.log_path} (tail):\n{zk.output(tail=15)}", err=True)
        if len([n for n in reported if isinstance(n, int)]) == cluster.size:
            _say("odradek cluster up: every broker has exited; stopping", err=True)
            break

    _say("stopping the brokers, the controller last (Ctrl-C again kills them) ...")

    def stopped(node: int, code: int | None) -> None:
        _say(f"broker {node} stopped" + ("" if code == 0 else f" (exit code {code})"))

    problem: ClusterError | None = None
    try:
        cluster.close(on_stop=stopped, hurry=lambda: len(signals) > 1)
    except ClusterError as exc:  # raised once everything is stopped, ZooKeeper too
        problem = exc
    if cluster.zookeeper is not None:
        _say("ZooKeeper stopped")
    if problem is not None:
        _say(f"odradek cluster up: {problem}", err=True)
        return 1
    return 1 if reported else 0


# --- status --------------------------------------------------------------------------------


def partition_line(p: PartitionState) -> str:
    """A partition as ``kafka-topics.sh --describe`` prints it, with the leader epoch
    and (when there are any) the offline replicas and the error."""
    leader = p.leader if p.leader >= 0 else "none"
    line = (f"\tTopic: {p.topic}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}\tLeaderEpoch: {p.leader_epoch}")
    if p.offline_replicas:
        line += f"\tOffline: {_ids(p.offline_replicas)}"
    if p.error is not None:
        line += f"\tError: {p.error}"
    return line


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)


def _status(args: argparse.Namespace) -> int:
    from odradek.cli.tools import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP
    from odradek.client.metadata import KafkaClientError, fetch_metadata

    bootstrap = args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP
    try:
        metadata = fetch_metadata(bootstrap, timeout_s=args.request_timeout_ms / 1000)
    except KafkaClientError as exc:
        _say(f"odradek cluster status: cannot reach the broker at {bootstrap}: {exc}",
             err=True)
        return 1
    except KeyboardInterrupt:
        _say("odradek cluster status: interrupted", err=True)
        return 130
    controller = metadata.controller_id
    lines = [f"Cluster id: {metadata.cluster_id}",
             f"Controller: {controller if controller >= 0 else 'none'}",
             f"Brokers: {len(metadata.brokers)}"]
    for node in sorted(metadata.brokers):
        broker = metadata.brokers[node]
        lines.append(f"\tId: {node}\tAddress: {broker.address}\tRack: {broker.rack or '-'}"
                     + ("\t(controller)" if node == controller else ""))
    # Replicas on brokers the cluster does not list as live: stopped or dead brokers.
    missing = sorted({r for p in metadata.partitions() for r in p.offline_replicas})
    if missing:
        lines.append(f"Brokers not live that hold replicas: {_ids(tuple(missing))}")
    partitions = metadata.partitions()
    under = metadata.under_replicated()
    offline = metadata.unavailable()
    lines.append(f"Partitions: {len(partitions)} in {len(metadata.topics)} topics")
    lines.append(f"Under-replicated partitions: {len(under)}")
    lines += [partition_line(p) for p in under]
    lines.append(f"Offline partitions: {len(offline)}")
    lines += [partition_line(p) for p in offline]
    _say("\n".join(lines))
    return 0
