"""Appending batches and reading them back: offsets, whole-batch regions, limits, and
bad batches that are refused without writing anything."""

from __future__ import annotations

import os

import pytest

from odradek.records import batch as rb
from odradek.records import builder, codecs
from odradek.records.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from odradek.storage import LogConfig, OffsetOutOfRangeError
from odradek.storage.errors import InvalidOffsetError

from .conftest import make_batch, values_in


def test_appends_get_consecutive_offsets_from_zero(open_log):
    lg = open_log()
    first = lg.append(make_batch(3))
    second = lg.append(make_batch(5, start=3))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 7)
    assert lg.log_end_offset == 8
    assert values_in(lg) == [(i, f"v{i}".encode()) for i in range(8)]


def test_offsets_are_written_into_the_stored_header_without_touching_the_crc(open_log):
    lg = open_log()
    lg.append(make_batch(4))
    payload = make_batch(2, start=4)
    lg.append(payload, leader_epoch=7)
    region = lg.read(4, 10_000).region
    stored = region.read()
    header = rb.read_header(stored)
    assert header.base_offset == 4
    assert header.partition_leader_epoch == 7
    assert header.crc == rb.read_header(payload).crc
    assert stored[rb.MAGIC_AT :] == payload[rb.MAGIC_AT :]  # everything after is byte-identical
    rb.check_batch(stored, 0, len(stored))


def test_one_append_may_carry_several_batches(open_log):
    lg = open_log()
    info = lg.append(make_batch(2) + make_batch(3, start=2) + make_batch(1, start=5))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 5, 6)
    assert len(info.batches) == 3
    assert [v for _, v in values_in(lg)] == [f"v{i}".encode() for i in range(6)]


@pytest.mark.parametrize("codec", sorted(codecs.NAMES))
def test_every_codec_is_stored_and_read_back_as_sent(open_log, codec):
    lg = open_log()
    keys = [f"k{i}".encode() for i in range(20)]
    lg.append(make_batch(20, codec=codec, keys=keys))
    decoded = lg.read_batches(0)
    assert decoded[0].header.compression == codec
    assert [r.key for r in decoded[0].records] == keys


def test_read_returns_the_whole_batch_that_holds_the_offset(open_log):
    lg = open_log()
    lg.append(make_batch(10))
    lg.append(make_batch(10, start=10))
    result = lg.read(15, 1_000_000)
    assert result.first_offset == 10
    batches = builder.decode_batches(result.region.read())
    assert [b.header.base_offset for b in batches] == [10]
    assert result.log_end_offset == 20 and result.log_start_offset == 0


def test_read_stops_at_max_bytes_on_a_batch_boundary(open_log, small_config):
    lg = open_log(small_config)
    for i in range(50):
        lg.append(make_batch(5, start=5 * i, value_size=20))
    size = len(make_batch(5, value_size=20))
    for max_bytes in (size, size + 1, 3 * size - 1, 3 * size, 1000, 4000):
        region = lg.read(0, max_bytes).region
        assert region.length <= max(max_bytes, size)
        assert region.length % size == 0  # whole batches only
        assert region.length >= size * (max_bytes // size) or region.length == lg.segments[0].size


def test_read_gives_at_least_one_batch_even_if_larger_than_max_bytes(open_log):
    lg = open_log()
    lg.append(make_batch(100, value_size=100))
    assert lg.read(0, 10).region.length == lg.active.size
    assert lg.read(0, 10, min_one=False).region is None


def test_read_never_crosses_max_offset(open_log):
    lg = open_log()
    for i in range(5):
        lg.append(make_batch(4, start=4 * i))
    result = lg.read(0, 1_000_000, max_offset=12)
    assert [b.header.next_offset for b in builder.decode_batches(result.region.read())][-1] == 12
    assert lg.read(12, 1_000_000, max_offset=12).region is None


def test_read_at_the_log_end_is_empty_and_past_it_is_out_of_range(open_log):
    lg = open_log()
    lg.append(make_batch(3))
    assert lg.read(3, 100).region is None
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 100)


def test_regions_are_readable_from_the_fd_with_sendfile(open_log, tmp_path):
    lg = open_log()
    lg.append(make_batch(10))
    region = lg.read(0, 10_000).region
    out = tmp_path / "out"
    with open(out, "wb") as f:
        sent = os.sendfile(f.fileno(), region.fd, region.position, region.length)
    assert sent == region.length
    assert out.read_bytes() == region.read()


def _corrupt(data: bytes, at: int) -> bytes:
    buf = bytearray(data)
    buf[at] ^= 0xFF
    return bytes(buf)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: _corrupt(make_batch(3), 70), CorruptRecordError),  # a record byte: CRC
        (lambda: _corrupt(make_batch(3), rb.MAGIC_AT), CorruptRecordError),  # magic 2 -> !2
        (lambda: make_batch(3)[:-1], CorruptRecordError),  # cut short
        (lambda: make_batch(3) + b"\x00" * 5, CorruptRecordError),  # trailing garbage
        (lambda: b"\x00" * 11, CorruptRecordError),  # less than a header
        (lambda: builder.build_batch([], base_offset=0), InvalidRecordError),
        (lambda: builder.build_batch([builder.Record(0, 0, None, b"a"),
                                      builder.Record(5, 0, None, b"b")]), InvalidRecordError),
        (lambda: builder.build_control_batch(builder.CONTROL_COMMIT, producer_id=1,
                                             producer_epoch=0, coordinator_epoch=0,
                                             timestamp=0), InvalidRecordError),
    ],
    ids=["crc", "magic", "truncated", "trailing-garbage", "fragment", "no-records",
         "offset-delta-mismatch", "control-from-client"],
)
def test_invalid_batches_are_refused_and_nothing_is_written(open_log, make, error):
    lg = open_log()
    lg.append(make_batch(2))
    size = lg.active.size
    with pytest.raises(error):
        lg.append(make_batch(1, start=2) + make())  # a good batch first: still nothing kept
    assert lg.active.size == size
    assert lg.log_end_offset == 2
    assert lg.append(make_batch(1, start=2)).first_offset == 2


def test_an_empty_append_is_refused(open_log):
    lg = open_log()
    with pytest.raises(CorruptRecordError):
        lg.append(b"")
    assert lg.active.size == 0


def test_batches_over_max_message_bytes_are_refused(open_log):
    lg = open_log(LogConfig.from_kafka({"max.message.bytes": 500}))
    with pytest.raises(RecordTooLargeError):
        lg.append(make_batch(10, value_size=100))
    assert lg.log_end_offset == 0
    lg.append(make_batch(2))


def test_log_append_time_topics_stamp_batches_with_the_broker_clock(open_log, clock):
    lg = open_log(LogConfig.from_kafka({"message.timestamp.type": "LogAppendTime"}))
    info = lg.append(make_batch(3, timestamp=5))
    assert info.log_append_time == clock.now
    decoded = lg.read_batches(0)[0]
    assert decoded.header.is_log_append_time
    assert [r.timestamp for r in decoded.records] == [clock.now] * 3


def test_follower_appends_keep_their_offsets_and_must_continue_the_log(open_log):
    lg = open_log()
    leader_batch = bytearray(make_batch(3))
    rb.set_base_offset(leader_batch, 0)
    lg.append(bytes(leader_batch), assign_offsets=False)
    rb.set_base_offset(leader_batch, 1)
    with pytest.raises(InvalidOffsetError):
        lg.append(bytes(leader_batch), assign_offsets=False)
    rb.set_base_offset(leader_batch, 10)  # a gap (e.g. compacted upstream) is fine
    info = lg.append(bytes(leader_batch), assign_offsets=False)
    assert (info.first_offset, lg.log_end_offset) == (10, 13)


def test_a_large_append_with_a_bad_crc_is_cut_off_the_file_after_the_overlapped_check(open_log):
    from odradek.storage.log import OVERLAP_CRC_BYTES

    lg = open_log()
    lg.append(make_batch(2))
    size = lg.active.size
    # two batches (each under max.message.bytes) in one append, as a follower's could be
    big = make_batch(3000, start=2, value_size=200) + make_batch(3000, start=3002,
                                                                 value_size=200)
    assert len(big) >= OVERLAP_CRC_BYTES  # takes the overlapped path
    bad = _corrupt(big, len(big) - 10)
    with pytest.raises(CorruptRecordError, match="CRC"):
        lg.append(bad)
    assert lg.active.size == size == os.path.getsize(lg.active.log_path)
    assert lg.log_end_offset == 2
    info = lg.append(big)
    assert (info.first_offset, info.last_offset) == (2, 6001)
    assert len(values_in(lg)) == 6002


@pytest.mark.parametrize("target", ["gzip", "zstd", "uncompressed"])
def test_a_topic_compression_type_recompresses_batches_keeping_everything_else(open_log,
                                                                             target):
    lg = open_log(LogConfig.from_kafka({"compression.type": target}))
    records = [builder.Record(i, 1000 + i, b"k%d" % i, b"v%d" % i, [("h", b"x")])
               for i in range(5)]
    sent = builder.build_batch(records, codec=codecs.LZ4, producer_id=3, producer_epoch=0,
                               base_sequence=0)
    lg.append(sent)
    (stored,) = lg.read_batches(0)
    assert stored.header.compression == codecs.IDS.get(target, codecs.NONE)
    assert (stored.header.producer_id, stored.header.base_sequence) == (3, 0)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in stored.records] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
    assert lg.append(sent).duplicate  # the retry is still recognised


def test_compression_type_producer_keeps_the_producers_bytes(open_log):
    lg = open_log()
    sent = make_batch(5, codec=codecs.SNAPPY)
    lg.append(sent)
    assert lg.read(0, 10_000).region.read()[rb.MAGIC_AT:] == sent[rb.MAGIC_AT:]
