"""Reassignment benchmark (issue 16): a partition moved onto a new broker, unthrottled and
throttled, beside a producer that keeps writing to the cluster.

Against processes it starts itself (``cluster_bench``'s: a Debian ZooKeeper and
``odradek serve`` brokers 1..3 on free ports of 127.0.0.1, default config but
``zookeeper.connect``/``node.id``), plus broker 4 started once the three run. Per round:

1. Unthrottled move (the replication capacity, "the disk" of the target): topic
   ``move-free`` (1 partition on brokers [1,2,3], min.insync.replicas=2) is filled with
   ``--megabytes`` MB of 1,000-byte records (acks=all), then moved to [2,3,4]
   (AlterPartitionReassignments, the controller's own request); the time from the
   request until broker 4's copy holds every byte gives its rate.
2. Throttled move under load: topic ``move-throttled`` is filled the same way; the
   producer process of ``cluster_bench`` (``FailoverProducer``: acks=all, linger.ms=5,
   delivery reports timed as served) writes ``--producer-rate`` records/s of
   ``--value-bytes`` to topic ``failover`` (1 partition on [1,2,3]); its acknowledgement
   rate is measured over ``--steady-s`` seconds before the move; then the throttle is
   set as ``kafka-reassign-partitions.sh --throttle`` sets it (the rates as dynamic
   configs of brokers 1..4, the old replicas as ``leader.replication.throttled.replicas``,
   the new one as ``follower.replication.throttled.replicas``) at ``--throttle-share`` of
   the unthrottled rate, and the partition is moved to [2,3,4]. Measured: the new
   replica's fill rate between 20% and 90% of the data against the throttle, and the
   producer's acknowledgement rate during that span against its rate before. Targets:
   the move within 20% of the throttle; the producer >= 0.8x with the throttle at half
   the disk.

Run: ``.venv/bin/python bench/reassign_bench.py [--megabytes 40] [--rounds 1]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import cluster_bench as cb
from _common import finish, note, shown_path
from odradek.cli.reassign import set_throttles
from odradek.client.admin import alter_reassignments
from odradek.devcluster import BrokerProcess, ZooKeeperServer

RECORD_BYTES = 1000
MOVE_TARGET_RATIO = 0.2  # the throttled move within 20% of the throttle
PRODUCER_TARGET = 0.8


def _dir_bytes(path: str | Path) -> int:
    p = Path(path)
    return sum(f.stat().st_size for f in p.glob("*.log")) if p.exists() else 0


def fill(bootstrap: str, topic: str, megabytes: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]],
                                  config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "compression.type": "none", "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 1_000_000})
    value = bytes(RECORD_BYTES)
    for i in range(megabytes * 1000):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError(f"filling {topic}: records not acknowledged")
    return megabytes * 1000


def move(cluster: cb.Cluster, new: BrokerProcess, topic: str, total: int
         ) -> list[tuple[float, int]]:
    """Move ``topic``-0 to [2,3,4]; broker 4's copy size over time, until complete."""
    result = alter_reassignments(cluster.bootstrap, {(topic, 0): [2, 3, 4]})
    if result != {(topic, 0): (None, None)}:
        raise RuntimeError(f"reassignment of {topic} refused: {result}")
    path = os.path.join(new.data_dir, f"{topic}-0")
    samples = [(time.monotonic(), 0)]
    deadline = time.monotonic() + 600
    while True:
        cb.check_interrupted()
        size = _dir_bytes(path)
        samples.append((time.monotonic(), size))
        state = cluster.state(topic, 0)
        done = state is not None and 1 not in state[0]["isr"] and size >= total
        if done:
            return samples
        if time.monotonic() > deadline:
            raise RuntimeError(f"the move of {topic} did not finish: {samples[-1]}")
        time.sleep(0.05)


def span(samples: list[tuple[float, int]], total: int) -> tuple[float, float, float]:
    """(start, end, bytes/s) between 20% and 90% of ``total``."""
    t0, b0 = next(s for s in samples if s[1] >= 0.2 * total)
    t1, b1 = next(s for s in samples if s[1] >= 0.9 * total)
    return t0, t1, (b1 - b0) / max(t1 - t0, 1e-9)


def acks_between(acks: list[tuple[float, int]], wall0: float, wall1: float) -> float:
    n = sum(1 for t, _ in acks if wall0 <= t < wall1)
    return n / max(wall1 - wall0, 1e-9)


def one_round(zk: ZooKeeperServer, args: argparse.Namespace, root: str) -> dict[str, Any]:
    cluster = cb.Cluster(zk, root, {})
    try:
        cluster.start()
        new = cluster.add_broker()  # broker 4, once every broker lists it
        fill(cluster.bootstrap, "move-free", args.megabytes)
        total = _dir_bytes(os.path.join(cluster.brokers[1].data_dir, "move-free-0"))
        note(f"  unthrottled move of {total / 1e6:.1f} MB")
        free = move(cluster, new, "move-free", total)
        free_rate = total / (free[-1][0] - free[0][0])
        throttle = int(free_rate * args.throttle_share)
        note(f"  unthrottled: {free_rate / 1e6:.1f} MB/s; throttle {throttle / 1e6:.2f} MB/s")

        fill(cluster.bootstrap, "move-throttled", args.megabytes)
        total = _dir_bytes(os.path.join(cluster.brokers[1].data_dir, "move-throttled-0"))
        cb.create_topic(cluster.bootstrap, cb.FAILOVER_TOPIC, 1, 3,
                        {"min.insync.replicas": "2"})
        producer = cb.FailoverProducer(cluster.bootstrap, args.producer_rate, args.value_bytes,
                                       "")
        try:
            time.sleep(2)  # past the first acks=all answers of a new partition
            before0 = time.time()
            time.sleep(args.steady_s)
            before1 = time.time()
            set_throttles(cluster.bootstrap, {("move-throttled", 0): [2, 3, 4]},
                           {("move-throttled", 0): [1, 2, 3]}, throttle)
            offset = time.time() - time.monotonic()
            samples = move(cluster, new, "move-throttled", total)
            time.sleep(0.5)
        finally:
            report = producer.finish()
        t0, t1, moved_rate = span(samples, total)
        acks = report["acks"]
        before = acks_between(acks, before0, before1)
        during = acks_between(acks, t0 + offset, t1 + offset)
        out = {
            "bytes": total, "unthrottled_bytes_s": round(free_rate),
            "unthrottled_s": round(free[-1][0] - free[0][0], 2), "throttle_bytes_s": throttle,
            "throttled_bytes_s": round(moved_rate),
            "move_vs_throttle": round(moved_rate / throttle, 3),
            "throttled_s": round(samples[-1][0] - samples[0][0], 2),
            "producer_before_per_s": round(before), "producer_during_per_s": round(during),
            "producer_ratio": round(during / before, 3) if before else None,
            "producer_errors": report["errors"],
        }
        note(f"  throttled: {moved_rate / 1e6:.2f} MB/s ({out['move_vs_throttle']}x the "
             f"throttle); producer {before:.0f}/s before, {during:.0f}/s during "
             f"({out['producer_ratio']}x)")
        return out
    finally:
        cluster.stop()
        cluster.remove()


def markdown(results: dict[str, Any]) -> str:
    rounds = results["rounds"]
    med = {k: statistics.median(r[k] for r in rounds)
           for k in ("unthrottled_bytes_s", "throttle_bytes_s", "throttled_bytes_s",
                     "move_vs_throttle", "producer_before_per_s", "producer_during_per_s",
                     "producer_ratio")}
    p = results["params"]
    lines = [
        f"Partition reassignment, {p['megabytes']} MB moved from [1,2,3] to [2,3,4] "
        f"(median of {len(rounds)} round(s)):",
        "",
        "| | figure | target |",
        "|---|---|---|",
        f"| unthrottled move (\"the disk\") | {med['unthrottled_bytes_s'] / 1e6:.1f} MB/s | |",
        f"| throttle ({p['throttle_share']} of it) | {med['throttle_bytes_s'] / 1e6:.2f} MB/s"
        " | |",
        f"| throttled move, 20%..90% | {med['throttled_bytes_s'] / 1e6:.2f} MB/s "
        f"({med['move_vs_throttle']:.2f}x the throttle) | within 20% |",
        f"| producer acks/s before -> during the move ({p['producer_rate']} offered) | "
        f"{med['producer_before_per_s']:.0f} -> {med['producer_during_per_s']:.0f} "
        f"({med['producer_ratio']:.2f}x) | >= {PRODUCER_TARGET}x |",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=40, help="data moved per topic")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--throttle-share", type=float, default=0.5,
                        help="the throttle as a share of the unthrottled move's rate")
    parser.add_argument("--producer-rate", type=int, default=5000,
                        help="records/s the producer offers during the throttled move")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--steady-s", type=float, default=5.0)
    parser.add_argument("--dir", default=None, help="where data and logs go (default: /tmp)")
    parser.add_argument("--out", default="bench/results/reassign.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, cb._raise_interrupt)
    root = tempfile.mkdtemp(prefix="odradek-reassign-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "reassign",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": cb.broker_machine_info(),
        "params": {"megabytes": args.megabytes, "throttle_share": args.throttle_share,
                   "producer_rate": args.producer_rate, "value_bytes": args.value_bytes,
                   "steady_s": args.steady_s, "record_bytes": RECORD_BYTES},
        "rounds": [],
    }
    zk = ZooKeeperServer(Path(root) / "zookeeper")
    try:
        zk.start()
        for i in range(args.rounds):
            note(f"round {i + 1}/{args.rounds}")
            results["rounds"].append(one_round(zk, args, root))
    finally:
        cb._stop_leftovers()
        zk.stop()
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
