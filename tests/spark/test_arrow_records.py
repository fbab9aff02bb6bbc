"""The native reader's decoder (odradek.spark.arrow_records) against the reference decoder
of the records layer: any batches, any codec, the same records; damaged bytes are an error,
never a different row; read_committed drops exactly the aborted transactions' batches."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import batch as rb
from odradek.records import builder, codecs
from odradek.records.builder import Record
from odradek.records.errors import CorruptRecordError
from odradek.spark.arrow_records import AbortedTxn, decode, walk

# Long fields are drawn by length only (random bytes that long would be slow to generate).
_fields = st.one_of(st.none(), st.binary(max_size=40),
                    st.integers(60, 300).map(lambda n: bytes(i % 251 for i in range(n))),
                    st.integers(8192, 8300).map(lambda n: b"\x81" * n))  # 3-byte lengths
_headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))),
                    max_size=3)
_batch = st.tuples(
    st.lists(st.tuples(_fields, _fields, _headers, st.integers(-(2**40), 2**40)),
             min_size=1, max_size=12),
    st.sampled_from(sorted(codecs.NAMES)),
    st.booleans(),  # LogAppendTime
    st.integers(0, 3),  # offset gap before the batch (compaction leaves gaps)
)


def build(spec: list, first_offset: int = 0) -> bytes:
    out = []
    offset = first_offset
    for records, codec, append_time, gap in spec:
        offset += gap
        stamp = 1_700_000_000_000
        batch = [Record(offset + i, stamp + delta, key, value, list(headers))
                 for i, (key, value, headers, delta) in enumerate(records)]
        out.append(builder.build_batch(batch, codec=codec,
                                       log_append_time=stamp + 7 if append_time else None))
        offset += len(records)
    return b"".join(out)


def reference(data: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for decoded in builder.decode_batches(data) for r in decoded.records]


def decoded(data: bytes, **kwargs) -> list[tuple]:
    columns = decode(walk(data, 0, **kwargs), with_headers=True)
    if columns is None:
        return []
    return list(zip(columns.offset.tolist(), columns.timestamp.tolist(),
                    columns.key.to_pylist(), columns.value.to_pylist(), columns.headers,
                    strict=True))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_batch, min_size=1, max_size=5))
def test_any_batches_decode_to_the_records_the_reference_decoder_finds(spec):
    data = build(spec)
    assert decoded(data) == reference(data)
    columns = decode(walk(data, 0))
    append_time = [t for records, _, t, _ in spec for _ in records]
    assert columns.timestamp_type.tolist() == [int(t) for t in append_time]
    assert columns.headers is None  # only decoded when the headers column is asked for


@settings(max_examples=150, deadline=None)
@given(st.lists(_batch, min_size=1, max_size=2), st.data())
def test_a_damaged_record_is_an_error_or_the_reference_decoders_answer(spec, data):
    """Any byte of the records changed (and the CRC made to match, so the decoder itself
    must notice): either both decoders refuse the batch or both give the same records.
    The native one also refuses offsets that do not increase (the reference decoder
    has no reason to look; a reader that slices by offset must)."""
    whole = bytearray(build([(records, codecs.NONE, t, g) for records, _, t, g in spec]))
    first = rb.read_header(whole)
    at = data.draw(st.integers(rb.HEADER_SIZE, first.size - 1))
    whole[at] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", whole, rb.CRC_AT, rb.compute_crc(whole[: first.size]))
    try:
        expected = reference(bytes(whole))
        offsets = [r[0] for r in expected]
        if offsets != sorted(set(offsets)):
            raise CorruptRecordError("offsets do not increase")
    except CorruptRecordError:
        with pytest.raises(CorruptRecordError):
            decoded(bytes(whole))
        return
    assert decoded(bytes(whole)) == expected


def test_a_batch_cut_short_by_the_fetch_size_is_left_for_the_next_fetch():
    data = build([([(b"k", b"v" * 50, [], 0)] * 5, codecs.NONE, False, 0)] * 3)
    size = rb.read_header(data).size
    cut = data[: 2 * size + 30]
    batches = walk(cut, 0)
    assert batches.next_offset == 10
    assert [r[0] for r in decoded(cut)] == list(range(10))


def test_a_bad_crc_is_an_error_naming_the_batch():
    data = bytearray(build([([(b"k", b"value", [], 0)] * 3, codecs.NONE, False, 0)]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        walk(bytes(data), 0)


def test_a_record_count_that_does_not_match_the_records_is_an_error():
    data = bytearray(build([([(b"k", b"value", [], 0)] * 3, codecs.NONE, False, 0)]))
    struct.pack_into(">i", data, 57, 2)  # recordCount
    struct.pack_into(">I", data, rb.CRC_AT, rb.compute_crc(data))
    with pytest.raises(CorruptRecordError, match="batch at offset 0"):
        decode(walk(bytes(data), 0))


def test_a_record_count_beyond_what_the_bytes_can_hold_is_refused_before_any_allocation():
    data = bytearray(build([([(b"k", b"value", [], 0)] * 3, codecs.NONE, False, 0)]))
    struct.pack_into(">i", data, 57, 2**31 - 1)  # recordCount
    struct.pack_into(">I", data, rb.CRC_AT, rb.compute_crc(data))
    with pytest.raises(CorruptRecordError, match="claims 2147483647 records"):
        decode(walk(bytes(data), 0))


def _txn(records: int, offset: int, producer_id: int) -> bytes:
    return builder.build_batch([Record(offset + i, 0, None, b"p%d-%d" % (producer_id, i))
                                for i in range(records)],
                               producer_id=producer_id, producer_epoch=0, base_sequence=0,
                               transactional=True)


def _marker(kind: int, offset: int, producer_id: int) -> bytes:
    return builder.build_control_batch(kind, producer_id=producer_id, producer_epoch=0,
                                       coordinator_epoch=0, timestamp=0, base_offset=offset)


def test_read_committed_drops_aborted_transactions_and_every_marker():
    # 0-1 producer 7 (aborted), 2-3 producer 8 (committed), 4 plain, 5 and 6 the markers,
    # 7-8 producer 7 again in a new transaction that commits at 9.
    data = b"".join([
        _txn(2, 0, 7), _txn(2, 2, 8),
        builder.build_batch([Record(4, 0, None, b"plain")]),
        _marker(builder.CONTROL_ABORT, 5, 7), _marker(builder.CONTROL_COMMIT, 6, 8),
        _txn(2, 7, 7), _marker(builder.CONTROL_COMMIT, 9, 7),
    ])
    committed = decoded(data, read_committed=True, aborted=[AbortedTxn(7, 0)])
    assert [r[0] for r in committed] == [2, 3, 4, 7, 8]
    assert [r[0] for r in decoded(data)] == [0, 1, 2, 3, 4, 7, 8]
    assert walk(data, 0).next_offset == 10  # past the last marker: the reader moves on


def test_large_random_fetch_matches_the_reference():
    rng = random.Random(4)
    spec = [([(rng.choice([None, b"k%d" % i]), rng.randbytes(rng.randint(0, 400)), [], i)
              for i in range(rng.randint(1, 500))], rng.choice(sorted(codecs.NAMES)), False, 0)
            for _ in range(20)]
    data = build(spec, first_offset=1_000_000)
    assert decoded(data) == reference(data)
