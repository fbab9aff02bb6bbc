"""A consume-transform-produce processor, run as its own process by
tests/interop/test_transactions.py so that it can be SIGKILLed at any point.

It reads ``input`` as a static member of ``group`` (read_committed), writes
``value + b":done"`` to ``output`` with the same key, and commits the input offsets in
the same transaction (``send_offsets_to_transaction`` with the member's id and
generation, which the broker checks), one transaction per batch of polled records, with
a little work (``delay_s``) per record so that a kill lands inside transactions too. Any
error ends the process with code 3: the test starts a new one, which (same
``transactional.id``) fences the old and aborts its open transaction before it reads.

Usage: python txn_processor.py '{"bootstrap": ..., "input": ..., "output": ...,
"group": ..., "transactional_id": ..., "delay_s": 0.002}'
Prints "ready" once it has its producer id, then "committed N" after each commit.
"""

from __future__ import annotations

import json
import random
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> int:
    cfg = json.loads(sys.argv[1])
    producer = Producer({
        "bootstrap.servers": cfg["bootstrap"], "transactional.id": cfg["transactional_id"],
        "transaction.timeout.ms": 30_000, "linger.ms": 1,
    })
    # First: fences any earlier instance and waits for its open transaction to abort, so
    # the offsets read next are the ones that committed.
    producer.init_transactions(60)
    print("ready", flush=True)
    consumer = Consumer({
        "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # A static member: the next run takes this one's place in the group at once
        # instead of waiting for a killed run's session to end.
        "group.instance.id": cfg["transactional_id"], "session.timeout.ms": 6000,
    })
    consumer.subscribe([cfg["input"]])
    delay = cfg.get("delay_s", 0.0)
    while True:
        records = [m for m in consumer.consume(num_messages=random.randint(1, 20), timeout=0.5)
                   if m.error() is None]
        if not records:
            continue
        producer.begin_transaction()
        for m in records:
            producer.produce(cfg["output"], key=m.key(), value=m.value() + b":done")
            producer.poll(0)
            time.sleep(delay)
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        print(f"committed {len(records)}", flush=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KafkaException as exc:
        print(f"processor failed: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
