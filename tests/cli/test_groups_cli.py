"""``odradek groups`` as a user runs it, against a broker with a live group: what describe
shows, and the mistakes the tool refuses (resetting a group whose consumers run, deleting
a group that does not exist)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from odradek.testing import RunningBroker, running_broker

from .test_tools import failed, odradek, ok

SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker(**SETTINGS) as running:
        yield running


@pytest.fixture(scope="module")
def live_member(broker: RunningBroker) -> Iterator[object]:
    """A confluent-kafka consumer in group "live" that has read topic "events" (3
    partitions, 4 records each), committed 3 of each, and keeps polling."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("events", 3, 1)])["events"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(12):
        producer.produce("events", value=b"e%d" % i, partition=i % 3)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "live",
                         "client.id": "reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe(["events"])
    read = 0
    deadline = time.monotonic() + 20
    while read < 12 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            read += 1
    assert read == 12
    consumer.commit(offsets=[TopicPartition("events", p, 3) for p in range(3)],
                    asynchronous=False)
    yield consumer
    consumer.close()


def test_describe_shows_members_assignment_offsets_and_lag(broker, live_member):
    out = ok(odradek("groups", "describe", "live", bootstrap=broker.bootstrap))
    assert "state Stable" in out and "1 member(s)" in out
    member_line = next(line for line in out.splitlines() if " reader " in f" {line} ")
    assert "events-0,events-1,events-2" in member_line and "/127.0.0.1" in member_line
    rows = [line.split() for line in out.splitlines() if line.startswith("events ")]
    assert rows == [["events", str(p), "3", "4", "1", "reader"] for p in range(3)]
    assert "live" in ok(odradek("groups", "list", bootstrap=broker.bootstrap)).split()


def test_reset_and_delete_refuse_a_group_with_live_members(broker, live_member):
    err = failed(odradek("groups", "reset-offsets", "live", "--topic", "events",
                         "--to-earliest", bootstrap=broker.bootstrap))
    assert "active members" in err
    err = failed(odradek("groups", "delete", "live", bootstrap=broker.bootstrap))
    assert "active members" in err


def test_unknown_groups_are_named_in_the_error(broker):
    assert "does not exist" in failed(odradek("groups", "describe", "nobody",
                                              bootstrap=broker.bootstrap))
    assert "does not exist" in failed(odradek("groups", "delete", "nobody",
                                              bootstrap=broker.bootstrap))


def test_reset_to_a_datetime_and_shift_on_a_group_without_members(broker):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("dated", value=b"d", partition=0, timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(10) == 0
    out = ok(odradek("groups", "reset-offsets", "offline", "--topic", "dated",
                     "--to-datetime", "2023-11-14T22:13:24", bootstrap=broker.bootstrap))
    # 1_700_000_004_000 ms is 2023-11-14T22:13:24Z: the record at offset 4.
    assert out.splitlines()[-1].split() == ["dated", "0", "-", "4"]
    out = ok(odradek("groups", "reset-offsets", "offline", "--topic", "dated",
                     "--shift-by", "-100", "--dry-run", bootstrap=broker.bootstrap))
    assert out.splitlines()[-2].split() == ["dated", "0", "4", "0"]  # kept at the log start
    assert "dry run" in out
    described = ok(odradek("groups", "describe", "offline", bootstrap=broker.bootstrap))
    assert ["dated", "0", "4", "10", "6", "-"] in [line.split() for line in
                                                  described.splitlines()]
