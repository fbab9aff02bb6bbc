"""Tiered storage benchmark (issue 34): one ``odradek serve`` with a topic holding 10x more
history than its local retention, its remote part in a store; reads of the remote part
against reads of the local tail, and the copies' rate against the produce rate, measured
side by side in one run.

For each store (``--stores``: ``directory``, a directory store on this disk; ``s3``,
moto's S3 server on 127.0.0.1, ``odradek.devcluster.s3``; a Python server, so its own
cost is in the figures), a fresh broker (``broker_bench.Broker`` with
``remote.log.storage.system.enable``, ``remote.log.manager.task.interval.ms=500``, a
remote read cache of ``--cache-mib``):

1. Produce (after an untimed warm-up produce and read on a third topic):
   ``--records`` records of ``--value-bytes`` bytes (broker_bench's load
   producer: confluent-kafka, acks=1, large batches) into a plain topic and into a tiered
   one (``segment.bytes`` ``--segment-mib``, ``local.retention.bytes`` a tenth of the
   data), alternating which goes first. Measured: records/s and broker CPU of each; the
   tiered topic's copy lag (the broker's ``remotecopylagbytes`` metric) when its produce
   ends and how long until it is zero (every rolled segment copied); bytes copied per
   second over produce + catch-up; the extra broker CPU of the tiered produce over the
   plain one per MiB copied.
2. Consume: once local retention has deleted all but the tail, ``--rounds`` rounds each
   reading K records (K: the local tail's record count) from the
   remote part (round i from offset i*K: never the cached chunks of a round before) and
   the same K from the local tail, alternating which goes first, with kcat (the Python
   client's per-record calls cap any read near 190k records/s here). Measured: records/s
   and broker CPU per million records of each; the ratio remote/local (medians).

The same for Apache Kafka 4.4 (``kafka``: one KRaft node) with Kafka's own
``LocalTieredStorage`` (the remote storage manager of its tiered-storage tests, a
directory store; kafka-storage's 4.3.1 test jar, see ``kafka_tiered_plugin``): the peer
of Odradek's ``directory`` store. Copy lag is read from ListOffsets for both brokers
(the last offset tiered, -5, against the end): records not copied, in segments.

Targets (issue 34): remote reads >= 0.5x the local-read rate; copies keep up with 100% of
the produce rate (the copy lag when the produce ends at most two segments, and gone soon
after).

Run: ``.venv/bin/python bench/tiered_bench.py [--records 6000000] [--rounds 3]
[--stores directory,s3]``. Prints a markdown table and writes
``bench/results/tiered.json``. Every process it starts is stopped by its pid.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from _common import finish, machine_info, machine_line, note
from broker_bench import KAFKA, ODRADEK, Broker, children_cpu_s, kcat_binary, produce
from odradek.devcluster import free_port
from odradek.devcluster.s3 import S3Server

PLAIN, TIERED, WARM = "plain", "tiered", "warm-up"
STORES = ("directory", "kafka", "s3")
PLUGIN_VERSION = "4.3.1"
STORE_NAMES = {"directory": "directory store", "s3": "S3 (moto)",
               "kafka": "LocalTieredStorage (directory)"}
STALL_S = 60.0


class TieredBroker(Broker):
    def __init__(self, tmp_root: str, settings: dict[str, str]) -> None:
        self.metrics_port = free_port()
        settings = {**settings, "metrics.listen": f"127.0.0.1:{self.metrics_port}"}
        self.extra_args = tuple(a for k, v in settings.items() for a in ("--override", f"{k}={v}"))
        super().__init__(ODRADEK, tmp_root)

    def metric(self, name: str, topic: str | None = None) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                      timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name) and (topic is None or f'topic="{topic}"' in line):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def list_offset(bootstrap: str, topic: str, spec: int) -> int:
    from odradek.client.wire import WireClient

    port = int(bootstrap.rsplit(":", 1)[1])
    with WireClient(port) as c:
        r = c.request(2, 11, {"replica_id": -1, "isolation_level": 0, "timeout": 5000,
                              "topics": [{"name": topic, "partitions": [
                                  {"partition_index": 0, "current_leader_epoch": -1,
                                   "timestamp": spec}]}]})
    return int(r.topics[0].partitions[0].offset)


def consume_range(broker: Broker, topic: str, start: int, count: int) -> dict[str, Any]:
    """``count`` records from offset ``start`` with kcat (librdkafka without Python: the
    Python client's per-record calls would cap both reads near 190k records/s), one byte
    printed per record and counted."""
    cmd = [kcat_binary(), "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0",
           "-o", str(start), "-c", str(count), "-e", "-q", "-f", "x"]
    cpu0, child0 = broker.cpu_s(), children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, timeout=STALL_S * 5, check=False)
    seconds = time.perf_counter() - t0
    cpu = broker.cpu_s() - cpu0
    if proc.returncode != 0 or len(proc.stdout) != count:
        raise RuntimeError(f"kcat read {len(proc.stdout):,} of {count:,} records from "
                           f"{start:,} (exit {proc.returncode}): {proc.stderr[-500:]!r}")
    return {"records": count, "seconds": round(seconds, 4),
            "records_s": round(count / seconds),
            "broker_cpu_s_per_m": round(cpu / count * 1e6, 3),
            "client_cpu_s": round(children_cpu_s() - child0, 3)}


def kafka_tiered_plugin() -> str:
    """The class path of Apache Kafka's own ``LocalTieredStorage`` (the remote storage
    manager of Kafka's tiered-storage tests: a directory store): kafka-storage's test
    jar, which Maven Central serves up to 4.3.1 here (not 4.4.0), and a shim of 4.3.1's
    ``LogContext``, which 4.4 moved and the plugin still names. Fetched into
    .cache/kafka-tiered once (Maven; Connect's kafka-clients 4.3.1 from
    scripts/fetch_jvm.sh)."""
    root = Path(".cache/kafka-tiered").resolve()
    test_jar = root / f"kafka-storage-{PLUGIN_VERSION}-test.jar"
    shim = root / "logcontext-shim.jar"
    if not test_jar.exists():
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mvn", "-q", "dependency:copy",
                        f"-Dartifact=org.apache.kafka:kafka-storage:{PLUGIN_VERSION}:jar:test",
                        f"-DoutputDirectory={root}"], check=True, timeout=600)
    if not shim.exists():
        clients = Path(f".cache/connect/lib/kafka-clients-{PLUGIN_VERSION}.jar")
        with zipfile.ZipFile(clients) as src, zipfile.ZipFile(shim, "w") as out:
            for name in src.namelist():
                if name.startswith("org/apache/kafka/common/utils/LogContext"):
                    out.writestr(name, src.read(name))
    return f"{test_jar}:{shim}"


class TieredKafka(Broker):
    """Apache Kafka 4.4 (one KRaft node) with LocalTieredStorage in a directory."""

    def __init__(self, tmp_root: str, remote_dir: str) -> None:
        self.kafka_settings = {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name":
                "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
            "remote.log.storage.manager.class.path": kafka_tiered_plugin(),
            "rsm.config.dir": remote_dir,
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "remote.log.manager.task.interval.ms": "500",
            "log.retention.check.interval.ms": "1000",
            "log.initial.task.delay.ms": "0",
        }
        super().__init__(KAFKA, tmp_root)


def offsets(broker: Broker, topic: str) -> dict[str, int]:
    """The tiers' offsets: end (-1), earliest local (-4), latest tiered (-5)."""
    return {name: list_offset(broker.bootstrap, topic, spec)
            for name, spec in (("end", -1), ("local_start", -4), ("tiered_end", -5))}


def run_store(store: str, args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    s3: S3Server | None = None
    broker: Broker
    if store == "kafka":
        remote = Path(tmp) / "kafka-remote"
        remote.mkdir()
        broker = TieredKafka(tmp, str(remote))
    else:
        if store == "s3":
            s3 = S3Server(Path(tmp) / "s3").start()
            s3.create_bucket("bench")
            rsm = dict(s3.rsm_config("bench"))
        else:
            root = Path(tmp) / "remote"
            root.mkdir()
            rsm = {"rsm.config.storage.backend.class": "filesystem",
                   "rsm.config.storage.root": str(root)}
        broker = TieredBroker(tmp, {
            "remote.log.storage.system.enable": "true",
            "remote.log.manager.task.interval.ms": "500",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "1000",
            "remote.log.index.file.cache.total.size.bytes": str(args.cache_mib << 20),
            **rsm})
    out: dict[str, Any] = {"store": store, "broker": broker.kind}
    try:
        record_bytes = args.value_bytes + 10  # in a large batch, about
        segment = args.segment_mib << 20
        segment_records = segment // record_bytes
        local = max(args.records * record_bytes // 10, 2 * segment)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([
            NewTopic(WARM, 1, 1),
            NewTopic(PLAIN, 1, 1, config={"segment.bytes": str(segment)}),
            NewTopic(TIERED, 1, 1, config={"segment.bytes": str(segment),
                                           "remote.storage.enable": "true",
                                           "local.retention.bytes": str(local)})])
        for f in futures.values():
            f.result(60)
        # Untimed: the broker's first produce and fetch requests cost it one-offs.
        produce(broker, 100_000, args.value_bytes, topic=WARM)
        consume_range(broker, WARM, 0, 1000)
        # Produce: plain and tiered, the order alternating with the store.
        order = (PLAIN, TIERED) if STORES.index(store) % 2 == 0 else (TIERED, PLAIN)
        produced: dict[str, Any] = {}
        for topic in order:
            t0 = time.monotonic()
            m = produce(broker, args.records, args.value_bytes, topic=topic)
            produced[topic] = m.as_dict()
            if topic != TIERED:
                continue
            # Copied: everything but the active segment (at most segment_records).
            at_end = offsets(broker, TIERED)
            end = time.monotonic()
            while True:
                now = offsets(broker, TIERED)
                if now["end"] - now["tiered_end"] - 1 <= segment_records:
                    break
                if time.monotonic() - end > STALL_S:
                    raise RuntimeError(f"copies did not catch up: {now}")
                time.sleep(0.05)
            caught_up = time.monotonic()
            lag = at_end["end"] - at_end["tiered_end"] - 1
            copied_mib = (now["tiered_end"] + 1) * record_bytes / (1 << 20)
            produced["copy"] = {
                "lag_segments_at_produce_end": round(lag / segment_records, 2),
                "catch_up_s": round(caught_up - end, 3),
                "copied_mib_s": round(copied_mib / (caught_up - t0), 1),
            }
        plain, tiered = produced[PLAIN], produced[TIERED]
        produced["ratio_tiered_produce_rate"] = round(tiered["records_s"] / plain["records_s"], 3)
        out["produce"] = produced
        # Consume: wait for local retention to leave only the tail.
        deadline = time.monotonic() + STALL_S
        while True:
            now = offsets(broker, TIERED)
            if now["end"] - now["local_start"] <= local // record_bytes + 2 * segment_records:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"local retention did not delete down to the tail: {now}")
            time.sleep(0.2)
        local_start = now["local_start"]
        k = args.records - local_start
        rounds = []
        for i in range(args.rounds):
            start = i * k
            if start + k > local_start:
                note(f"round {i + 1}: the remote part has no fresh {k:,} records left")
                break
            pair: dict[str, Any] = {}
            for part in (("remote", "local") if i % 2 == 0 else ("local", "remote")):
                begin = start if part == "remote" else local_start
                pair[part] = consume_range(broker, TIERED, begin, k)
            pair["ratio_rate"] = round(pair["remote"]["records_s"] / pair["local"]["records_s"],
                                       3)
            pair["ratio_cpu"] = round(pair["remote"]["broker_cpu_s_per_m"]
                                      / pair["local"]["broker_cpu_s_per_m"], 3)
            note(f"{store} round {i + 1}: remote {pair['remote']['records_s']:,}/s, local "
                 f"{pair['local']['records_s']:,}/s ({pair['ratio_rate']}x)")
            rounds.append(pair)
        out["consume"] = {
            "records_per_read": k, "local_log_start": local_start, "rounds": rounds,
            "median_ratio_rate": statistics.median(r["ratio_rate"] for r in rounds),
            "median_ratio_cpu": statistics.median(r["ratio_cpu"] for r in rounds),
            "median_remote_records_s": statistics.median(r["remote"]["records_s"]
                                                         for r in rounds),
            "median_remote_cpu_s_per_m": statistics.median(
                r["remote"]["broker_cpu_s_per_m"] for r in rounds)}
        errors = [line for line in broker.output().splitlines()
                  if " ERROR " in line or line.startswith("Traceback")]
        out["broker_errors"] = errors[:10]
    finally:
        broker.stop()
        if s3 is not None:
            s3.stop()
    return out


def markdown(results: dict[str, Any]) -> str:
    rows = ["| broker, store | produce plain / tiered (records/s) | copy lag at produce end | "
            "copied after | copy rate | remote / local read rate (rounds) | remote reads, "
            "records/s | broker CPU per M records, remote / local |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results["stores"]:
        p, c = r["produce"], r["consume"]
        rows.append(
            f"| {r['broker']}, {STORE_NAMES[r['store']]} | {p[PLAIN]['records_s']:,} / "
            f"{p[TIERED]['records_s']:,} | {p['copy']['lag_segments_at_produce_end']} "
            f"segments | {p['copy']['catch_up_s']} s | {p['copy']['copied_mib_s']} MiB/s | "
            f"**{c['median_ratio_rate']:.2f}x** ("
            + ", ".join(f"{x['ratio_rate']}" for x in c["rounds"])
            + f") | {round(c['median_remote_records_s']):,} | "
            + f"{c['median_remote_cpu_s_per_m']:.3f} s / "
            + f"{statistics.median(x['local']['broker_cpu_s_per_m'] for x in c['rounds']):.3f} s |")
    by = {r["store"]: r["consume"] for r in results["stores"]}
    lines = [f"{machine_line(results['machine'])}", "", *rows, ""]
    if "kafka" in by and "directory" in by:
        ours, kafka = by["directory"], by["kafka"]
        rate = ours["median_remote_records_s"] / kafka["median_remote_records_s"]
        cpu = ours["median_remote_cpu_s_per_m"] / kafka["median_remote_cpu_s_per_m"]
        lines.append(f"Odradek (directory) / Kafka (LocalTieredStorage), remote reads: "
                     f"{rate:.2f}x the records/s at {cpu:.2f}x the broker CPU per record")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=6_000_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--segment-mib", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cache-mib", type=int, default=64)
    p.add_argument("--stores", default=",".join(STORES))
    p.add_argument("--out", default="bench/results/tiered.json")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, Any] = {"args": vars(args), "machine": machine_info(), "stores": []}
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="tiered-bench-") as tmp:
            note(f"store {store}: {args.records:,} records of {args.value_bytes} bytes")
            results["stores"].append(run_store(store, args, tmp))
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
