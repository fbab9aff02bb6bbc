"""The __transaction_state records are Kafka's own layouts, byte for byte, so a log written
by Odradek replays in Kafka (value version 0, what a Kafka 3.x broker reads) and a log
written by Kafka 4 (flexible version 1) replays here."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator import transaction_log as tl
from odradek.coordinator.transactions import TransactionCoordinator, TxnState


def test_key_is_version_0_transactional_id():
    assert tl.encode_key("tx") == bytes.fromhex("0000" "0002" "7478")
    assert tl.decode_key(bytes.fromhex("0000" "0002" "7478")) == "tx"


def test_a_key_of_another_coordinator_record_type_is_not_ours():
    assert tl.decode_key(bytes.fromhex("0001" "0002" "7478")) is None


def test_an_ongoing_transaction_value_is_version_0_with_its_partitions():
    value = tl.TransactionLogValue(
        producer_id=1000, producer_epoch=3, transaction_timeout_ms=60_000,
        status=TxnState.ONGOING, partitions={"out": [1, 0], "b": [7]},
        last_update_timestamp_ms=2000, start_timestamp_ms=1000)
    assert tl.encode_value(value) == bytes.fromhex(
        "0000"  # value version 0
        "00000000000003e8"  # producer id 1000
        "0003"  # producer epoch 3
        "0000ea60"  # transaction timeout 60000 ms
        "01"  # status: Ongoing
        "00000002"  # two topics (sorted)
        "0001" "62" "00000001" "00000007"  # "b": [7]
        "0003" "6f7574" "00000002" "00000000" "00000001"  # "out": [0, 1]
        "00000000000007d0"  # last update 2000
        "00000000000003e8"  # start 1000
    )


def test_an_empty_transaction_writes_null_partitions():
    value = tl.TransactionLogValue(7, 0, 100, TxnState.EMPTY, None, 5, -1)
    encoded = tl.encode_value(value)
    assert encoded == bytes.fromhex(
        "0000" "0000000000000007" "0000" "00000064" "00"
        "ffffffff"  # null array
        "0000000000000005" "ffffffffffffffff")
    assert tl.decode_value(encoded) == value


def test_the_coordinators_records_are_the_hand_computed_layouts():
    c = TransactionCoordinator(allocate_producer_id=lambda: 42)
    fx = c.init_producer_id("t", 60_000, token=1, now_ms=10)
    assert fx.records[0].key == bytes.fromhex("0000" "0001" "74")
    assert fx.records[0].value == bytes.fromhex(
        "0000" "000000000000002a" "0000" "0000ea60" "00" "ffffffff"
        "000000000000000a" "ffffffffffffffff")
    fx = c.add_partitions("t", 42, 0, [("a", 3)], token=2, now_ms=20)
    assert fx.records[0].value == bytes.fromhex(
        "0000" "000000000000002a" "0000" "0000ea60" "01"
        "00000001" "0001" "61" "00000001" "00000003"
        "0000000000000014" "0000000000000014")
    fx = c.end_txn("t", 42, 0, True, token=3, now_ms=30)
    assert fx.records[0].value == bytes.fromhex(
        "0000" "000000000000002a" "0000" "0000ea60" "02"
        "00000001" "0001" "61" "00000001" "00000003"
        "000000000000001e" "0000000000000014")
    fx = c.markers_written("t", 42, 0, now_ms=40)
    assert fx.records[0].value == bytes.fromhex(
        "0000" "000000000000002a" "0000" "0000ea60" "04"
        "00000000"  # CompleteCommit: an empty array, not null
        "0000000000000028" "0000000000000014")


def test_a_flexible_version_1_value_from_kafka_4_is_read_and_written_alike():
    raw = bytes.fromhex(
        "0001"  # value version 1
        "00000000000003e8" "0002" "0000ea60" "02"
        "02"  # compact array: 1 entry
        "04" "6f7574"  # compact string "out"
        "03" "00000000" "00000002"  # compact int32 array [0, 2]
        "00"  # partition entry's tagged fields
        "0000000000000064" "0000000000000032"
        "02"  # two tagged fields
        "00" "08" "00000000000003e7"  # tag 0: previous producer id 999
        "02" "02" "0002"  # tag 2: client transaction version 2
    )
    value = tl.TransactionLogValue(
        1000, 2, 60_000, TxnState.PREPARE_COMMIT, {"out": [0, 2]}, 100, 50,
        previous_producer_id=999, client_version=2)
    assert tl.decode_value(raw) == value
    # A transaction version 2 client's state is written in Kafka's own bytes.
    assert tl.encode_value(value) == raw


@pytest.mark.parametrize("raw", [
    b"",
    bytes.fromhex("0002" "00"),  # unknown version
    bytes.fromhex("0000" "00000000000003e8"),  # truncated
    bytes.fromhex("0000" "0000000000000001" "0000" "00000064" "01" "7fffffff"),  # huge count
])
def test_values_that_do_not_decode_are_format_errors(raw):
    with pytest.raises(tl.TransactionLogFormatError):
        tl.decode_value(raw)


def test_partition_for_is_kafkas_abs_hashcode_mod_partition_count():
    # "t".hashCode() == 116; "hello".hashCode() == 99162322
    assert tl.partition_for("t") == 116 % 50
    assert tl.partition_for("hello", 7) == 99162322 % 7
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Utils.abs gives 0.
    assert tl.partition_for("polygenelubricants") == 0


values = st.builds(
    tl.TransactionLogValue,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(-1, 32767),
    transaction_timeout_ms=st.integers(1, 2**31 - 1),
    status=st.integers(1, 5),
    partitions=st.dictionaries(st.text(min_size=1, max_size=5),
                               st.lists(st.integers(0, 1000), min_size=1, max_size=4,
                                        unique=True).map(sorted), max_size=3),
    last_update_timestamp_ms=st.integers(-1, 2**62),
    start_timestamp_ms=st.integers(-1, 2**62),
)


@given(values)
def test_every_value_round_trips(value):
    assert tl.decode_value(tl.encode_value(value)) == value
