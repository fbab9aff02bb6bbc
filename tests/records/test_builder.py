"""Building and decoding whole v2 record batches (odradek.records.builder).

Covers property-based round trips of arbitrary records through build_batch/decode_batch for
every codec (with delete horizon, offset overrides, producer fields, transactional and
LogAppendTime batches), control batches, decode_batches over concatenated batches, malformed
record sections, fuzzing that decode only ever raises RecordError subclasses, and a
cross-check against kio's independent batch reader/writer.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import batch as b
from odradek.records import builder, codecs
from odradek.records.builder import Record
from odradek.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    UnsupportedCompressionError,
)

TS = 1_700_000_000_000
ALL = sorted(codecs.NAMES)
CODEC_IDS = [codecs.NAMES[c] for c in ALL]
I64_MIN, I64_MAX = -(2**63), 2**63 - 1

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- strategies ---------------------------------------------------------------------------

# Timestamps: the usual (NO_TIMESTAMP, epoch millis) and wide ones whose pairwise deltas still
# fit a signed 64-bit varlong (the extremes have their own tests below).
timestamps = st.one_of(
    st.just(b.NO_TIMESTAMP),
    st.integers(0, 2**41),
    st.integers(-(2**61), 2**61),
)
nullable_bytes = st.none() | st.binary(max_size=40)
record_headers = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)), max_size=3
)


@st.composite
def record_lists(draw, min_size: int = 0, max_size: int = 8) -> list[Record]:
    """Records with strictly increasing offsets (gaps allowed, as after compaction)."""
    count = draw(st.integers(min_size, max_size))
    offset = draw(st.integers(0, 2**62))
    records = []
    for i in range(count):
        if i:
            offset += draw(st.integers(1, 2**20))
        records.append(
            Record(
                offset,
                draw(timestamps),
                draw(nullable_bytes),
                draw(nullable_bytes),
                draw(record_headers),
            )
        )
    return records


# --- raw encoders, independent of the builder, for hand-made malformed batches -----------


def varint(value: int) -> bytes:
    """Zig-zag varint of any Python int (no 64-bit wrap)."""
    zz = value << 1 if value >= 0 else ((-value) << 1) - 1
    out = bytearray()
    while zz > 0x7F:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


def field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def raw_record(
    *,
    ts_delta: int = 0,
    offset_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: list[tuple[bytes | None, bytes | None]] | None = None,
    header_count: int | None = None,
) -> bytes:
    headers = headers or []
    body = b"\x00" + varint(ts_delta) + varint(offset_delta) + field(key) + field(value)
    body += varint(len(headers) if header_count is None else header_count)
    for hkey, hvalue in headers:
        body += field(hkey) + field(hvalue)
    return varint(len(body)) + body


def raw_batch(
    records_section: bytes,
    count: int,
    *,
    codec: int = codecs.NONE,
    attributes: int | None = None,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = TS,
    max_timestamp: int = TS,
) -> bytes:
    payload = codecs.compress(codec, records_section) if codec in codecs.NAMES else b""
    out = bytearray(b.HEADER_SIZE)
    b.HEADER.pack_into(
        out,
        0,
        base_offset,
        b.HEADER_SIZE - b.LOG_OVERHEAD_SIZE + len(payload),
        -1,
        b.MAGIC_V2,
        0,
        codec if attributes is None else attributes,
        max(count - 1, 0) if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        max_timestamp,
        -1,
        -1,
        -1,
        count,
    )
    out += payload
    struct.pack_into(">I", out, b.CRC_AT, b.compute_crc(out))
    return bytes(out)


def decodes_or_record_error(buf: bytes) -> None:
    """The fuzz oracle: a RecordError subclass or a clean decode, nothing else."""
    with contextlib.suppress(RecordError):
        decoded = builder.decode_batch(buf)
        assert len(decoded.records) == decoded.header.record_count


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL, ids=CODEC_IDS)
@FAST
@given(records=record_lists(min_size=1))
def test_records_round_trip_through_every_codec(codec, records):
    batch = builder.build_batch(records, codec=codec)
    decoded = builder.decode_batch(batch)
    assert decoded.records == records
    header = decoded.header
    assert header == b.check_batch(batch, 0, len(batch))
    assert header.size == len(batch)
    assert header.magic == 2
    assert header.compression == codec
    assert header.base_offset == records[0].offset
    assert header.last_offset == records[-1].offset
    assert header.record_count == len(records)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.partition_leader_epoch == -1
    assert not (header.is_control or header.is_transactional)
    assert not (header.has_delete_horizon or header.is_log_append_time)


@FAST
@given(
    records=record_lists(),
    codec=st.sampled_from(ALL),
    data=st.data(),
    delete_horizon=st.none() | timestamps,
    producer_id=st.integers(-1, I64_MAX),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
    transactional=st.booleans(),
    partition_leader_epoch=st.integers(-1, 2**31 - 1),
)
def test_round_trip_with_overrides_producer_fields_and_delete_horizon(
    records,
    codec,
    data,
    delete_horizon,
    producer_id,
    producer_epoch,
    base_sequence,
    transactional,
    partition_leader_epoch,
):
    kwargs: dict[str, object] = {}
    if not records or data.draw(st.booleans(), label="override base offset"):
        first = records[0].offset if records else 2**40
        kwargs["base_offset"] = first - data.draw(st.integers(0, min(first, 1000)))
    base_offset = kwargs.get("base_offset", records[0].offset if records else None)
    natural_delta = records[-1].offset - base_offset if records else 0  # type: ignore[operator]
    if data.draw(st.booleans(), label="override last offset delta"):
        kwargs["last_offset_delta"] = natural_delta + data.draw(st.integers(0, 1000))
    batch = builder.build_batch(
        records,
        codec=codec,
        delete_horizon=delete_horizon,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        partition_leader_epoch=partition_leader_epoch,
        **kwargs,  # type: ignore[arg-type]
    )
    decoded = builder.decode_batch(batch)
    assert decoded.records == records  # timestamps too, even with a delete horizon
    header = decoded.header
    assert header.base_offset == base_offset
    assert header.last_offset_delta == kwargs.get("last_offset_delta", natural_delta)
    assert header.record_count == len(records)
    assert header.compression == codec
    assert header.has_delete_horizon == (delete_horizon is not None)
    if delete_horizon is not None:
        assert header.base_timestamp == delete_horizon
    else:
        assert header.base_timestamp == (records[0].timestamp if records else b.NO_TIMESTAMP)
    assert header.max_timestamp == max((r.timestamp for r in records), default=b.NO_TIMESTAMP)
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == base_sequence
    assert header.is_transactional == transactional
    assert header.partition_leader_epoch == partition_leader_epoch
    assert not header.is_control
    assert not header.is_log_append_time


@FAST
@given(
    records=record_lists(min_size=1),
    codec=st.sampled_from(ALL),
    append_time=st.integers(0, 2**45),
)
def test_log_append_time_batch_gives_every_record_the_append_time(records, codec, append_time):
    batch = builder.build_batch(records, codec=codec, log_append_time=append_time)
    decoded = builder.decode_batch(batch)
    assert decoded.header.is_log_append_time
    assert decoded.header.max_timestamp == append_time
    assert [r.timestamp for r in decoded.records] == [append_time] * len(records)
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded.records] == [
        (r.offset, r.key, r.value, r.headers) for r in records
    ]


def test_delete_horizon_is_stored_as_base_timestamp_and_record_timestamps_survive():
    records = [Record(10, TS, b"k", None), Record(11, TS + 500, b"k2", b"v")]
    horizon = TS + 86_400_000
    batch = builder.build_batch(records, delete_horizon=horizon, codec=codecs.LZ4)
    decoded = builder.decode_batch(batch)
    assert decoded.header.has_delete_horizon
    assert decoded.header.attributes & b.DELETE_HORIZON_BIT
    assert decoded.header.base_timestamp == horizon
    assert decoded.header.max_timestamp == TS + 500
    assert [r.timestamp for r in decoded.records] == [TS, TS + 500]


def test_cleaned_batch_keeps_its_offset_span_after_dropping_records():
    # The cleaner drops offsets 0, 1 and 4 of a 0..4 batch but keeps base offset and span.
    kept = [Record(2, TS, b"a", b"2"), Record(3, TS, b"b", b"3")]
    batch = builder.build_batch(
        kept, base_offset=0, last_offset_delta=4, producer_id=5, producer_epoch=1, base_sequence=0
    )
    decoded = builder.decode_batch(batch)
    assert decoded.records == kept
    assert (decoded.header.base_offset, decoded.header.last_offset_delta) == (0, 4)
    assert decoded.header.next_offset == 5
    assert decoded.header.record_count == 2
    with pytest.raises(InvalidRecordError):
        b.check_producer_batch(decoded.header)


def test_empty_batch_needs_an_explicit_base_offset():
    with pytest.raises(ValueError, match="base offset"):
        builder.build_batch([])


@pytest.mark.parametrize("codec", ALL, ids=CODEC_IDS)
def test_empty_batch_decodes_to_no_records(codec):
    batch = builder.build_batch([], base_offset=42, last_offset_delta=3, codec=codec)
    decoded = builder.decode_batch(batch)
    assert decoded.records == []
    assert decoded.header.base_offset == 42
    assert decoded.header.next_offset == 46
    assert decoded.header.base_timestamp == b.NO_TIMESTAMP
    assert decoded.header.max_timestamp == b.NO_TIMESTAMP


def test_large_record_values_round_trip_compressed():
    value = bytes(range(256)) * 4096  # 1 MiB, multi-byte varint lengths, many snappy blocks
    records = [Record(0, TS, b"big", value), Record(1, TS, None, value[::-1])]
    for codec in ALL:
        assert builder.decode_batch(builder.build_batch(records, codec=codec)).records == records


def test_unicode_header_keys_round_trip():
    records = [Record(0, TS, None, b"v", [("ключ", b"1"), ("🔑", None), ("", b"")])]
    assert builder.decode_batch(builder.build_batch(records)).records == records


def test_build_simple_makes_a_producer_style_batch():
    batch = builder.build_simple(
        [b"a", None, b"c"], keys=[b"k1", b"k2", None], timestamp=TS, codec=codecs.ZSTD
    )
    decoded = builder.decode_batch(batch)
    header = decoded.header
    b.check_producer_batch(header)
    assert header.compression == codecs.ZSTD
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded.records] == [
        (0, TS, b"k1", b"a"),
        (1, TS, b"k2", None),
        (2, TS, None, b"c"),
    ]


def test_build_simple_passes_producer_fields_through():
    batch = builder.build_simple(
        [b"x"], producer_id=77, producer_epoch=3, base_sequence=9, transactional=True
    )
    header = b.read_header(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 9)
    assert header.is_transactional


def test_build_simple_rejects_keys_of_another_length():
    with pytest.raises(ValueError):
        builder.build_simple([b"a", b"b"], keys=[b"k"])


# --- control batches ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", [builder.CONTROL_COMMIT, builder.CONTROL_ABORT], ids=["commit", "abort"]
)
def test_control_batch_decodes_with_control_and_transactional_bits(kind):
    batch = builder.build_control_batch(
        kind,
        producer_id=4242,
        producer_epoch=7,
        coordinator_epoch=13,
        timestamp=TS,
        base_offset=100,
    )
    decoded = builder.decode_batch(batch)
    header = decoded.header
    assert header.is_control
    assert header.is_transactional
    assert header.attributes & (b.CONTROL_BIT | b.TRANSACTIONAL_BIT) == 0x30
    assert (header.producer_id, header.producer_epoch) == (4242, 7)
    assert header.base_offset == 100
    assert header.record_count == 1
    (record,) = decoded.records
    assert record.offset == 100
    assert record.timestamp == TS
    assert builder.control_type(record) == kind
    # KIP-98 layout: key = version int16 + type int16; value = version int16 + epoch int32.
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, 13)


def test_control_type_constants_match_kafka():
    assert (builder.CONTROL_ABORT, builder.CONTROL_COMMIT) == (0, 1)


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_control_record_without_four_byte_key_is_corrupt(key):
    with pytest.raises(CorruptRecordError):
        builder.control_type(Record(0, TS, key, None))


# --- decode_batch / decode_batches over buffers --------------------------------------------


def test_decode_batches_over_concatenated_batches():
    batches = [
        builder.build_simple([b"a", b"b"], codec=codecs.GZIP),
        builder.build_control_batch(
            builder.CONTROL_COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
            timestamp=TS, base_offset=2,
        ),
        builder.build_batch([Record(3, TS, None, b"c"), Record(9, TS, None, b"d")], codec=4),
        builder.build_batch([], base_offset=10, last_offset_delta=1, codec=codecs.SNAPPY),
        builder.build_batch([Record(12, TS, None, b"e")], codec=codecs.LZ4),
    ]  # fmt: skip
    buf = b"".join(batches)
    decoded = builder.decode_batches(buf)
    assert [d.header.size for d in decoded] == [len(x) for x in batches]
    assert [[r.offset for r in d.records] for d in decoded] == [[0, 1], [2], [3, 9], [], [12]]
    assert [d.header.is_control for d in decoded] == [False, True, False, False, False]
    assert builder.decode_batches(memoryview(buf)) == decoded
    assert builder.decode_batches(bytearray(buf)) == decoded


@settings(max_examples=25, deadline=None)
@given(groups=st.lists(st.tuples(record_lists(min_size=1, max_size=4), st.sampled_from(ALL))))
def test_decode_batches_returns_each_batch_in_order(groups):
    buf = b"".join(builder.build_batch(recs, codec=codec) for recs, codec in groups)
    decoded = builder.decode_batches(buf)
    assert [d.records for d in decoded] == [recs for recs, _ in groups]
    assert [d.header.compression for d in decoded] == [codec for _, codec in groups]


def test_decode_batches_of_empty_buffer_is_empty():
    assert builder.decode_batches(b"") == []


def test_decode_batches_rejects_a_trailing_partial_batch():
    whole = builder.build_simple([b"a"])
    for cut in (1, 12, 61, len(whole) - 1):
        with pytest.raises(CorruptRecordError):
            builder.decode_batches(whole + whole[:cut])


def test_decode_batch_at_position_and_from_any_buffer_type():
    first = builder.build_simple([b"first"])
    second = builder.build_batch([Record(5, TS, b"k", b"second")], codec=codecs.ZSTD)
    buf = first + second
    assert builder.decode_batch(buf, len(first)).records == [Record(5, TS, b"k", b"second")]
    assert builder.decode_batch(memoryview(buf), len(first)).records[0].value == b"second"
    assert builder.decode_batch(bytearray(buf), len(first)).records[0].value == b"second"
    assert builder.decode_batch(memoryview(buf)[len(first) :]).records[0].value == b"second"


def test_decode_batch_checks_the_crc():
    buf = bytearray(builder.build_simple([b"payload"]))
    buf[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        builder.decode_batch(bytes(buf))


# --- malformed record sections (valid CRC, bad contents) ----------------------------------


def test_hand_encoded_batch_decodes_like_the_builder_writes():
    section = raw_record(key=b"k", value=b"v", headers=[(b"h", b"x")]) + raw_record(
        ts_delta=5, offset_delta=1, value=None
    )
    batch = raw_batch(section, 2, base_offset=7, max_timestamp=TS + 5)
    assert batch == builder.build_batch(
        [Record(7, TS, b"k", b"v", [("h", b"x")]), Record(8, TS + 5, None, None)]
    )


@pytest.mark.parametrize("codec", ALL, ids=CODEC_IDS)
def test_record_count_larger_than_records_is_corrupt(codec):
    batch = raw_batch(raw_record() + raw_record(offset_delta=1), 3, codec=codec)
    with pytest.raises(CorruptRecordError):
        builder.decode_batch(batch)


def test_record_length_longer_than_its_fields_is_corrupt():
    record = bytearray(raw_record(value=b"abc"))
    record[0] += 2  # length varint (small, one byte): claims 1 more byte than present
    with pytest.raises(CorruptRecordError):
        builder.decode_batch(raw_batch(bytes(record) + b"\x00", 1))


def test_record_length_shorter_than_its_fields_is_corrupt():
    record = bytearray(raw_record(value=b"abc"))
    record[0] -= 2
    with pytest.raises(CorruptRecordError):
        builder.decode_batch(raw_batch(bytes(record), 1))


def test_negative_record_length_is_corrupt():
    with pytest.raises(CorruptRecordError):
        builder.decode_batch(raw_batch(varint(-5) + b"\x00" * 10, 1))


def test_key_length_past_the_end_is_corrupt():
    body = b"\x00" + varint(0) + varint(0) + varint(1000) + b"short"
    with pytest.raises(CorruptRecordError):
        builder.decode_batch(raw_batch(varint(len(body)) + body, 1))


def test_varint_longer_than_ten_bytes_is_corrupt():
    body = b"\x00" + b"\xff" * 11 + b"\x00"
    with pytest.raises(CorruptRecordError, match="varint"):
        builder.decode_batch(raw_batch(varint(len(body)) + body, 1))


def test_varint_cut_short_is_corrupt():
    with pytest.raises(CorruptRecordError, match="varint"):
        builder.decode_batch(raw_batch(b"\x80\x80", 1))


@pytest.mark.parametrize("codec_bits", [5, 6, 7])
def test_batch_with_unknown_codec_raises_unsupported_compression(codec_bits):
    batch = raw_batch(raw_record(), 1, codec=codec_bits)
    with pytest.raises(UnsupportedCompressionError):
        builder.decode_batch(batch)


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
def test_batch_with_uncompressed_records_but_codec_bits_set_is_corrupt(codec):
    batch = raw_batch(b"\xff" * 8 + raw_record(), 1, attributes=codec)
    with pytest.raises(CorruptRecordError):
        builder.decode_batch(batch)


# --- fuzz ---------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_decode_of_arbitrary_bytes_raises_only_record_errors(data):
    decodes_or_record_error(data)


@settings(max_examples=150, deadline=None)
@given(
    section=st.binary(max_size=200),
    count=st.integers(-3, 40),
    attributes=st.integers(-(2**15), 2**15 - 1),
    last_offset_delta=st.integers(-3, 100),
    compress=st.booleans(),
)
def test_decode_of_batch_shaped_garbage_with_valid_crc_raises_only_record_errors(
    section, count, attributes, last_offset_delta, compress
):
    codec = attributes & b.COMPRESSION_MASK
    # Compress the garbage with the codec the attributes name (when it exists) so that the
    # record parser, not only the decompressor, sees it.
    codec = codec if compress and codec in codecs.NAMES else codecs.NONE
    batch = raw_batch(
        section, count, codec=codec, attributes=attributes, last_offset_delta=last_offset_delta
    )
    decodes_or_record_error(batch)


@settings(max_examples=100, deadline=None)
@given(
    records=record_lists(min_size=1, max_size=4),
    codec=st.sampled_from(ALL),
    data=st.data(),
    fix_crc=st.booleans(),
)
def test_decode_of_mutated_batch_raises_only_record_errors(records, codec, data, fix_crc):
    buf = bytearray(builder.build_batch(records, codec=codec))
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        pos = data.draw(st.integers(0, len(buf) - 1), label="pos")
        buf[pos] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        buf = buf[: data.draw(st.integers(0, len(buf)), label="cut")]
    if fix_crc and len(buf) >= b.HEADER_SIZE:
        # Let the mutation through the CRC so the record decoder has to face it.
        struct.pack_into(">i", buf, b.LENGTH_AT, len(buf) - b.LOG_OVERHEAD_SIZE)
        struct.pack_into(">I", buf, b.CRC_AT, b.compute_crc(buf))
    decodes_or_record_error(bytes(buf))


@settings(max_examples=80, deadline=None)
@given(
    records=record_lists(min_size=1, max_size=4),
    codec=st.sampled_from(ALL),
    data=st.data(),
)
def test_decode_of_mutated_record_section_behind_valid_crc_raises_only_record_errors(
    records, codec, data
):
    # Mutate the *uncompressed* records, then compress and seal: reaches the record parser
    # for every codec, not just the decompressor.
    section = bytearray()
    base = records[0]
    for r in records:
        builder.encode_record(
            section, r.offset - base.offset, r.timestamp - base.timestamp, r.key, r.value, r.headers
        )
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        pos = data.draw(st.integers(0, len(section) - 1), label="pos")
        section[pos] = data.draw(st.integers(0, 255), label="byte")
    count = len(records) + data.draw(st.integers(-1, 1), label="count skew")
    decodes_or_record_error(raw_batch(bytes(section), count, codec=codec))


# --- cross-check with kio's independent reader and writer ---------------------------------


def _kio():
    readers = pytest.importorskip("kio.records.readers")
    writers = pytest.importorskip("kio.records.writers")
    schema = pytest.importorskip("kio.records.schema")
    primitive = pytest.importorskip("kio.static.primitive")
    return readers, writers, schema, primitive


@settings(max_examples=30, deadline=None)
@given(
    records=record_lists(min_size=1, max_size=5),
    seconds=st.lists(st.integers(1, 2**33), min_size=5, max_size=5),
    producer_id=st.integers(-1, 2**40),
)
def test_kio_reader_agrees_with_our_uncompressed_batches(records, seconds, producer_id):
    readers, _, _, _ = _kio()
    # kio's reader truncates timestamps to whole seconds: give it whole seconds.
    records = [
        Record(r.offset, second * 1000, r.key, r.value, r.headers)
        for r, second in zip(records, seconds, strict=False)
    ]
    batch = builder.build_batch(records, producer_id=producer_id)
    theirs, size = readers.read_batch(batch, 0)
    assert size == len(batch)
    ours = b.read_header(batch)
    for name in (
        "base_offset", "batch_length", "partition_leader_epoch", "crc", "attributes",
        "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
        "producer_epoch", "base_sequence",
    ):  # fmt: skip
        assert getattr(theirs, name) == getattr(ours, name), name
    assert [
        (
            r.offset,
            int(r.timestamp.timestamp()) * 1000,
            r.key,
            r.value,
            [(h.key, h.value) for h in r.headers],
        )
        for r in theirs.records
    ] == [
        (r.offset, r.timestamp, r.key, r.value, [(k.encode(), v) for k, v in r.headers])
        for r in records
    ]


def test_batches_written_by_kio_decode_here():
    _, writers, schema, primitive = _kio()

    def at(second: int):
        moment = datetime.datetime.fromtimestamp(second, datetime.UTC)
        return primitive.TZAwareMicros.parse(moment)

    new_batch = schema.NewRecordBatch(
        producer_id=primitive.i64(99),
        producer_epoch=primitive.i16(2),
        base_sequence=primitive.i32(5),
        partition_leader_epoch=primitive.i32(3),
        attributes=primitive.i16(0),
        records=(
            schema.Record(
                attributes=primitive.i8(0),
                timestamp=at(1_700_000_000),
                offset=primitive.i64(10),
                key=b"k",
                value=None,
                headers=(schema.RecordHeader(key=b"h", value=b"hv"),),
            ),
            schema.Record(
                attributes=primitive.i8(0),
                timestamp=at(1_700_000_003),
                offset=primitive.i64(12),
                key=None,
                value=b"v" * 300,
                headers=(),
            ),
        ),
    )
    out = io.BytesIO()
    writers.write_new_batch(out, new_batch)
    decoded = builder.decode_batch(out.getvalue())
    header = decoded.header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 2, 5)
    assert header.partition_leader_epoch == 3
    assert (header.base_offset, header.last_offset_delta) == (10, 2)
    assert header.max_timestamp == 1_700_000_003_000
    assert decoded.records == [
        Record(10, 1_700_000_000_000, b"k", None, [("h", b"hv")]),
        Record(12, 1_700_000_003_000, None, b"v" * 300, []),
    ]


# --- edge cases Kafka's reader rejects or wraps (found by these tests, now fixed) ---------


@pytest.mark.parametrize(
    ("timestamps", "horizon"),
    [
        ((I64_MIN, I64_MAX), None),
        ((b.NO_TIMESTAMP, I64_MAX), None),
        ((I64_MIN,), TS),
    ],
    ids=["min-then-max", "no-timestamp-then-max", "min-with-delete-horizon"],
)
def test_int64_extreme_timestamps_round_trip(timestamps, horizon):
    records = [Record(i, ts, None, b"v") for i, ts in enumerate(timestamps)]
    decoded = builder.decode_batch(builder.build_batch(records, delete_horizon=horizon))
    assert [r.timestamp for r in decoded.records] == list(timestamps)


def test_wrapped_timestamp_delta_from_java_decodes_as_kafka_does():
    batch = raw_batch(raw_record(ts_delta=1), 1, base_timestamp=I64_MAX, max_timestamp=I64_MAX)
    assert builder.decode_batch(batch).records[0].timestamp == I64_MIN


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP], ids=["none", "gzip"])
def test_records_beyond_the_declared_count_are_rejected(codec):
    section = raw_record(value=b"a") + raw_record(offset_delta=1, value=b"b")
    batch = raw_batch(section, 1, codec=codec)  # says 1 record, holds 2
    with pytest.raises(RecordError):
        builder.decode_batch(batch)


def test_negative_header_count_is_rejected():
    batch = raw_batch(raw_record(header_count=-1), 1)
    with pytest.raises(RecordError):
        builder.decode_batch(batch)


def test_null_header_key_is_rejected():
    batch = raw_batch(raw_record(headers=[(None, b"x")]), 1)
    with pytest.raises(RecordError):
        builder.decode_batch(batch)


def test_rebuilding_a_control_batch_keeps_it_a_control_batch():
    # The cleaner gives markers a delete horizon (KIP-534) by rebuilding them.
    batch = builder.build_control_batch(builder.CONTROL_ABORT, producer_id=9, producer_epoch=2,
                                        coordinator_epoch=3, timestamp=TS, base_offset=40)
    decoded = builder.decode_batch(batch)
    rebuilt = builder.decode_batch(builder.rebuild_batch(decoded.header, decoded.records,
                                                         delete_horizon=TS + 1000))
    assert rebuilt.header.is_control and rebuilt.header.is_transactional
    assert rebuilt.header.has_delete_horizon and rebuilt.header.base_timestamp == TS + 1000
    assert rebuilt.records == decoded.records
