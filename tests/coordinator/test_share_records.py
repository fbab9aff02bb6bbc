"""The __share_group_state records are Kafka's own layouts, byte for byte: the expected
bytes below were written by Kafka 4.4's generated ShareSnapshot/ShareUpdate classes
(MessageUtil.toCoordinatorTypePrefixedBytes for keys, toVersionPrefixedBytes(0) for
values), and the partitions by ShareCoordinatorService.partitionFor's formula over
SharePartitionKey.asCoordinatorKey."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator import share_records as sr
from odradek.coordinator.share_records import StateBatch
from odradek.protocol.reader import DecodeError

TOPIC = uuid.UUID(int=0x0123456789ABCDEF_FEDCBA9876543210)

SNAPSHOT = sr.ShareSnapshotValue(
    snapshot_epoch=2, state_epoch=1, leader_epoch=5, start_offset=100,
    create_timestamp=1000, write_timestamp=2000,
    state_batches=(StateBatch(100, 109, 0, 2), StateBatch(110, 110, 4, 5)))
SNAPSHOT_HEX = (
    "0000"  # value version 0
    "00000002" "00000001" "00000005"  # snapshot epoch 2, state epoch 1, leader epoch 5
    "0000000000000064"  # start offset 100
    "00000000000003e8" "00000000000007d0"  # create 1000, write 2000
    "03"  # two state batches (compact: count + 1)
    "0000000000000064" "000000000000006d" "00" "0002" "00"  # 100..109 available, count 2
    "000000000000006e" "000000000000006e" "04" "0005" "00"  # 110 archived, count 5
)
UPDATE = sr.ShareUpdateValue(snapshot_epoch=2, leader_epoch=5, start_offset=-1,
                             state_batches=(StateBatch(120, 124, 2, 1),))
UPDATE_HEX = (
    "0000" "00000002" "00000005" "ffffffffffffffff"
    "02" "0000000000000078" "000000000000007c" "02" "0001" "00"
)


def test_uuid_string_is_kafkas_url_safe_base64():
    assert sr.kafka_uuid_string(TOPIC) == "ASNFZ4mrze_-3LqYdlQyEA"
    assert sr.kafka_uuid_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_keys_are_record_type_then_group_topic_id_partition():
    snapshot_key = sr.ShareSnapshotKey("g1", TOPIC, 3)
    update_key = sr.ShareUpdateKey("g1", TOPIC, 3)
    body = "0002" "6731" "0123456789abcdeffedcba9876543210" "00000003"
    assert sr.encode_key(snapshot_key).hex() == "0000" + body
    assert sr.encode_key(update_key).hex() == "0001" + body
    assert sr.decode_key(bytes.fromhex("0000" + body)) == snapshot_key
    assert sr.decode_key(bytes.fromhex("0001" + body)) == update_key
    assert snapshot_key != update_key


def test_a_key_of_another_record_type_is_not_ours():
    assert sr.decode_key(bytes.fromhex("0002" "0002" "6731")) is None


def test_snapshot_value_matches_kafka():
    assert sr.encode_value(SNAPSHOT).hex() == SNAPSHOT_HEX + "00"
    assert sr.decode_snapshot_value(bytes.fromhex(SNAPSHOT_HEX + "00")) == SNAPSHOT


def test_delivery_complete_count_is_tagged_field_0_written_only_when_set():
    value = sr.ShareSnapshotValue(**{**_fields(SNAPSHOT), "delivery_complete_count": 7})
    # one tagged field: tag 0, 4 bytes, 7
    assert sr.encode_value(value).hex() == SNAPSHOT_HEX + "01" "00" "04" "00000007"
    assert sr.decode_value(sr.ShareSnapshotKey("g", TOPIC, 0), sr.encode_value(value)) == value


def test_update_value_matches_kafka():
    assert sr.encode_value(UPDATE).hex() == UPDATE_HEX + "00"
    with_count = sr.ShareUpdateValue(2, 5, -1, UPDATE.state_batches, 3)
    assert sr.encode_value(with_count).hex() == UPDATE_HEX + "01" "00" "04" "00000003"
    assert sr.decode_value(sr.ShareUpdateKey("g", TOPIC, 0),
                           bytes.fromhex(UPDATE_HEX + "00")) == UPDATE


def test_unknown_tagged_fields_are_skipped_and_a_bad_size_is_refused():
    # tags 5 (2 bytes) then 0 (4 bytes): the unknown one is skipped
    raw = bytes.fromhex(UPDATE_HEX + "02" "05" "02" "abcd" "00" "04" "00000009")
    assert sr.decode_update_value(raw).delivery_complete_count == 9
    with pytest.raises(sr.ShareGroupStateFormatError):
        sr.decode_update_value(bytes.fromhex(UPDATE_HEX + "01" "00" "02" "0009"))


def test_another_value_version_is_refused():
    with pytest.raises(DecodeError):
        sr.decode_update_value(bytes.fromhex("0001" + UPDATE_HEX[4:] + "00"))


@pytest.mark.parametrize(("group", "topic_id", "partition", "expected"), [
    ("g1", TOPIC, 0, 21), ("g1", TOPIC, 1, 20), ("g1", TOPIC, 17, 23),
    ("g1", uuid.UUID(int=0), 0, 34), ("share-group", TOPIC, 0, 38),
    ("share-group", uuid.UUID(int=(0xFFFFFFFFFFFFFFFF << 64) | 42), 17, 38),
    ("queue", TOPIC, 17, 12), ("x", uuid.UUID(int=0), 17, 18),
])
def test_partition_for_is_kafkas(group, topic_id, partition, expected):
    assert sr.partition_for(group, topic_id, partition) == expected


def test_partition_for_other_partition_counts():
    assert sr.partition_for("queue", TOPIC, 0, 7) == 0
    assert sr.partition_for("g1", TOPIC, 17, 7) == 2


def _fields(value: sr.ShareSnapshotValue) -> dict:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


batches = st.lists(st.builds(
    StateBatch, st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 2, 4]), st.integers(-(2**15), 2**15 - 1)), max_size=5).map(tuple)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(st.builds(sr.ShareSnapshotValue, int32, int32, int32, int64, int64, int64, batches,
                 int32))
def test_snapshot_values_round_trip(value):
    assert sr.decode_snapshot_value(sr.encode_value(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.builds(sr.ShareUpdateValue, int32, int32, int64, batches, int32))
def test_update_values_round_trip(value):
    assert sr.decode_update_value(sr.encode_value(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20), st.uuids(), int32, st.booleans())
def test_keys_round_trip(group, topic_id, partition, snapshot):
    key = (sr.ShareSnapshotKey if snapshot else sr.ShareUpdateKey)(group, topic_id, partition)
    assert sr.decode_key(sr.encode_key(key)) == key


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_random_bytes_decode_or_raise_decode_error(data):
    for decode in (sr.decode_key, sr.decode_snapshot_value, sr.decode_update_value):
        with contextlib.suppress(DecodeError):
            decode(data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_truncated_or_mutated_records_raise_only_decode_error(data):
    raw = bytearray(sr.encode_value(SNAPSHOT if data.draw(st.booleans()) else UPDATE))
    cut = data.draw(st.integers(0, len(raw)))
    for i in data.draw(st.lists(st.integers(0, len(raw) - 1), max_size=3)):
        raw[i] = data.draw(st.integers(0, 255))
    for decode in (sr.decode_snapshot_value, sr.decode_update_value):
        with contextlib.suppress(DecodeError):
            decode(bytes(raw[:cut]))
