"""Exactly-once with real clients against ``odradek serve`` (KIP-98): transactional
producers (confluent-kafka, kafka-python, aiokafka), read_committed consumers, fencing,
timeouts, broker restarts, and a consume-transform-produce pipeline whose processor
(tests/interop/txn_processor.py, a process of its own) is SIGKILLed at random points
while the broker is kill -9'd once.

What a user relies on: a read_committed consumer sees a transaction's records once it
commits and never those of an aborted one (a read_uncommitted one sees both); an open
transaction holds read_committed consumers at its first offset until it ends; a second
producer with the same transactional.id fences the first, whose writes never become
visible; a transaction older than its timeout is aborted; transactions survive a broker
restart (SIGTERM or kill -9); the idempotent producer writes nothing twice across a
kill -9; and the pipeline's output holds every input record's result exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from odradek.devcluster import free_port

from .conftest import BrokerProcess, run_tool, start_broker
from .test_groups import create_topic
from .test_kafkajs import JS_DIR, kafkajs  # noqa: F401 - the fixture

pytestmark = pytest.mark.interop

PROCESSOR = Path(__file__).with_name("txn_processor.py")
WAIT = 60.0  # generous bound for anything the tests wait for (2 shared CPUs)


def transactional(bootstrap: str, tid: str, **settings) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "linger.ms": 1, **settings})
    producer.init_transactions(WAIT)
    return producer


def read(bootstrap: str, topic: str, partitions: int, *, committed: bool = True,
         expect: int = 0, quiet_s: float = 1.5, timeout: float = WAIT) -> list[bytes]:
    """Every value a fresh consumer (read_committed unless told) delivers from the start
    of ``topic``: at least ``expect`` of them, then until nothing new comes for
    ``quiet_s`` (so that a duplicate would show)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{random.random()}",
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                out.append(message.value())
                last_new = time.monotonic()
            elif len(out) >= expect and time.monotonic() - last_new > quiet_s:
                break
    finally:
        consumer.close()
    assert len(out) >= expect, f"read {len(out)} of {expect} records from {topic}"
    return out


def test_read_committed_sees_committed_transactions_and_never_aborted_ones(
        fresh_odradek_server: BrokerProcess):
    bootstrap = fresh_odradek_server.bootstrap
    create_topic(bootstrap, "orders", 3)
    producer = transactional(bootstrap, "shop")
    producer.begin_transaction()
    for i in range(30):
        producer.produce("orders", key=str(i), value=f"committed-{i}")
    producer.commit_transaction(WAIT)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("orders", key=str(i), value=f"aborted-{i}")
    producer.flush(WAIT)  # on the broker, so that the abort has records to drop
    producer.abort_transaction(WAIT)
    producer.begin_transaction()
    producer.produce("orders", key="last", value="committed-last")
    producer.commit_transaction(WAIT)

    committed = sorted(v.decode() for v in read(bootstrap, "orders", 3, expect=31))
    assert committed == sorted([f"committed-{i}" for i in range(30)] + ["committed-last"])
    everything = read(bootstrap, "orders", 3, committed=False, expect=61)
    assert Counter(v.decode().split("-")[0] for v in everything) == {
        "committed": 31, "aborted": 30}


def test_an_open_transaction_holds_read_committed_consumers_until_it_ends(
        fresh_odradek_server: BrokerProcess):
    bootstrap = fresh_odradek_server.bootstrap
    create_topic(bootstrap, "t", 1)
    slow = transactional(bootstrap, "slow")
    slow.begin_transaction()
    slow.produce("t", value="in-transaction")
    slow.flush(WAIT)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("t", value="after")
    plain.flush(WAIT)
    # Everything after the open transaction's first offset waits, even committed data.
    assert read(bootstrap, "t", 1, quiet_s=2.0) == []
    assert sorted(read(bootstrap, "t", 1, committed=False, expect=2)) == [
        b"after", b"in-transaction"]
    slow.commit_transaction(WAIT)
    assert read(bootstrap, "t", 1, expect=2) == [b"in-transaction", b"after"]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
        fresh_odradek_server: BrokerProcess):
    bootstrap = fresh_odradek_server.bootstrap
    create_topic(bootstrap, "t", 2)
    zombie = transactional(bootstrap, "worker")
    zombie.begin_transaction()
    for i in range(10):
        zombie.produce("t", key=str(i), value=f"zombie-{i}")
    zombie.flush(WAIT)
    successor = transactional(bootstrap, "worker")  # fences the zombie, aborts its txn
    with pytest.raises(KafkaException) as failure:
        zombie.produce("t", value="zombie-late")
        zombie.commit_transaction(WAIT)
    assert failure.value.args[0].fatal(), failure.value
    successor.begin_transaction()
    successor.produce("t", value="successor")
    successor.commit_transaction(WAIT)
    assert read(bootstrap, "t", 2, expect=1) == [b"successor"]


def test_a_transaction_older_than_its_timeout_is_aborted(tmp_path: Path):
    args = ("--override", "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
    with start_broker(tmp_path / "data", *args) as broker:
        create_topic(broker.bootstrap, "t", 1)
        forgetful = transactional(broker.bootstrap, "forgetful",
                                  **{"transaction.timeout.ms": 1500})
        forgetful.begin_transaction()
        forgetful.produce("t", value="never")
        forgetful.flush(WAIT)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce("t", value="after")
        plain.flush(WAIT)
        # The broker aborts it: the records behind it become readable, its own never.
        assert read(broker.bootstrap, "t", 1, expect=1, quiet_s=1.0) == [b"after"]
        with pytest.raises(KafkaException):
            forgetful.commit_transaction(WAIT)




@contextmanager
def broker_on(data: Path, port: int, *args: str) -> Iterator[BrokerProcess]:
    """A broker on a fixed port, so clients reconnect to it across restarts."""
    with start_broker(data, "--listen", f"127.0.0.1:{port}", *args) as broker:
        yield broker


@pytest.mark.parametrize("stop", ["sigterm", "kill -9"])
def test_an_open_transaction_survives_a_broker_restart_and_commits_after_it(
        tmp_path: Path, stop: str):
    data, port = tmp_path / "data", free_port()
    with broker_on(data, port) as broker:
        create_topic(broker.bootstrap, "t", 2)
        producer = transactional(broker.bootstrap, "durable")
        producer.begin_transaction()
        for i in range(20):
            producer.produce("t", key=str(i), value=f"v{i}")
        producer.flush(WAIT)
        if stop == "kill -9":
            broker.kill()
    with broker_on(data, port) as broker:
        producer.produce("t", key="x", value="after-restart")
        producer.commit_transaction(WAIT)
        values = sorted(v.decode() for v in read(broker.bootstrap, "t", 2, expect=21))
        assert values == sorted([f"v{i}" for i in range(20)] + ["after-restart"])


def test_the_idempotent_producer_writes_nothing_twice_across_a_broker_kill(tmp_path: Path):
    data, port = tmp_path / "data", free_port()
    count = 3000
    with broker_on(data, port) as broker:
        create_topic(broker.bootstrap, "ledger", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "enable.idempotence": True, "linger.ms": 2,
                             "batch.num.messages": 50, "message.timeout.ms": 120_000})
        delivered: list[str] = []
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            (errors if err else delivered).append(str(err) if err else msg.value().decode())

        for i in range(count // 2):
            producer.produce("ledger", value=str(i), on_delivery=on_delivery)
        producer.poll(0.1)
        # Crash with batches in flight: some were written but never acknowledged.
        broker.kill()
    for i in range(count // 2, count):
        producer.produce("ledger", value=str(i), on_delivery=on_delivery)
    with broker_on(data, port) as broker:
        assert producer.flush(WAIT) == 0
        assert errors == []
        values = [int(v) for v in read(broker.bootstrap, "ledger", 1, expect=count)]
        assert values == list(range(count)), "lost, duplicated or reordered records"


# --- consume-transform-produce, with crashes ----------------------------------------


class Processor:
    """One run of txn_processor.py."""

    def __init__(self, cfg: dict) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(PROCESSOR), json.dumps(cfg)], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.lines: list[str] = []
        self.commits = 0
        self._readers = [threading.Thread(target=self._drain, args=(s,), daemon=True)
                         for s in (self.proc.stdout, self.proc.stderr)]
        for reader in self._readers:
            reader.start()

    def _drain(self, stream) -> None:
        for line in iter(stream.readline, ""):
            self.lines.append(line)
            if line.startswith("committed"):
                self.commits += 1
        stream.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=5)


def test_consume_transform_produce_is_exactly_once_through_processor_and_broker_crashes(
        tmp_path: Path):
    data, port = tmp_path / "data", free_port()
    rng = random.Random(int(os.environ.get("TXN_SEED", time.time())))
    count, partitions = 600, 3
    cfg = {"bootstrap": f"127.0.0.1:{port}", "input": "in", "output": "out",
           "group": "pipeline", "transactional_id": "pipeline-0",
           "delay_s": 0.01}
    args = ("--override", "group.initial.rebalance.delay.ms=0")
    broker = None
    runs: list[Processor] = []
    try:
        with broker_on(data, port, *args) as broker:
            create_topic(broker.bootstrap, "in", partitions)
            create_topic(broker.bootstrap, "out", partitions)
            source = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            for i in range(count):
                source.produce("in", key=str(i), value=str(i))
            assert source.flush(WAIT) == 0
            # Kill the processor at random moments, a few times, each after it got
            # going (some commits) or not (killed during its start, mid-transaction).
            for _ in range(4):
                runs.append(Processor(cfg))
                time.sleep(rng.uniform(0.5, 2.5))
                runs[-1].kill()
            runs.append(Processor(cfg))
            time.sleep(rng.uniform(0.5, 2.0))
            broker.kill()  # the broker crashes under a running processor
        with broker_on(data, port, *args) as broker:
            # The processor lived through the crash or failed: either way, one more
            # random kill and then one run to the end.
            time.sleep(rng.uniform(0.5, 2.0))
            runs[-1].kill()
            runs.append(Processor(cfg))
            out = read(broker.bootstrap, "out", partitions, expect=count, quiet_s=3.0,
                       timeout=240)
            runs[-1].kill()
            results = Counter(v.decode() for v in out)
            duplicated = {v: n for v, n in results.items() if n > 1}
            missing = {f"{i}:done" for i in range(count)} - set(results)
            assert not duplicated and not missing, (duplicated, sorted(missing)[:10])
            # The kills did land: more than one run committed work, and (typically)
            # some work was written and then aborted, which only read_uncommitted sees.
            assert sum(1 for r in runs if r.commits) >= 2, [r.commits for r in runs]
            everything = read(broker.bootstrap, "out", partitions, committed=False,
                              expect=count, quiet_s=1.0)
            print(f"commits per run: {[r.commits for r in runs]}; "
                  f"{len(everything) - count} aborted output records")
    finally:
        for run in runs:
            run.kill()
        if broker is not None and any(r.proc.returncode not in (0, -9, 3) for r in runs):
            print("".join(line for r in runs for line in r.lines), file=sys.stderr)


# --- other clients ---------------------------------------------------------------------


def test_kafka_python_transactional_producer_commits_and_aborts(
        fresh_odradek_server: BrokerProcess):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.structs import OffsetAndMetadata

    bootstrap = fresh_odradek_server.bootstrap
    create_topic(bootstrap, "kp", 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kafka-python")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send("kp", key=str(i).encode(), value=f"committed-{i}".encode())
        producer.send_offsets_to_transaction(
            {KafkaTopicPartition("kp", 0): OffsetAndMetadata(7, "", -1)}, "kp-group")
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(10):
            producer.send("kp", key=str(i).encode(), value=f"aborted-{i}".encode())
        producer.send_offsets_to_transaction(
            {KafkaTopicPartition("kp", 0): OffsetAndMetadata(99, "", -1)}, "kp-group")
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    assert sorted(read(bootstrap, "kp", 2, expect=10)) == sorted(
        f"committed-{i}".encode() for i in range(10))
    assert len(read(bootstrap, "kp", 2, committed=False, expect=20)) == 20
    assert committed_offset(bootstrap, "kp-group", "kp", 0) == 7
    # kafka-python's own read_committed consumer drops the aborted records and markers.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    try:
        consumer.assign([KafkaTopicPartition("kp", p) for p in range(2)])
        consumer.seek_to_beginning()
        seen: list[bytes] = []
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500)
            got = [r.value for records in batch.values() for r in records]
            seen.extend(got)
            if len(seen) >= 10 and not got:
                break
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"committed-{i}".encode() for i in range(10))


def test_aiokafka_transactional_producer_commits_and_aborts(
        fresh_odradek_server: BrokerProcess):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTopicPartition

    bootstrap = fresh_odradek_server.bootstrap
    create_topic(bootstrap, "aio", 2)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aiokafka")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send("aio", key=str(i).encode(),
                                        value=f"committed-{i}".encode())
                await producer.send_offsets_to_transaction(
                    {AioTopicPartition("aio", 1): 4}, "aio-group")
            await producer.begin_transaction()
            for i in range(10):
                await producer.send_and_wait("aio", key=str(i).encode(),
                                             value=f"aborted-{i}".encode())
            await producer.abort_transaction()
        finally:
            await producer.stop()
        # aiokafka's own read_committed consumer drops the aborted records and markers.
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap,
                                    isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition("aio", p) for p in range(2)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                got = [r.value for records in batch.values() for r in records]
                seen.extend(got)
                if len(seen) >= 10 and not got:
                    break
        finally:
            await consumer.stop()

    seen: list[bytes] = []
    asyncio.run(run())
    assert sorted(seen) == sorted(f"committed-{i}".encode() for i in range(10))
    assert sorted(read(bootstrap, "aio", 2, expect=10)) == sorted(
        f"committed-{i}".encode() for i in range(10))
    assert len(read(bootstrap, "aio", 2, committed=False, expect=20)) == 20
    assert committed_offset(bootstrap, "aio-group", "aio", 1) == 4


def test_kafkajs_transactional_producer_commits_aborts_and_sends_offsets(
        kafkajs, fresh_odradek_server: BrokerProcess):  # noqa: F811 - the fixture
    bootstrap = fresh_odradek_server.bootstrap
    create_topic(bootstrap, "js", 1)
    plan = {"brokers": [bootstrap], "transactionalId": "kafkajs", "topic": "js",
            "group": "js-group", "transactions": [
                {"values": ["c1", "c2"], "commit": True,
                 "offsets": [{"partition": 0, "offset": "2"}]},
                {"values": ["a1"], "commit": False,
                 "offsets": [{"partition": 0, "offset": "3"}]},
                {"values": ["c3"], "commit": True}]}
    done = run_tool([kafkajs.node, str(JS_DIR / "txn_producer.js"), json.dumps(plan)],
                    cwd=JS_DIR)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"done": 3}, done.stdout
    assert read(bootstrap, "js", 1, expect=3) == [b"c1", b"c2", b"c3"]
    assert read(bootstrap, "js", 1, committed=False, expect=4) == [b"c1", b"c2", b"a1", b"c3"]
    assert committed_offset(bootstrap, "js-group", "js", 0) == 2
    # kafkajs' own consumer (read_committed by default) skips the aborted record and
    # the markers; its group starts from the beginning.
    [consumed] = kafkajs.results(fresh_odradek_server, [
        {"op": "consumeGroup", "topic": "js", "groupId": "js-reader", "count": 3}])
    assert [m["value"] for m in consumed["messages"]] == ["c1", "c2", "c3"]


def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, partition)], timeout=WAIT)
        return tp.offset
    finally:
        consumer.close()
