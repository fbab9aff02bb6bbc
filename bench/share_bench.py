"""Share-group benchmark (issue 32, KIP-932 "queues"): consuming one partition through a
share group, Odradek against Apache Kafka 4.4, side by side in one run.

Each round starts a fresh broker of each kind (``broker_bench.Broker``: ``odradek
serve``, and Apache Kafka 4.4 as one KRaft node), in an order reversed every other
round, makes a one-partition topic, produces ``--records`` records of ``--value-bytes``
bytes (confluent-kafka, acks=1, batches of at most ``--batch`` records: a share fetch
acquires whole batches), sets the group config ``share.auto.offset.reset=earliest`` on a
new share group, and then, for each consumer count of ``--consumers`` (default 1 and 4),
starts that many consumer processes (librdkafka's share consumer, confluent-kafka 2.16
``ShareConsumer``, implicit acknowledgement, ``max.poll.records`` 500), each in a group of
its own per count, until they have received every record between them.

Measured per broker and consumer count: records/s from the consumers' start to the last
distinct record received (group start-up inside: Kafka 4.4 assigns a joining member its
partitions one heartbeat later, 5 s), and from the first record received (the steady
rate); the broker's CPU seconds per million records over the whole time (``/proc``);
deliveries with a delivery count above 1 (redeliveries); the ratios Odradek/Kafka,
medians over the rounds.

Run: ``.venv/bin/python bench/share_bench.py [--records 200000] [--rounds 3]
[--consumers 1,4]`` (Kafka needs Java 17+ and ``bash scripts/fetch_jvm.sh``); it prints a
markdown table and writes ``bench/results/share.json``. Every process it starts is
stopped by its pid.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info, machine_line, note
from broker_bench import KAFKA, ODRADEK, Broker

RESULTS = Path(__file__).parent / "results" / "share.json"
TOPIC = "share-bench"
DEADLINE_S = 600.0


def produce(bootstrap: str, records: int, value_bytes: int, batch: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "batch.num.messages": batch})
    value = b"x" * value_bytes
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def prepare(bootstrap: str, groups: Sequence[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result(30)
    for group in groups:
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([resource]).values():
            f.result(30)


def consume(bootstrap: str, group: str, seen: Any, distinct: Any, first: Any,
            redelivered: Any, total: int) -> None:
    """One share consumer: poll until the consumers between them have every record
    (``seen``: a flag per offset; ``distinct``: how many are set)."""
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "max.poll.records": 500})
    c.subscribe([TOPIC])
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline and distinct.value < total:
            msgs = [m for m in c.poll(0.2) or [] if m.error() is None]
            if not msgs:
                continue
            new = again = 0
            with seen.get_lock():
                for m in msgs:
                    if m.delivery_count() > 1:
                        again += 1
                    if not seen[m.offset()]:
                        seen[m.offset()] = 1
                        new += 1
            with distinct.get_lock():
                if distinct.value == 0:
                    first.value = time.monotonic()
                distinct.value += new
            if again:
                with redelivered.get_lock():
                    redelivered.value += again
    finally:
        c.close()


def run_consumers(broker: Broker, group: str, count: int, total: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    seen, distinct = ctx.Array("b", total), ctx.Value("q", 0)
    first, redelivered = ctx.Value("d", 0.0), ctx.Value("q", 0)
    cpu0, t0 = broker.cpu_s(), time.monotonic()
    procs = [ctx.Process(target=consume, args=(broker.bootstrap, group, seen, distinct, first,
                                               redelivered, total)) for _ in range(count)]
    for p in procs:
        p.start()
    while distinct.value < total and time.monotonic() - t0 < DEADLINE_S:
        time.sleep(0.01)
    end, cpu = time.monotonic(), broker.cpu_s() - cpu0
    for p in procs:
        p.join(60)
        if p.is_alive():
            p.kill()
            p.join()
    got = distinct.value
    elapsed = end - t0
    return {"consumers": count, "records": got, "finished": got >= total,
            "seconds": elapsed, "records_per_s": got / elapsed,
            # From the first record received: the group's start-up left out (Kafka 4.4
            # assigns a joining member its partitions one heartbeat, 5 s, later).
            "first_record_s": first.value - t0 if first.value else None,
            "steady_records_per_s": got / (end - first.value) if first.value else None,
            "broker_cpu_s_per_m": cpu / max(got, 1) * 1e6,
            "redelivered": redelivered.value}


def round_for(kind: str, args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    broker = Broker(kind, workdir)
    try:
        groups = [f"share-bench-{n}" for n in args.consumers]
        prepare(broker.bootstrap, groups)
        produce(broker.bootstrap, args.records, args.value_bytes, args.batch)
        out = {}
        for n, group in zip(args.consumers, groups, strict=True):
            result = run_consumers(broker, group, n, args.records)
            note(f"{kind}: {n} consumer(s): {result['records_per_s']:,.0f} records/s, "
                 f"{result['broker_cpu_s_per_m']:.1f} broker CPU s per million")
            out[str(n)] = result
        return out
    finally:
        broker.stop()


def summarize(rounds: list[dict[str, Any]], counts: Sequence[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in counts:
        key = str(n)
        rate = [r[ODRADEK][key]["records_per_s"] / r[KAFKA][key]["records_per_s"]
                for r in rounds]
        cpu = [r[ODRADEK][key]["broker_cpu_s_per_m"] / r[KAFKA][key]["broker_cpu_s_per_m"]
               for r in rounds]
        steady = [r[ODRADEK][key]["steady_records_per_s"] / r[KAFKA][key]["steady_records_per_s"]
                  for r in rounds]
        out[key] = {
            "rate_ratio_median": statistics.median(rate), "rate_ratios": rate,
            "steady_ratio_median": statistics.median(steady), "steady_ratios": steady,
            "cpu_ratio_median": statistics.median(cpu), "cpu_ratios": cpu,
            "odradek_records_per_s": statistics.median(
                r[ODRADEK][key]["records_per_s"] for r in rounds),
            "kafka_records_per_s": statistics.median(
                r[KAFKA][key]["records_per_s"] for r in rounds),
            "odradek_cpu_s_per_m": statistics.median(
                r[ODRADEK][key]["broker_cpu_s_per_m"] for r in rounds),
            "kafka_cpu_s_per_m": statistics.median(
                r[KAFKA][key]["broker_cpu_s_per_m"] for r in rounds),
            "redelivered": sum(r[s][key]["redelivered"] for r in rounds for s in r),
            "all_finished": all(r[s][key]["finished"] for r in rounds for s in r),
        }
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [machine_line(results["machine"], f"{results['records']:,} records of "
                          f"{results['value_bytes']} B, {results['rounds']} round(s)"), "",
             "| consumers | Odradek records/s | Kafka records/s | rate ratio (median) "
             "| from the first record | Odradek CPU s/M | Kafka CPU s/M | CPU ratio (median) "
             "| redelivered |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n, s in results["summary"].items():
        lines.append(
            f"| {n} | {s['odradek_records_per_s']:,.0f} | {s['kafka_records_per_s']:,.0f} "
            f"| {s['rate_ratio_median']:.2f}x ({', '.join(f'{x:.2f}' for x in s['rate_ratios'])}) "
            f"| {s['steady_ratio_median']:.2f}x "
            f"| {s['odradek_cpu_s_per_m']:.1f} | {s['kafka_cpu_s_per_m']:.1f} "
            f"| {s['cpu_ratio_median']:.2f}x ({', '.join(f'{x:.2f}' for x in s['cpu_ratios'])}) "
            f"| {s['redelivered']} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--batch", type=int, default=500, help="records per produced batch, at most")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--consumers", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 4])
    p.add_argument("--dir", default=None, help="where the brokers' data goes")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="share-bench-", dir=args.dir) as workdir:
        for i in range(args.rounds):
            order = [ODRADEK, KAFKA] if i % 2 == 0 else [KAFKA, ODRADEK]
            rounds.append({kind: round_for(kind, args, workdir) for kind in order})
    results = {"machine": machine_info(), "records": args.records,
               "value_bytes": args.value_bytes, "batch": args.batch, "rounds": args.rounds,
               "runs": rounds, "summary": summarize(rounds, args.consumers)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
