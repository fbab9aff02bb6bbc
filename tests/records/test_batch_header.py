"""The 61-byte v2 RecordBatch header (odradek.records.batch).

Covers the fixed layout against Kafka's field offsets, check_batch's corruption checks
(magic, sizes, CRC-32C over bytes 21..end), check_producer_batch's producer rules, the
header's derived properties, iter_headers, and the in-place rewrites the broker does on
append (base offset, leader epoch, LogAppendTime).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import batch as b
from odradek.records import builder, codecs
from odradek.records.builder import Record
from odradek.records.errors import CorruptRecordError, InvalidRecordError, RecordError

TS = 1_700_000_000_000

# (field, offset in the batch, struct code) as in Kafka's DefaultRecordBatch.
KAFKA_LAYOUT = [
    ("base_offset", 0, "q"),
    ("batch_length", 8, "i"),
    ("partition_leader_epoch", 12, "i"),
    ("magic", 16, "b"),
    ("crc", 17, "I"),
    ("attributes", 21, "h"),
    ("last_offset_delta", 23, "i"),
    ("base_timestamp", 27, "q"),
    ("max_timestamp", 35, "q"),
    ("producer_id", 43, "q"),
    ("producer_epoch", 51, "h"),
    ("base_sequence", 53, "i"),
    ("record_count", 57, "i"),
]


def sample_batch(count: int = 3, codec: int = codecs.NONE, **kwargs: object) -> bytes:
    records = [
        Record(100 + i, TS + i, f"k{i}".encode(), f"value-{i}".encode() * 5, [("h", b"x")])
        for i in range(count)
    ]
    return builder.build_batch(records, codec=codec, **kwargs)  # type: ignore[arg-type]


def refresh_crc(buf: bytearray, pos: int = 0) -> None:
    """Recompute the CRC so a deliberate header edit is seen by the later checks."""
    size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
    struct.pack_into(">I", buf, pos + 17, b.compute_crc(buf[pos : pos + size]))


# --- layout ------------------------------------------------------------------------------


def test_header_struct_is_61_bytes():
    assert b.HEADER.size == 61
    assert b.HEADER_SIZE == 61
    assert b.LOG_OVERHEAD_SIZE == 12


def test_header_fields_sit_at_kafka_offsets():
    # Distinct values per field, so a swapped or shifted field cannot go unnoticed.
    values = {
        "base_offset": 0x0102030405060708,
        "batch_length": 0x11121314,
        "partition_leader_epoch": 0x21222324,
        "magic": 2,
        "crc": 0xF1F2F3F4,
        "attributes": 0x3132,
        "last_offset_delta": 0x41424344,
        "base_timestamp": 0x5152535455565758,
        "max_timestamp": 0x6162636465666768,
        "producer_id": 0x7172737475767778,
        "producer_epoch": 0x0102,
        "base_sequence": 0x03040506,
        "record_count": 0x0708090A,
    }
    assert list(b.BatchHeader._fields) == [name for name, _, _ in KAFKA_LAYOUT]
    raw = b.HEADER.pack(*(values[name] for name, _, _ in KAFKA_LAYOUT))
    for name, offset, code in KAFKA_LAYOUT:
        assert struct.unpack_from(">" + code, raw, offset)[0] == values[name], name
    header = b.read_header(raw)
    assert header._asdict() == values


def test_field_offset_constants_match_kafka_layout():
    kafka = {name: offset for name, offset, _ in KAFKA_LAYOUT}
    constants = {
        "base_offset": b.BASE_OFFSET_AT,
        "batch_length": b.LENGTH_AT,
        "partition_leader_epoch": b.LEADER_EPOCH_AT,
        "magic": b.MAGIC_AT,
        "crc": b.CRC_AT,
        "attributes": b.ATTRIBUTES_AT,
        "last_offset_delta": b.LAST_OFFSET_DELTA_AT,
        "base_timestamp": b.BASE_TIMESTAMP_AT,
        "max_timestamp": b.MAX_TIMESTAMP_AT,
        "record_count": b.RECORD_COUNT_AT,
    }
    assert constants == {name: kafka[name] for name in constants}


def test_attribute_bits_match_kafka():
    assert b.COMPRESSION_MASK == 0x07
    assert b.TIMESTAMP_TYPE_BIT == 0x08
    assert b.TRANSACTIONAL_BIT == 0x10
    assert b.CONTROL_BIT == 0x20
    assert b.DELETE_HORIZON_BIT == 0x40


def test_read_header_at_position_inside_larger_buffer():
    batch = sample_batch()
    header = b.read_header(b"\xaa" * 7 + batch, 7)
    assert header == b.read_header(batch)
    assert header.base_offset == 100


def test_header_properties_describe_the_batch():
    batch = sample_batch(
        count=4,
        codec=codecs.ZSTD,
        transactional=True,
        producer_id=9,
        producer_epoch=2,
        base_sequence=11,
    )
    header = b.read_header(batch)
    assert header.size == len(batch)
    assert header.batch_length == len(batch) - 12
    assert header.last_offset == 103
    assert header.next_offset == 104
    assert header.compression == codecs.ZSTD
    assert header.is_transactional
    assert not header.is_control
    assert not header.has_delete_horizon
    assert not header.is_log_append_time
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 11)
    assert header.record_count == 4
    assert header.magic == 2


def test_compute_crc_matches_stored_crc():
    batch = sample_batch()
    assert b.compute_crc(batch) == b.read_header(batch).crc
    assert b.compute_crc(memoryview(batch)) == b.compute_crc(bytearray(batch))


# --- check_batch: good batches ------------------------------------------------------------


@pytest.mark.parametrize("codec", sorted(codecs.NAMES))
def test_valid_batch_passes_check(codec):
    batch = sample_batch(codec=codec)
    header = b.check_batch(batch, 0, len(batch))
    assert header == b.read_header(batch)


def test_check_accepts_bytes_bytearray_and_memoryview():
    batch = sample_batch()
    for buf in (batch, bytearray(batch), memoryview(batch)):
        assert b.check_batch(buf, 0, len(batch)).record_count == 3


def test_check_batch_at_offset_with_trailing_bytes():
    batch = sample_batch()
    buf = b"junk" + batch + b"more bytes after"
    header = b.check_batch(buf, 4, len(buf))
    assert header.size == len(batch)


def test_empty_batch_with_explicit_base_offset_is_well_formed():
    batch = builder.build_batch([], base_offset=42)
    header = b.check_batch(batch, 0, len(batch))
    assert header.record_count == 0
    assert header.size == 61


# --- check_batch: corruption --------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1, 3, -1, 127])
def test_wrong_magic_is_rejected_as_corrupt(magic):
    buf = bytearray(sample_batch())
    struct.pack_into(">b", buf, 16, magic)
    with pytest.raises(CorruptRecordError, match="magic"):
        b.check_batch(buf, 0, len(buf))


@pytest.mark.parametrize("cut", [0, 1, 12, 60])
def test_truncated_header_is_rejected_as_corrupt(cut):
    buf = sample_batch()[:cut]
    with pytest.raises(CorruptRecordError):
        b.check_batch(buf, 0, len(buf))


def test_end_before_header_end_is_rejected_even_if_buffer_is_longer():
    batch = sample_batch()
    with pytest.raises(CorruptRecordError):
        b.check_batch(batch, 0, 60)


def test_position_past_end_is_rejected_as_corrupt():
    batch = sample_batch()
    with pytest.raises(CorruptRecordError):
        b.check_batch(batch, len(batch) + 5, len(batch))


def test_batch_length_pointing_past_the_buffer_is_rejected():
    buf = bytearray(sample_batch())
    struct.pack_into(">i", buf, 8, len(buf) - 12 + 1)
    with pytest.raises(CorruptRecordError, match="claims"):
        b.check_batch(buf, 0, len(buf))


def test_batch_cut_short_by_one_byte_is_rejected():
    batch = sample_batch()
    with pytest.raises(CorruptRecordError):
        b.check_batch(batch[:-1], 0, len(batch) - 1)
    with pytest.raises(CorruptRecordError):
        b.check_batch(batch, 0, len(batch) - 1)


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 48])
def test_batch_length_too_small_or_negative_is_rejected(length):
    buf = bytearray(sample_batch())
    struct.pack_into(">i", buf, 8, length)
    with pytest.raises(CorruptRecordError):
        b.check_batch(buf, 0, len(buf))


def test_negative_record_count_is_rejected_even_with_valid_crc():
    buf = bytearray(sample_batch())
    struct.pack_into(">i", buf, 57, -1)
    refresh_crc(buf)
    with pytest.raises(CorruptRecordError, match="negative"):
        b.check_batch(buf, 0, len(buf))


def test_negative_last_offset_delta_is_rejected_even_with_valid_crc():
    buf = bytearray(sample_batch())
    struct.pack_into(">i", buf, 23, -1)
    refresh_crc(buf)
    with pytest.raises(CorruptRecordError, match="negative"):
        b.check_batch(buf, 0, len(buf))


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP])
def test_corrupted_byte_in_records_fails_crc_check(codec):
    batch = sample_batch(codec=codec)
    for pos in range(61, len(batch)):
        for mask in (0x01, 0x80, 0xFF):
            buf = bytearray(batch)
            buf[pos] ^= mask
            with pytest.raises(CorruptRecordError, match="CRC"):
                b.check_batch(buf, 0, len(buf))


def test_every_flipped_byte_from_attributes_on_is_rejected():
    batch = sample_batch()
    for pos in range(21, len(batch)):
        for mask in (0x01, 0x10, 0x80, 0xFF):
            buf = bytearray(batch)
            buf[pos] ^= mask
            with pytest.raises(CorruptRecordError):
                b.check_batch(buf, 0, len(buf))


@pytest.mark.parametrize("pos", range(17, 21))
def test_corrupted_crc_field_is_rejected(pos):
    buf = bytearray(sample_batch())
    buf[pos] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        b.check_batch(buf, 0, len(buf))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_single_byte_change_in_crc_range_is_rejected(data):
    batch = sample_batch(codec=data.draw(st.sampled_from(sorted(codecs.NAMES))))
    pos = data.draw(st.integers(21, len(batch) - 1))
    mask = data.draw(st.integers(1, 255))
    buf = bytearray(batch)
    buf[pos] ^= mask
    with pytest.raises(CorruptRecordError):
        b.check_batch(buf, 0, len(buf))


@pytest.mark.parametrize("pos", [*range(0, 8), *range(12, 16)])
def test_flipping_base_offset_or_leader_epoch_keeps_crc_valid(pos):
    buf = bytearray(sample_batch())
    buf[pos] ^= 0xFF
    header = b.check_batch(buf, 0, len(buf))
    assert header.crc == b.read_header(sample_batch()).crc


# --- check_producer_batch -----------------------------------------------------------------


def test_producer_batch_with_dense_offsets_passes():
    batch = builder.build_simple([b"a", b"b", b"c"])
    b.check_producer_batch(b.check_batch(batch, 0, len(batch)))


def test_empty_produced_batch_is_invalid():
    batch = builder.build_batch([], base_offset=0)
    header = b.check_batch(batch, 0, len(batch))
    with pytest.raises(InvalidRecordError, match="at least one record") as info:
        b.check_producer_batch(header)
    assert info.value.kafka_error == "INVALID_RECORD"


def test_produced_batch_with_offset_gaps_is_invalid():
    batch = builder.build_batch([Record(0, TS, None, b"a"), Record(5, TS, None, b"b")])
    header = b.check_batch(batch, 0, len(batch))
    assert header.last_offset_delta == 5
    with pytest.raises(InvalidRecordError, match="last offset delta"):
        b.check_producer_batch(header)


@pytest.mark.parametrize("last_offset_delta", [0, 1, 3, 100])
def test_produced_batch_with_wrong_last_offset_delta_is_invalid(last_offset_delta):
    records = [Record(i, TS, None, b"v") for i in range(3)]
    batch = builder.build_batch(records, last_offset_delta=last_offset_delta)
    header = b.check_batch(batch, 0, len(batch))
    with pytest.raises(InvalidRecordError):
        b.check_producer_batch(header)


def test_produced_control_batch_is_invalid():
    batch = builder.build_control_batch(
        builder.CONTROL_COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=TS
    )
    header = b.check_batch(batch, 0, len(batch))
    with pytest.raises(InvalidRecordError, match="control"):
        b.check_producer_batch(header)


def test_error_classes_map_to_kafka_error_names():
    assert issubclass(CorruptRecordError, RecordError)
    assert issubclass(InvalidRecordError, RecordError)
    assert CorruptRecordError.kafka_error == "CORRUPT_MESSAGE"
    assert InvalidRecordError.kafka_error == "INVALID_RECORD"


# --- iter_headers -------------------------------------------------------------------------


def test_iter_headers_walks_concatenated_batches():
    batches = [sample_batch(count=n, codec=n % 5) for n in (1, 2, 3, 4)]
    buf = b"".join(batches)
    found = list(b.iter_headers(buf))
    positions = [0]
    for batch in batches[:-1]:
        positions.append(positions[-1] + len(batch))
    assert [pos for pos, _ in found] == positions
    assert [h.record_count for _, h in found] == [1, 2, 3, 4]


def test_iter_headers_on_empty_buffer_yields_nothing():
    assert list(b.iter_headers(b"")) == []


def test_iter_headers_rejects_trailing_partial_batch():
    buf = sample_batch() + sample_batch()[:30]
    walker = b.iter_headers(buf)
    next(walker)
    with pytest.raises(CorruptRecordError):
        next(walker)


# --- in-place rewrites --------------------------------------------------------------------


@pytest.mark.parametrize("base_offset", [0, 1, 2**40, 2**63 - 1])
def test_set_base_offset_rewrites_in_place_and_batch_still_validates(base_offset):
    original = sample_batch()
    buf = bytearray(original)
    b.set_base_offset(buf, base_offset)
    header = b.check_batch(buf, 0, len(buf))
    assert header.base_offset == base_offset
    assert buf[8:] == original[8:]  # nothing else moved, not even the CRC
    decoded = builder.decode_batch(bytes(buf))
    assert [r.offset for r in decoded.records] == [base_offset + i for i in range(3)]


@pytest.mark.parametrize("epoch", [0, 7, 2**31 - 1, -1])
def test_set_partition_leader_epoch_rewrites_in_place_and_batch_still_validates(epoch):
    original = sample_batch()
    buf = bytearray(original)
    b.set_partition_leader_epoch(buf, epoch)
    header = b.check_batch(buf, 0, len(buf))
    assert header.partition_leader_epoch == epoch
    assert buf[:12] == original[:12]
    assert buf[16:] == original[16:]


def test_rewrites_at_position_touch_only_that_batch():
    first, second = sample_batch(count=2), sample_batch(count=3)
    buf = bytearray(first + second)
    b.set_base_offset(buf, 500, pos=len(first))
    b.set_partition_leader_epoch(buf, 9, pos=len(first))
    assert buf[: len(first)] == first
    headers = [h for _, h in b.iter_headers(buf)]
    assert headers[0].base_offset == 100
    assert (headers[1].base_offset, headers[1].partition_leader_epoch) == (500, 9)


def test_rewrites_work_through_a_memoryview():
    buf = bytearray(sample_batch())
    view = memoryview(buf)
    b.set_base_offset(view, 77)
    b.set_partition_leader_epoch(view, 3)
    b.set_log_append_time(view, TS + 99)
    header = b.check_batch(buf, 0, len(buf))
    assert (header.base_offset, header.partition_leader_epoch) == (77, 3)
    assert header.max_timestamp == TS + 99


@pytest.mark.parametrize("codec", sorted(codecs.NAMES))
def test_set_log_append_time_sets_bit_max_timestamp_and_valid_crc(codec):
    original = sample_batch(count=4, codec=codec, transactional=True)
    buf = bytearray(original)
    append_time = TS + 123_456
    b.set_log_append_time(buf, append_time)
    header = b.check_batch(buf, 0, len(buf))  # CRC recomputed
    assert header.is_log_append_time
    assert header.attributes == b.read_header(original).attributes | b.TIMESTAMP_TYPE_BIT
    assert header.is_transactional  # other attribute bits kept
    assert header.compression == codec
    assert header.max_timestamp == append_time
    assert header.base_timestamp == b.read_header(original).base_timestamp
    decoded = builder.decode_batch(bytes(buf))
    assert [r.timestamp for r in decoded.records] == [append_time] * 4
    assert [r.value for r in decoded.records] == [
        r.value for r in builder.decode_batch(original).records
    ]


def test_set_log_append_time_twice_keeps_the_latest_time():
    buf = bytearray(sample_batch())
    b.set_log_append_time(buf, TS + 1)
    b.set_log_append_time(buf, TS + 2)
    header = b.check_batch(buf, 0, len(buf))
    assert header.max_timestamp == TS + 2
    assert {r.timestamp for r in builder.decode_batch(bytes(buf)).records} == {TS + 2}


def test_set_log_append_time_at_position_leaves_neighbours_valid():
    first, second, third = sample_batch(1), sample_batch(2), sample_batch(3)
    buf = bytearray(first + second + third)
    b.set_log_append_time(buf, TS + 5, pos=len(first))
    decoded = builder.decode_batches(bytes(buf))
    assert [d.header.is_log_append_time for d in decoded] == [False, True, False]
    assert [r.timestamp for r in decoded[1].records] == [TS + 5, TS + 5]
    assert bytes(buf[: len(first)]) == first
    assert bytes(buf[len(first) + len(second) :]) == third
