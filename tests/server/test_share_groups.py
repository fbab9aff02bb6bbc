"""Share groups (KIP-932, "queues for Kafka") over the wire, against an in-process broker:
members of one share group sharing a partition's records, each record acquired by one
member at a time; acknowledgements (accept, release, reject), delivery counts and the
delivery limit; acquisition locks timing out; share sessions and their errors; what a
group has consumed surviving a restart (``__share_group_state``); a closed connection
releasing what its member held; read_committed share groups never seeing aborted
records. The Java client's KafkaShareConsumer runs in
tests/interop/test_java_share_groups.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from odradek.client.wire import WireClient
from odradek.coordinator.share_records import ShareSnapshotKey, decode_key, decode_value
from odradek.records import builder
from odradek.testing import RunningBroker, running_broker

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
Acks = list[tuple[int, int, int]]


def create_topic(client: WireClient, name: str, partitions: int = 1) -> uuid.UUID:
    answer = client.request(19, 7, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1,
        "assignments": [], "configs": []}], "timeout": 10_000, "validate_only": False})
    assert answer.topics[0].error_code == 0
    return answer.topics[0].topic_id


def produce(bootstrap: str, topic: str, count: int, *, start: int = 0,
            transactional_id: str | None = None, commit: bool = True,
            batch: int | None = None) -> None:
    """``count`` records "v<i>"; with ``batch``, in batches of that many (a flush after
    each), so that a share fetch acquiring whole batches takes a few at a time."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 0}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id:
        producer.init_transactions(10)
        producer.begin_transaction()
    for i in range(start, start + count):
        producer.produce(topic, value=f"v{i}".encode())
        if batch and (i - start + 1) % batch == 0:
            producer.flush(10)
    if transactional_id:
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    assert producer.flush(10) == 0


def set_group_configs(client: WireClient, group: str, **configs: str) -> None:
    answer = client.request(44, 1, {"resources": [{
        "resource_type": 32, "resource_name": group, "configs": [
            {"name": k.replace("_", "."), "config_operation": 0, "value": v}
            for k, v in configs.items()]}], "validate_only": False})
    assert answer.responses[0].error_code == 0, answer.responses[0].error_message


class Member:
    """One share consumer speaking the protocol by hand: a heartbeat, then share fetches
    in one share session."""

    def __init__(self, port: int, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.client = WireClient(port)
        self.group, self.topic, self.topic_id = group, topic, topic_id
        self.member_id = uuid.uuid4().hex
        self.epoch = 0  # share session epoch
        self.member_epoch = 0
        answer = self.heartbeat([topic])
        assert answer.error_code == 0, answer.error_message

    def heartbeat(self, topics: list[str] | None = None, *, leave: bool = False) -> Any:
        answer = self.client.request(76, 1, {
            "group_id": self.group, "member_id": self.member_id,
            "member_epoch": -1 if leave else self.member_epoch, "rack_id": None,
            "subscribed_topic_names": topics})
        if answer.error_code == 0:
            self.member_epoch = answer.member_epoch
        return answer

    def fetch(self, acks: Acks = (), *, partitions: tuple[int, ...] = (0,),
              max_records: int = 500, max_wait: int = 0, epoch: int | None = None,
              version: int = 1) -> Any:
        """One ShareFetch: acknowledgements ``acks`` as (first, last, type)."""
        body = {
            "group_id": self.group, "member_id": self.member_id,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20,
            "max_records": max_records, "batch_size": max_records,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                    for f, last, t in acks]} for p in partitions]}]
            if self.epoch == 0 or acks else [],
            "forgotten_topics_data": []}
        answer = self.client.request(78, version, body)
        if answer.error_code == 0 and epoch is None:
            self.epoch += 1
        return answer

    def acknowledge(self, acks: Acks, *, epoch: int | None = None) -> Any:
        answer = self.client.request(79, 1, {
            "group_id": self.group, "member_id": self.member_id,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "topics": [{"topic_id": self.topic_id, "partitions": [{
                "partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                    for f, last, t in acks]}]}]})
        if answer.error_code == 0 and epoch is None:
            self.epoch = -1 if self.epoch == -1 else self.epoch + 1
        return answer

    def close(self) -> None:
        self.client.close()


def acquired(answer: Any) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) of every acquired range of a ShareFetch answer."""
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def values(answer: Any) -> list[tuple[int, bytes]]:
    """(offset, value) of the acquired records of a ShareFetch answer."""
    ranges = acquired(answer)
    out = []
    for t in answer.responses:
        for p in t.partitions:
            for batch in builder.decode_batches(p.records or b""):
                if batch.header.is_control:
                    continue  # a transaction's marker: acknowledged, never a record
                for r in batch.records:
                    if any(f <= r.offset <= last for f, last, _ in ranges):
                        out.append((r.offset, r.value))
    return out


def ack_error(answer: Any) -> int:
    [code] = [p.acknowledge_error_code for t in answer.responses for p in t.partitions]
    return code


@contextmanager
def share_group(running: RunningBroker, topic: str, records: int = 10,
                **configs: str) -> Iterator[tuple[WireClient, uuid.UUID, str]]:
    """A topic holding ``records`` records and a share group reading it from the start."""
    group = f"{topic}-group"
    with WireClient(running.port) as admin:
        topic_id = create_topic(admin, topic)
        set_group_configs(admin, group, share_auto_offset_reset="earliest", **configs)
        produce(running.bootstrap, topic, records)
        yield admin, topic_id, group


def test_two_members_share_a_partition_each_record_to_one_at_a_time() -> None:
    with running_broker() as running, share_group(running, "orders", 10) as (
            admin, topic_id, group):
        a = Member(running.port, group, "orders", topic_id)
        b = Member(running.port, group, "orders", topic_id)
        # Both are assigned the one partition: a share group shares it.
        # b's join moved the group to epoch 2: a learns it at its next heartbeat.
        assert (a.member_epoch, b.member_epoch) == (1, 2)
        answer = a.heartbeat()
        assert answer.error_code == 0 and answer.member_epoch == 2
        described = admin.request(77, 1, {"group_ids": [group],
                                          "include_authorized_operations": False})
        [g] = described.groups
        assert (g.group_state, g.assignor_name, len(g.members)) == ("Stable", "simple", 2)
        assert all(m.assignment.topic_partitions[0].partitions == (0,) for m in g.members)

        first = a.fetch()
        assert acquired(first) == [(0, 9, 1)]
        assert [v for _, v in values(first)] == [f"v{i}".encode() for i in range(10)]
        # Everything is out with a: b gets nothing (it waits up to max_wait, then answers).
        assert acquired(b.fetch(max_wait=50)) == []
        # a accepts 0-4, releases 5-7, rejects 8-9 (ShareAcknowledge: no fetch, or a
        # would take 5-7 back itself): b gets 5-7 on its second delivery.
        answer = a.acknowledge([(0, 4, ACCEPT), (5, 7, RELEASE), (8, 9, REJECT)])
        assert answer.error_code == 0
        assert [p.error_code for t in answer.responses for p in t.partitions] == [0]
        assert acquired(b.fetch()) == [(5, 7, 2)]
        b.acknowledge([(5, 7, ACCEPT)])
        produce(running.bootstrap, "orders", 3, start=10)
        assert acquired(a.fetch(max_wait=2000)) == [(10, 12, 1)]
        # Listed as a share group, and leaving releases what a member holds.
        listed = admin.request(16, 5, {"states_filter": [], "types_filter": ["share"]})
        assert [(x.group_id, x.group_type) for x in listed.groups] == [(group, "share")]
        assert a.heartbeat(leave=True).member_epoch == -1
        assert acquired(b.fetch()) == [(10, 12, 2)]
        a.close()
        b.close()


def test_the_delivery_limit_archives_a_record_released_too_often() -> None:
    with running_broker() as running, share_group(
            running, "limited", 1, share_delivery_count_limit="2") as (_, topic_id, group):
        m = Member(running.port, group, "limited", topic_id)
        assert acquired(m.fetch()) == [(0, 0, 1)]
        assert acquired(m.fetch([(0, 0, RELEASE)])) == [(0, 0, 2)]
        assert acquired(m.fetch([(0, 0, RELEASE)], max_wait=100)) == []  # archived
        m.close()


def test_acknowledgement_and_session_errors() -> None:
    with running_broker() as running, share_group(running, "errs", 4) as (
            _, topic_id, group):
        a = Member(running.port, group, "errs", topic_id)
        b = Member(running.port, group, "errs", topic_id)
        # Acknowledgements in the opening request are refused.
        refused = a.fetch([(0, 0, ACCEPT)], epoch=0)
        assert refused.error_code == ErrorCode.invalid_request
        assert acquired(a.fetch()) == [(0, 3, 1)]
        # b holds nothing: its acknowledgement is refused, nothing changes.
        b.fetch()
        assert ack_error(b.fetch([(0, 0, ACCEPT)])) == ErrorCode.invalid_record_state
        # Offsets out of what was fetched, a malformed batch.
        assert ack_error(a.fetch([(7, 9, ACCEPT)])) == ErrorCode.invalid_record_state
        assert ack_error(a.fetch([(2, 1, ACCEPT)])) == ErrorCode.invalid_request
        # A wrong session epoch, a session that does not exist.
        assert a.fetch(epoch=99).error_code == ErrorCode.invalid_share_session_epoch
        stranger = Member(running.port, group, "errs", topic_id)
        assert stranger.fetch(epoch=3).error_code == ErrorCode.share_session_not_found
        assert stranger.acknowledge([(0, 0, ACCEPT)], epoch=1).error_code == (
            ErrorCode.share_session_not_found)
        # The holder's acknowledgements still work, and RENEW is taken on v2.
        assert ack_error(a.fetch([(0, 1, ACCEPT)])) == 0
        assert ack_error(a.fetch([(2, 3, RENEW)], version=2)) == 0
        assert ack_error(a.fetch([(2, 3, ACCEPT)])) == 0
        # Closing the session (epoch -1) with a final acknowledgement.
        assert a.acknowledge([], epoch=-1).error_code == 0
        for m in (a, b, stranger):
            m.close()


def test_a_lock_that_times_out_redelivers_the_records() -> None:
    settings = {"group.share.min.record.lock.duration.ms": 1000,
                "group.share.record.lock.duration.ms": 1000}
    with running_broker(**settings) as running, share_group(running, "slow", 3) as (
            _, topic_id, group):
        a = Member(running.port, group, "slow", topic_id)
        b = Member(running.port, group, "slow", topic_id)
        held = a.fetch()
        assert held.acquisition_lock_timeout == timedelta(seconds=1)
        assert acquired(held) == [(0, 2, 1)]
        # a never acknowledges: after its lock times out b gets them, a second delivery.
        assert acquired(b.fetch(max_wait=5000)) == [(0, 2, 2)]
        # a's late acknowledgement is refused: it no longer holds them.
        assert ack_error(a.fetch([(0, 2, ACCEPT)])) == ErrorCode.invalid_record_state
        a.close()
        b.close()


def test_a_closed_connection_releases_what_its_member_held() -> None:
    with running_broker() as running, share_group(running, "dropped", 5) as (
            _, topic_id, group):
        a = Member(running.port, group, "dropped", topic_id)
        b = Member(running.port, group, "dropped", topic_id)
        assert acquired(a.fetch()) == [(0, 4, 1)]
        a.close()  # as if the consumer were killed: no leave, no acknowledgement
        assert acquired(b.fetch(max_wait=5000)) == [(0, 4, 2)]
        b.close()


def test_what_a_group_consumed_outlives_a_restart(tmp_path: Path) -> None:
    data_dir = str(tmp_path)
    with running_broker(data_dir=data_dir) as running, share_group(running, "durable", 6) as (
            _, topic_id, group):
        m = Member(running.port, group, "durable", topic_id)
        assert acquired(m.fetch()) == [(0, 5, 1)]
        assert m.acknowledge([(0, 2, ACCEPT), (3, 3, REJECT), (4, 5, RELEASE)]).error_code == 0
        m.close()
    with running_broker(data_dir=data_dir) as running:
        m = Member(running.port, group, "durable", topic_id)
        # 0-3 are done; 4-5 come back with the delivery count they had.
        assert acquired(m.fetch()) == [(4, 5, 2)]
        m.close()
        # The state is in __share_group_state in Kafka's layout.
        logs = running.broker.logs
        assert logs is not None

        def last_state() -> tuple[str, Any]:
            states = []
            for (topic, _), lg in list(logs.logs.items()):
                if topic != "__share_group_state" or lg.log_end_offset == 0:
                    continue
                for batch in builder.decode_batches(lg.read(0, 1 << 20).region.read()):
                    for r in batch.records:
                        key = decode_key(r.key)
                        assert isinstance(key, ShareSnapshotKey)
                        states.append((key.group_id, decode_value(key, r.value)))
            return states[-1]

        # The close's release (delivery count back to 1) is written after close()
        # returns: wait for it rather than read the record before it.
        deadline = time.monotonic() + 10
        while True:
            owner, last = last_state()
            batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in last.state_batches]
            if batches == [(4, 5, 0, 1)] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert owner == group and last.start_offset == 4
        assert batches == [(4, 5, 0, 1)]


def test_latest_by_default_and_earliest_when_asked() -> None:
    with running_broker() as running, WireClient(running.port) as admin:
        topic_id = create_topic(admin, "resets")
        produce(running.bootstrap, "resets", 3)
        latest = Member(running.port, "g-latest", "resets", topic_id)
        assert acquired(latest.fetch()) == []  # starts at the end
        produce(running.bootstrap, "resets", 2, start=3)
        assert acquired(latest.fetch(max_wait=2000)) == [(3, 4, 1)]
        set_group_configs(admin, "g-earliest", share_auto_offset_reset="earliest")
        earliest = Member(running.port, "g-earliest", "resets", topic_id)
        assert acquired(earliest.fetch()) == [(0, 4, 1)]
        latest.close()
        earliest.close()


def test_read_committed_share_groups_never_see_aborted_records() -> None:
    with running_broker() as running, WireClient(running.port) as admin:
        topic_id = create_topic(admin, "txns")
        set_group_configs(admin, "g-rc", share_auto_offset_reset="earliest",
                          share_isolation_level="read_committed")
        produce(running.bootstrap, "txns", 2, transactional_id="t1", commit=False)
        produce(running.bootstrap, "txns", 2, start=2, transactional_id="t1", commit=True)
        m = Member(running.port, "g-rc", "txns", topic_id)
        deadline = time.monotonic() + 10
        got: list[tuple[int, bytes]] = []
        while time.monotonic() < deadline and len(got) < 2:
            answer = m.fetch(max_wait=500)
            got += values(answer)
            ranges = acquired(answer)
            if ranges:
                # The commit marker's offset was acquired too: acknowledged as a GAP.
                m.fetch([(f, last, ACCEPT) for f, last, _ in ranges])
        assert [v for _, v in got] == [b"v2", b"v3"]
        m.close()


def test_share_groups_off_when_share_version_is_0() -> None:
    with running_broker() as running, WireClient(running.port) as admin:
        topic_id = create_topic(admin, "off")
        answer = admin.request(57, 1, {"timeout": 10_000, "validate_only": False,
                                       "feature_updates": [{"feature": "share.version",
                                                            "max_version_level": 0,
                                                            "upgrade_type": 2}]})
        assert answer.error_code == 0
        refused = admin.request(76, 1, {"group_id": "g", "member_id": "m",
                                        "member_epoch": 0, "rack_id": None,
                                        "subscribed_topic_names": ["off"]})
        assert refused.error_code == ErrorCode.unsupported_version
        fetch = admin.request(78, 1, {
            "group_id": "g", "member_id": "m", "share_session_epoch": 0, "max_wait": 0,
            "min_bytes": 1, "max_bytes": 1024, "max_records": 10, "batch_size": 10,
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []})
        assert fetch.error_code == ErrorCode.unsupported_version
