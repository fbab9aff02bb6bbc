"""Where a consumer commits decides what a crash costs (docs/operations.md, "Delivery
semantics"): commit before processing and the record in hand at the crash is lost
(at most once); commit after and it is processed again (at least once)."""

from __future__ import annotations

import time

import pytest

from odradek.testing import running_broker

SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}
CRASH_AT = 4  # the offset being handled when the consumer "crashes"


def consumer(bootstrap: str):
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "app",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe(["jobs"])
    return c


def next_record(c):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None and not msg.error():
            return msg
    raise AssertionError("no record within 20 s")


@pytest.mark.parametrize(("commit_point", "expected"), [
    ("before", [0, 1, 2, 3, 5, 6, 7, 8, 9]),  # at most once: 4 is lost
    ("after", [0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9]),  # at least once: 4 twice
])
def test_the_commit_point_decides_what_a_crash_costs(commit_point, expected):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with running_broker(**SETTINGS) as node:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("jobs", 1, 1)])["jobs"].result(10)
        producer = Producer({"bootstrap.servers": node.bootstrap})
        for i in range(10):
            producer.produce("jobs", value=str(i).encode())
        assert producer.flush(10) == 0
        processed: list[int] = []

        first = consumer(node.bootstrap)
        while True:
            msg = next_record(first)
            if commit_point == "before":
                first.commit(message=msg, asynchronous=False)
                if msg.offset() == CRASH_AT:
                    break  # crashed after the commit, before processing
            processed.append(int(msg.value()))
            if commit_point == "after":
                if msg.offset() == CRASH_AT:
                    break  # crashed after processing, before the commit
                first.commit(message=msg, asynchronous=False)
        first.close()  # without committing anything more: what a crash leaves

        second = consumer(node.bootstrap)
        while processed[-1] != 9:
            processed.append(int(next_record(second).value()))
        second.close()
        assert processed == expected
