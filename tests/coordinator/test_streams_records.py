"""Streams group records (KIP-1071) are Kafka 4.4's layouts, byte for byte: the expected
bytes below were written by Kafka 4.4's generated StreamsGroup*Key/Value classes
(MessageUtil.toCoordinatorTypePrefixedBytes for keys, toVersionPrefixedByteBuffer(0) for
values, each built with the field values below by a Java snippet run over the jars in
.cache/jvm/lib), and read back."""

from __future__ import annotations

import pytest

from odradek.coordinator import offsets_topic as ot
from odradek.coordinator import streams_records as sr
from odradek.coordinator.offsets_topic import OffsetsTopicFormatError
from odradek.coordinator.streams_topology import (
    CopartitionGroup,
    InternalTopic,
    Subtopology,
    Topology,
)

MEMBER = sr.MemberMetadata(None, "r1", "c", "/h", 30000, 1, "p", ("h", 8080), (("z", "a"),))
MEMBER_HEX = "0000000372310263032f68000075300000000102700102681f900002027a02610000"
NO_ENDPOINT = sr.MemberMetadata(None, None, "c", "/h", 30000, 1, "p", None, ())
NO_ENDPOINT_HEX = "000000000263032f6800007530000000010270ff0100"
CURRENT = sr.CurrentAssignment(7, 6, 1, {"0": {0}}, {}, {}, {"0": {2}})
CURRENT_HEX = "00000000000700000006010202300200000000000101020230020000000200010100"
TOPOLOGY = Topology(1, (Subtopology(
    "0", source_topics=("in",),
    changelog_topics=(InternalTopic("c", 0, 0, (("cleanup.policy", "compact"),)),),
    repartition_sink_topics=("r",),
    copartition_groups=(CopartitionGroup(source_topics=(0,)),)),))
TOPOLOGY_HEX = ("0000000000010202300203696e01020263000000000000020f636c65616e75702e706f6c6963"
                "7908636f6d70616374000002027201020200000101000000")


def test_values_are_kafkas_bytes_and_read_back():
    assert sr.encode_group_metadata(7).hex() == "000000000007000000000000000000"
    assert sr.decode_group_metadata(sr.encode_group_metadata(7)) == (7, -1, -1)
    # KIP-1331's tagged fields 2 (StoredDescriptionTopologyEpoch) and 3
    # (FailedDescriptionTopologyEpoch), each written only when not -1.
    stored_hex = "00000007000000000000000001020400000003"
    assert sr.encode_group_metadata(7, 3).hex() == "0000" + stored_hex
    assert sr.decode_group_metadata(bytes.fromhex("0000" + stored_hex)) == (7, 3, -1)
    both_hex = "000000070000000000000000020204fffffffe030400000004"
    assert sr.encode_group_metadata(7, -2, 4).hex() == "0000" + both_hex
    assert sr.decode_group_metadata(bytes.fromhex("0000" + both_hex)) == (7, -2, 4)
    assert sr.encode_member_metadata(MEMBER).hex() == MEMBER_HEX
    assert sr.decode_member_metadata(bytes.fromhex(MEMBER_HEX)) == MEMBER
    assert sr.encode_member_metadata(NO_ENDPOINT).hex() == NO_ENDPOINT_HEX
    assert sr.decode_member_metadata(bytes.fromhex(NO_ENDPOINT_HEX)) == NO_ENDPOINT
    assert sr.encode_target_assignment_metadata(7).hex() == "00000000000700"
    assert sr.decode_target_assignment_metadata(bytes.fromhex("00000000000700")) == 7
    target_hex = "0000020230030000000000000002000202310200000001000100"
    assert sr.encode_target_assignment_member({"0": {0, 2}}, {"1": {1}}, {}).hex() == \
        target_hex
    assert sr.decode_target_assignment_member(bytes.fromhex(target_hex)) == (
        {"0": {0, 2}}, {"1": {1}}, {})
    assert sr.encode_current_assignment(CURRENT).hex() == CURRENT_HEX
    assert sr.decode_current_assignment(bytes.fromhex(CURRENT_HEX)) == CURRENT
    assert sr.encode_topology(TOPOLOGY).hex() == TOPOLOGY_HEX
    assert sr.decode_topology(bytes.fromhex(TOPOLOGY_HEX)) == TOPOLOGY


def test_keys_are_kafkas_bytes():
    assert ot.encode_consumer_group_key(ot.STREAMS_GROUP_METADATA_KEY, "g").hex() == \
        "0011000167"
    key = ot.encode_consumer_group_key(ot.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY, "g", "m")
    assert key.hex() == "001600016700016d"
    assert ot.decode_key(key) == ot.ConsumerGroupRecordKey(22, "g", "m")


def test_a_truncated_value_is_a_format_error():
    with pytest.raises(OffsetsTopicFormatError):
        sr.decode_topology(bytes.fromhex(TOPOLOGY_HEX)[:20])
