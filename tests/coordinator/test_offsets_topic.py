"""The __consumer_offsets records are Kafka's own layouts, byte for byte, so a log written
by Odradek reads in Kafka's tools (and the other way round), and every version Kafka
ever wrote still replays."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator import offsets_topic as ot


def test_offset_commit_key_is_version_1_group_topic_partition():
    assert ot.encode_offset_commit_key("g", "t", 1) == bytes.fromhex(
        "0001"  # key version 1
        "0001" "67"  # group "g"
        "0001" "74"  # topic "t"
        "00000001"  # partition 1
    )


def test_group_metadata_key_is_version_2_group():
    assert ot.encode_group_metadata_key("g") == bytes.fromhex("0002" "0001" "67")


def test_offset_commit_value_is_version_3_with_leader_epoch():
    value = ot.OffsetCommitValue(offset=5, leader_epoch=2, metadata="m", commit_timestamp=1000)
    assert ot.encode_offset_commit_value(value) == bytes.fromhex(
        "0003"  # value version 3
        "0000000000000005"  # offset
        "00000002"  # leader epoch
        "0001" "6d"  # metadata "m"
        "00000000000003e8"  # commit timestamp 1000
    )


def test_a_commit_with_an_expire_timestamp_is_written_as_version_1():
    value = ot.OffsetCommitValue(7, -1, "", commit_timestamp=1, expire_timestamp=2)
    assert ot.encode_offset_commit_value(value) == bytes.fromhex(
        "0001" "0000000000000007" "0000" "0000000000000001" "0000000000000002"
    )
    assert ot.decode_offset_commit_value(ot.encode_offset_commit_value(value)) == value


def test_group_metadata_value_is_version_3_with_instance_ids():
    value = ot.GroupMetadataValue(
        protocol_type="consumer", generation=1, protocol="range", leader="a",
        current_state_timestamp=7,
        members=[ot.MemberMetadataValue("a", None, "c", "/h", 10, 20, b"s", b"x")],
    )
    assert ot.encode_group_metadata_value(value) == bytes.fromhex(
        "0003"  # value version 3
        "0008" + b"consumer".hex() +  # protocol type
        "00000001"  # generation
        "0005" + b"range".hex() +  # protocol (nullable)
        "0001" "61"  # leader "a" (nullable)
        "0000000000000007"  # current state timestamp
        "00000001"  # one member
        "0001" "61"  # member id "a"
        "ffff"  # group instance id: null
        "0001" "63"  # client id "c"
        "0002" "2f68"  # client host "/h"
        "0000000a"  # rebalance timeout 10
        "00000014"  # session timeout 20
        "00000001" "73"  # subscription b"s"
        "00000001" "78"  # assignment b"x"
    )


def test_an_empty_group_has_null_protocol_and_leader():
    value = ot.GroupMetadataValue("consumer", 4, None, None, 99, [])
    raw = ot.encode_group_metadata_value(value)
    assert raw == bytes.fromhex("0003" "0008") + b"consumer" + bytes.fromhex(
        "00000004" "ffff" "ffff" "0000000000000063" "00000000"
    )
    assert ot.decode_group_metadata_value(raw) == value


def test_keys_decode_to_what_they_name():
    assert ot.decode_key(ot.encode_offset_commit_key("grp", "topic", 3)) == ot.OffsetCommitKey(
        "grp", "topic", 3
    )
    assert ot.decode_key(ot.encode_group_metadata_key("grp")) == ot.GroupMetadataKey("grp")
    # Version 0 offset keys (Kafka before 0.10) have the same fields.
    v0 = struct.pack(">hh", 0, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 9)
    assert ot.decode_key(v0) == ot.OffsetCommitKey("g", "t", 9)
    # KIP-848 consumer group keys (3-8), the share group keys Odradek writes (10, 11,
    # 14, 15) and the streams group keys (17, 19-23) are ours; share groups' target
    # assignments (12, 13) and Kafka 4.0's streams partition metadata (18) are not.
    assert ot.decode_key(struct.pack(">hh", 3, 1) + b"g") == ot.ConsumerGroupRecordKey(3, "g")
    assert ot.decode_key(struct.pack(">hh", 11, 1) + b"g") == ot.ConsumerGroupRecordKey(11, "g")
    assert ot.decode_key(struct.pack(">hh", 12, 1) + b"g") is None
    assert ot.decode_key(struct.pack(">hh", 17, 1) + b"g") == ot.ConsumerGroupRecordKey(17, "g")
    assert ot.decode_key(struct.pack(">hh", 18, 1) + b"g") is None


def test_old_offset_commit_values_still_read():
    v0 = struct.pack(">hqh", 0, 42, 2) + b"md" + struct.pack(">q", 1234)
    assert ot.decode_offset_commit_value(v0) == ot.OffsetCommitValue(42, -1, "md", 1234, -1)
    v1 = struct.pack(">hqh", 1, 42, 0) + struct.pack(">qq", 1234, 5678)
    assert ot.decode_offset_commit_value(v1) == ot.OffsetCommitValue(42, -1, "", 1234, 5678)
    v2 = struct.pack(">hqh", 2, 42, 0) + struct.pack(">q", 1234)
    assert ot.decode_offset_commit_value(v2) == ot.OffsetCommitValue(42, -1, "", 1234, -1)


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_old_group_metadata_values_still_read():
    member_v0 = _s("m") + _s("cid") + _s("/1.2.3.4") + struct.pack(">i", 30000)
    member_v0 += struct.pack(">i", 1) + b"S" + struct.pack(">i", 1) + b"A"
    v0 = struct.pack(">h", 0) + _s("consumer") + struct.pack(">i", 3) + _s("range") + _s("m")
    v0 += struct.pack(">i", 1) + member_v0
    decoded = ot.decode_group_metadata_value(v0)
    assert decoded == ot.GroupMetadataValue(
        "consumer", 3, "range", "m", -1,
        # v0 has no rebalance timeout: the session timeout stands in, as in Kafka.
        [ot.MemberMetadataValue("m", None, "cid", "/1.2.3.4", 30000, 30000, b"S", b"A")],
    )
    member_v1 = _s("m") + _s("cid") + _s("/h") + struct.pack(">ii", 60000, 30000)
    member_v1 += struct.pack(">i", 0) + struct.pack(">i", 0)
    v2 = struct.pack(">h", 2) + _s("consumer") + struct.pack(">i", 3) + _s("range") + _s("m")
    v2 += struct.pack(">q", 555) + struct.pack(">i", 1) + member_v1
    decoded = ot.decode_group_metadata_value(v2)
    assert decoded.current_state_timestamp == 555
    assert decoded.members == [
        ot.MemberMetadataValue("m", None, "cid", "/h", 60000, 30000, b"", b"")
    ]


@pytest.mark.parametrize("cut", [1, 3, 10, 20])
def test_truncated_records_are_refused(cut):
    raw = ot.encode_offset_commit_value(ot.OffsetCommitValue(1, 2, "meta", 3))
    with pytest.raises(ot.OffsetsTopicFormatError):
        ot.decode_offset_commit_value(raw[:cut])


def test_unknown_value_versions_are_refused():
    with pytest.raises(ot.OffsetsTopicFormatError):
        ot.decode_group_metadata_value(struct.pack(">h", 9) + b"\x00" * 20)


names = st.text(max_size=20)
member = st.builds(
    ot.MemberMetadataValue, names, st.none() | names, names, names,
    st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.binary(max_size=30),
    st.binary(max_size=30),
)


@given(names, st.integers(-(2**31), 2**31 - 1), st.none() | names, st.none() | names,
       st.integers(-1, 2**62), st.lists(member, max_size=4))
def test_group_metadata_round_trips(ptype, generation, protocol, leader, ts, members):
    value = ot.GroupMetadataValue(ptype, generation, protocol, leader, ts, members)
    assert ot.decode_group_metadata_value(ot.encode_group_metadata_value(value)) == value


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1), names,
       st.integers(0, 2**62))
def test_offset_commit_value_round_trips(offset, epoch, metadata, ts):
    value = ot.OffsetCommitValue(offset, epoch, metadata, ts)
    assert ot.decode_offset_commit_value(ot.encode_offset_commit_value(value)) == value


def test_java_string_hashcode_matches_java():
    assert ot.java_string_hashcode("") == 0
    assert ot.java_string_hashcode("abc") == 96354
    assert ot.java_string_hashcode("hello") == 99162322
    # Characters outside the BMP count as two UTF-16 code units in Java.
    assert ot.java_string_hashcode("\U0001f600") == 31 * 0xD83D + 0xDE00
    # The classic Integer.MIN_VALUE hash.
    assert ot.java_string_hashcode("polygenelubricants") == -(2**31)


def test_partition_for_is_kafkas_abs_hash_mod_partitions():
    # Utils.abs maps Integer.MIN_VALUE to 0 instead of overflowing to a negative.
    assert ot.partition_for("polygenelubricants") == 0
    assert ot.partition_for("hello") == 99162322 % 50
    assert ot.partition_for("abc", 7) == 96354 % 7
    negative = "zzzzzzzzzz"
    assert ot.java_string_hashcode(negative) < 0
    assert ot.partition_for(negative) == abs(ot.java_string_hashcode(negative)) % 50
