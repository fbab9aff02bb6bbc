"""One consumer-group member as a process of its own, for tests/interop/test_groups.py.

    python tests/interop/group_member.py '{"client": "confluent", "bootstrap": "...",
        "group": "g", "topics": ["t"], ...}'

It subscribes, and prints one JSON object per line on stdout, flushed at once:
``{"e": "assigned", "p": [[topic, partition], ...]}`` and ``{"e": "revoked", ...}`` on
rebalances (for cooperative assignors these are the increments), and
``{"e": "rec", "t": topic, "p": partition, "o": offset, "v": value}`` for each record.
Offsets are committed after the record is printed (at least once): auto-commit of the
offsets stored after processing. It runs until its stdin closes, then closes the consumer
(commit, LeaveGroup) and prints ``{"e": "closed"}``. A test that SIGKILLs it gets a member
that vanishes without a word, as a crashed machine does.

Settings: ``client`` confluent | kafka-python | aiokafka; ``strategy`` the assignor
(client's names); ``session_ms`` the session timeout; ``client_id``; ``instance`` a
``group.instance.id`` (confluent only); ``protocol`` "consumer" for KIP-848's
``group.protocol=consumer`` (confluent only; ``strategy`` is then the server assignor).
"""

from __future__ import annotations

import json
import sys
import threading

STOP = threading.Event()


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"e": event, **fields}) + "\n")
    sys.stdout.flush()


def _watch_stdin() -> None:
    sys.stdin.read()
    STOP.set()


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def run_confluent(cfg: dict) -> None:
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
        "client.id": cfg.get("client_id", "member"), "auto.offset.reset": "earliest",
        "session.timeout.ms": cfg.get("session_ms", 6000), "heartbeat.interval.ms": 300,
        "enable.auto.commit": True, "auto.commit.interval.ms": 100,
        "enable.auto.offset.store": False, "log_level": 3,
    }
    if cfg.get("protocol") == "consumer":
        # KIP-848: the broker assigns and times sessions; the classic-only settings go.
        conf["group.protocol"] = "consumer"
        del conf["session.timeout.ms"], conf["heartbeat.interval.ms"]
        if cfg.get("strategy"):
            conf["group.remote.assignor"] = cfg["strategy"]
    elif cfg.get("strategy"):
        conf["partition.assignment.strategy"] = cfg["strategy"]
    if cfg.get("instance"):
        conf["group.instance.id"] = cfg["instance"]  # static membership (KIP-345)
    consumer = Consumer(conf)

    def assigned(_c, partitions):
        emit("assigned", p=[[tp.topic, tp.partition] for tp in partitions])

    def revoked(_c, partitions):
        emit("revoked", p=[[tp.topic, tp.partition] for tp in partitions])

    consumer.subscribe(cfg["topics"], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    while not STOP.is_set():
        msg = consumer.poll(0.1)
        if msg is None or msg.error():
            continue
        emit("rec", t=msg.topic(), p=msg.partition(), o=msg.offset(), v=_text(msg.value()))
        consumer.store_offsets(msg)
    consumer.close()


def run_kafka_python(cfg: dict) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    kwargs = {}
    if cfg.get("strategy") == "roundrobin":
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        kwargs["partition_assignment_strategy"] = [RoundRobinPartitionAssignor]
    consumer = KafkaConsumer(
        bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
        client_id=cfg.get("client_id", "member"), auto_offset_reset="earliest",
        session_timeout_ms=cfg.get("session_ms", 6000), heartbeat_interval_ms=300,
        enable_auto_commit=True, auto_commit_interval_ms=100, **kwargs)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            emit("assigned", p=[[tp.topic, tp.partition] for tp in assigned])

        def on_partitions_revoked(self, revoked):
            emit("revoked", p=[[tp.topic, tp.partition] for tp in revoked])

    consumer.subscribe(cfg["topics"], listener=Listener())
    while not STOP.is_set():
        for records in consumer.poll(timeout_ms=100).values():
            for msg in records:
                emit("rec", t=msg.topic, p=msg.partition, o=msg.offset, v=_text(msg.value))
    consumer.close()


def run_aiokafka(cfg: dict) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned):
            emit("assigned", p=[[tp.topic, tp.partition] for tp in assigned])

        async def on_partitions_revoked(self, revoked):
            emit("revoked", p=[[tp.topic, tp.partition] for tp in revoked])

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
            client_id=cfg.get("client_id", "member"), auto_offset_reset="earliest",
            session_timeout_ms=cfg.get("session_ms", 6000), heartbeat_interval_ms=300,
            enable_auto_commit=True, auto_commit_interval_ms=100)
        await consumer.start()
        consumer.subscribe(cfg["topics"], listener=Listener())
        try:
            while not STOP.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for records in batches.values():
                    for msg in records:
                        emit("rec", t=msg.topic, p=msg.partition, o=msg.offset,
                             v=_text(msg.value))
        finally:
            await consumer.stop()

    asyncio.run(main())


def main() -> None:
    cfg = json.loads(sys.argv[1])
    threading.Thread(target=_watch_stdin, daemon=True).start()
    {"confluent": run_confluent, "kafka-python": run_kafka_python,
     "aiokafka": run_aiokafka}[cfg["client"]](cfg)
    emit("closed")


if __name__ == "__main__":
    main()
