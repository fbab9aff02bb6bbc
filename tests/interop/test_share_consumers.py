"""KIP-932 share groups with librdkafka's share consumer (confluent-kafka 2.16's
``ShareConsumer``, librdkafka 2.16, "preview" there) against an ``odradek serve``
process: several consumers sharing one partition, explicit acknowledgements and the
delivery limit, a consumer SIGKILLed while it holds records, and the broker restarted
between deliveries. The Java client's ``KafkaShareConsumer`` is in
test_java_share_groups.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from odradek.client.wire import WireClient

from ..server.test_share_groups import create_topic, produce, set_group_configs
from .conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.interop

DEADLINE_S = 60.0  # for a poll loop to see what it waits for
# Locks short enough for the kill test (Kafka's bounds lowered by broker settings).
SETTINGS = {"group.share.min.record.lock.duration.ms": "1000",
            "group.share.record.lock.duration.ms": "3000"}

HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    msgs = [m for m in c.poll(1.0) or [] if not m.error()]
    if msgs:
        print("HELD", " ".join(str(m.offset()) for m in msgs), flush=True)
        time.sleep(120)  # holds them, unacknowledged, until killed
"""


@pytest.fixture(scope="module")
def odradek_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = [arg for k, v in SETTINGS.items() for arg in ("--override", f"{k}={v}")]
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *overrides) as broker:
        yield broker


def queue(broker: BrokerProcess, topic: str, records: int, *, batch: int | None = None,
          **configs: str) -> str:
    """A one-partition topic holding ``records`` records (in batches of ``batch``) and a
    share group reading it from the start; the group's id."""
    group = f"{topic}-group"
    with WireClient(broker.port) as admin:
        create_topic(admin, topic)
        set_group_configs(admin, group, share_auto_offset_reset="earliest", **configs)
    produce(broker.bootstrap, topic, records, batch=batch)
    return group


def consumer(broker: BrokerProcess, group: str, topic: str, **config: Any) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **config})
    c.subscribe([topic])
    return c


def drain(c: ShareConsumer, until: Any, *, explicit: Any = None,
          seen: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """(offset, delivery count) of every record polled until ``until(seen)`` holds,
    appended to ``seen`` as they come; ``explicit(message)`` chooses each
    acknowledgement in explicit mode."""
    seen = [] if seen is None else seen
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not until(seen):
        msgs = [m for m in c.poll(0.5) or [] if not m.error()]
        for m in msgs:
            seen.append((m.offset(), m.delivery_count()))
            if explicit is not None:
                c.acknowledge(m, explicit(m))
        if msgs and explicit is not None:
            c.commit_sync()
    return seen


def test_three_consumers_share_a_partition_each_record_once(odradek_server: BrokerProcess):
    # Batches of 10: a share fetch acquires whole batches, up to max.poll.records.
    group = queue(odradek_server, "rd-shared", 300, batch=10)
    results: dict[int, list[tuple[int, int]]] = {n: [] for n in range(3)}
    done = threading.Event()

    def run(n: int) -> None:
        c = consumer(odradek_server, group, "rd-shared", **{"max.poll.records": 20})
        try:
            drain(c, lambda _: done.is_set(), seen=results[n])
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and sum(len(r) for r in list(results.values())) < 300:
        time.sleep(0.2)
    # Polls in flight when the count was reached finish; every thread stops.
    time.sleep(1)
    done.set()
    for t in threads:
        t.join(DEADLINE_S)
    offsets = [o for r in results.values() for o, _ in r]
    assert sorted(offsets) == list(range(300)), "every record once, no duplicates"
    assert all(count == 1 for r in results.values() for _, count in r)
    assert sum(1 for r in results.values() if r) >= 2, "the partition was shared"


def test_released_records_come_back_and_rejected_or_exhausted_ones_do_not(
        odradek_server: BrokerProcess):
    group = queue(odradek_server, "rd-explicit", 5, share_delivery_count_limit="2")
    c = consumer(odradek_server, group, "rd-explicit",
                 **{"share.acknowledgement.mode": "explicit"})

    def choose(m: Any) -> AcknowledgeType:
        # 0: released on every delivery (archived at the limit, 2); 1: rejected.
        return {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT}.get(
            m.offset(), AcknowledgeType.ACCEPT)

    seen = drain(c, lambda s: s.count((0, 2)) == 1 and len(s) >= 6, explicit=choose)
    # And nothing more comes: 0 was delivered its limit, 1 rejected, 2-4 accepted.
    later: list[tuple[int, int]] = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        later += [(m.offset(), m.delivery_count()) for m in c.poll(0.5) or [] if not m.error()]
    c.close()
    assert sorted(seen) == [(0, 1), (0, 2), (1, 1), (2, 1), (3, 1), (4, 1)]
    assert later == []


def test_a_killed_consumers_records_are_redelivered(odradek_server: BrokerProcess):
    group = queue(odradek_server, "rd-killed", 30)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, odradek_server.bootstrap, group, "rd-killed"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()  # bounded by the holder's own 60 s deadline
        assert line.startswith("HELD "), line
        held = [int(x) for x in line.split()[1:]]
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    assert held
    c = consumer(odradek_server, group, "rd-killed")
    seen = drain(c, lambda s: len({o for o, _ in s}) == 30)
    c.close()
    counts = dict(seen)
    assert sorted(counts) == list(range(30)), "every record processed"
    assert all(counts[o] >= 2 for o in held), "what the killed consumer held came again"
    assert len(seen) == 30


def test_acknowledged_records_stay_done_across_a_broker_restart(tmp_path: Path):
    with start_broker(tmp_path / "data") as broker:
        group = queue(broker, "rd-restart", 10)
        c = consumer(broker, group, "rd-restart",
                     **{"share.acknowledgement.mode": "explicit"})
        first = drain(c, lambda s: len(s) >= 4, explicit=lambda m: (
            AcknowledgeType.ACCEPT if m.offset() < 4 else AcknowledgeType.RELEASE))
        c.close()
        assert {o for o, _ in first} >= {0, 1, 2, 3}
    with start_broker(tmp_path / "data", port=broker.port) as broker:
        c = consumer(broker, group, "rd-restart")
        after = drain(c, lambda s: {o for o, _ in s} >= set(range(4, 10)))
        c.close()
    assert sorted(o for o, _ in after) == list(range(4, 10)), (
        "accepted records stay done; the rest come (again)")
