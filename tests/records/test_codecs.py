"""The five Kafka compression codecs (odradek.records.codecs).

Covers round trips for none/gzip/snappy/lz4/zstd (empty, small, 1 MiB), the wire formats
other clients expect (gzip stream, LZ4 frame, xerial-framed snappy) and the ones they send
(stdlib gzip, librdkafka's raw snappy block), that damaged input only ever raises
CorruptRecordError, and that unknown codec ids raise UnsupportedCompressionError.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.records import codecs
from odradek.records.errors import (
    CorruptRecordError,
    RecordError,
    UnsupportedCompressionError,
)

ALL = sorted(codecs.NAMES)
COMPRESSED = [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]
XERIAL_MAGIC = b"\x82SNAPPY\x00"

MIB = 1024 * 1024
# Half text-like (compressible), half random (not): exercises both paths of each codec.
LARGE = (b"odradek record value " * (MIB // 42 + 1))[: MIB // 2] + os.urandom(MIB // 2)


def test_codec_ids_match_kafka():
    assert (codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD) == (0, 1, 2, 3, 4)
    assert codecs.NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    assert codecs.IDS == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("codec", ALL, ids=[codecs.NAMES[c] for c in ALL])
@pytest.mark.parametrize(
    "data",
    [b"", b"x", b"hello kafka" * 100, bytes(range(256)) * 3, LARGE],
    ids=["empty", "one-byte", "repetitive", "all-bytes", "1MiB"],
)
def test_codec_round_trip(codec, data):
    compressed = codecs.compress(codec, data)
    assert isinstance(compressed, bytes)
    assert codecs.decompress(codec, compressed) == data


@pytest.mark.parametrize("codec", ALL, ids=[codecs.NAMES[c] for c in ALL])
def test_decompress_accepts_memoryview_and_bytearray(codec):
    data = b"abc" * 1000
    compressed = codecs.compress(codec, data)
    assert codecs.decompress(codec, memoryview(compressed)) == data
    assert codecs.decompress(codec, bytearray(compressed)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=[codecs.NAMES[c] for c in COMPRESSED])
def test_compressible_data_gets_smaller(codec):
    data = b"a" * 100_000
    assert len(codecs.compress(codec, data)) < 10_000


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=5000), codec=st.sampled_from(ALL))
def test_any_bytes_round_trip_through_any_codec(data, codec):
    assert codecs.decompress(codec, codecs.compress(codec, data)) == data


# --- wire formats -------------------------------------------------------------------------


def test_none_codec_passes_bytes_through():
    assert codecs.compress(codecs.NONE, b"abc") == b"abc"
    assert codecs.decompress(codecs.NONE, b"\x82SNAPPY\x00garbage") == b"\x82SNAPPY\x00garbage"


def test_gzip_output_is_a_standard_gzip_stream():
    data = b"some records" * 50
    compressed = codecs.compress(codecs.GZIP, data)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == data


def test_gzip_written_by_other_clients_decompresses():
    data = b"from the java client" * 20
    assert codecs.decompress(codecs.GZIP, gzip.compress(data)) == data


def test_lz4_output_is_the_frame_format():
    # KIP-57: Kafka's lz4 is the standard LZ4 frame (magic 0x184D2204, little-endian).
    compressed = codecs.compress(codecs.LZ4, b"x" * 1000)
    assert compressed[:4] == b"\x04\x22\x4d\x18"


def test_zstd_output_is_a_standard_zstd_frame():
    data = b"z" * 1000
    compressed = codecs.compress(codecs.ZSTD, data)
    assert compressed[:4] == b"\x28\xb5\x2f\xfd"
    assert bytes(cramjam.zstd.decompress(compressed)) == data


def test_snappy_compress_writes_xerial_framing():
    data = b"snappy data " * 100
    compressed = codecs.compress(codecs.SNAPPY, data)
    assert compressed.startswith(XERIAL_MAGIC)
    assert struct.unpack_from(">ii", compressed, 8) == (1, 1)  # version, min compatible
    (block_len,) = struct.unpack_from(">i", compressed, 16)
    assert 20 + block_len == len(compressed)
    assert bytes(cramjam.snappy.decompress_raw(compressed[20:])) == data


def test_snappy_of_empty_data_is_just_the_xerial_header():
    compressed = codecs.compress(codecs.SNAPPY, b"")
    assert compressed == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    assert codecs.decompress(codecs.SNAPPY, compressed) == b""


def test_snappy_large_data_is_split_into_32k_xerial_blocks():
    data = os.urandom(100_000)
    compressed = codecs.compress(codecs.SNAPPY, data)
    pos, blocks = 16, []
    while pos < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(compressed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(compressed)
    assert [len(block) for block in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


@pytest.mark.parametrize(
    "data", [b"x", b"librdkafka raw block " * 100, LARGE], ids=["tiny", "small", "1MiB"]
)
def test_snappy_decodes_raw_block_as_librdkafka_writes(data):
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert not raw.startswith(XERIAL_MAGIC)
    assert codecs.decompress(codecs.SNAPPY, raw) == data


def test_snappy_decodes_xerial_frame_written_block_by_block():
    # As the Java client's SnappyOutputStream does: header, then length-prefixed raw blocks
    # of any size (here uneven ones).
    parts = [b"a" * 10, b"b" * 5000, b"", b"c" * 70_000]
    framed = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for part in parts:
        block = bytes(cramjam.snappy.compress_raw(part))
        framed += struct.pack(">i", len(block)) + block
    assert codecs.decompress(codecs.SNAPPY, framed) == b"".join(parts)


# --- damaged input ------------------------------------------------------------------------

GARBAGE = [
    b"not compressed at all, just text",
    b"\xff" * 64,
    bytes(range(256)),
]


@pytest.mark.parametrize("codec", COMPRESSED, ids=[codecs.NAMES[c] for c in COMPRESSED])
@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_input_raises_corrupt_record_error(codec, garbage):
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codec, garbage)


@pytest.mark.parametrize(
    "codec", [codecs.GZIP, codecs.LZ4, codecs.ZSTD], ids=["gzip", "lz4", "zstd"]
)
def test_empty_input_raises_corrupt_record_error(codec):
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codec, b"")


@pytest.mark.parametrize("codec", COMPRESSED, ids=[codecs.NAMES[c] for c in COMPRESSED])
def test_truncated_stream_raises_corrupt_record_error(codec):
    compressed = codecs.compress(codec, os.urandom(5000))
    for cut in (1, len(compressed) // 2, len(compressed) - 1):
        with pytest.raises(CorruptRecordError):
            codecs.decompress(codec, compressed[:cut])


def test_xerial_block_length_past_end_raises_corrupt_record_error():
    framed = bytearray(codecs.compress(codecs.SNAPPY, b"data" * 100))
    struct.pack_into(">i", framed, 16, len(framed))
    with pytest.raises(CorruptRecordError, match="past the end"):
        codecs.decompress(codecs.SNAPPY, bytes(framed))


def test_xerial_negative_block_length_raises_corrupt_record_error():
    framed = bytearray(codecs.compress(codecs.SNAPPY, b"data" * 100))
    struct.pack_into(">i", framed, 16, -5)
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.SNAPPY, bytes(framed))


def test_xerial_cut_inside_block_length_raises_corrupt_record_error():
    framed = codecs.compress(codecs.SNAPPY, b"data" * 100)
    with pytest.raises(CorruptRecordError, match="cut short"):
        codecs.decompress(codecs.SNAPPY, framed[:18])


def test_xerial_block_with_garbage_raises_corrupt_record_error():
    framed = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", 4) + b"\xff\xff\xff\xff"
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.SNAPPY, framed)


def test_zstd_frame_claiming_a_terabyte_is_corrupt_not_an_allocation():
    # Frame header with an 8-byte content size of 2**40 and one empty raw block.
    frame = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 2**40) + b"\x01\x00\x00"
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.ZSTD, frame)


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=300))
def test_arbitrary_bytes_decompress_or_raise_record_error_only(codec, data):
    with contextlib.suppress(RecordError):
        codecs.decompress(codec, data)


@settings(max_examples=60, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    payload=st.binary(min_size=1, max_size=2000),
    data=st.data(),
)
def test_mutated_stream_decompresses_or_raises_record_error_only(codec, payload, data):
    compressed = bytearray(codecs.compress(codec, payload))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(compressed) - 1))
        compressed[pos] = data.draw(st.integers(0, 255))
    with contextlib.suppress(RecordError):
        codecs.decompress(codec, bytes(compressed))


# --- decompression bombs (issue 21) -------------------------------------------------------


def zstd_rle_frame(blocks: int) -> bytes:
    """A zstd frame of ``blocks`` RLE blocks of 128 KiB: 4 bytes each (32,768:1), and no
    content size in its header (a decoder learns the size only by decompressing)."""
    out = bytearray(struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x58]))
    for i in range(blocks):
        header = (i == blocks - 1) | (1 << 1) | (128 * 1024 << 3)  # last, RLE, size
        out += header.to_bytes(3, "little") + b"\0"
    return bytes(out)


def test_a_zstd_bomb_is_refused_past_the_decompressed_limit():
    mib = 1024 * 1024
    assert codecs.decompress(codecs.ZSTD, zstd_rle_frame(8), max_bytes=mib) == bytes(mib)
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        codecs.decompress(codecs.ZSTD, zstd_rle_frame(9), max_bytes=mib)


@pytest.mark.parametrize("codec", COMPRESSED, ids=[codecs.NAMES[c] for c in COMPRESSED])
def test_output_over_the_limit_is_refused_and_at_the_limit_kept(codec):
    data = bytes(300_000)
    compressed = codecs.compress(codec, data)
    assert codecs.decompress(codec, compressed, max_bytes=len(data)) == data
    if codec != codecs.SNAPPY:  # snappy cannot pass ~64:1: not bounded
        with pytest.raises(CorruptRecordError, match="decompresses to more than"):
            codecs.decompress(codec, compressed, max_bytes=len(data) - 1)


def test_the_default_limit_is_far_above_any_client_batch():
    assert codecs.MAX_DECOMPRESSED_BYTES >= 64 * 1024 * 1024


# --- unknown codecs -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 100])
def test_unknown_codec_id_raises_unsupported_compression(codec):
    with pytest.raises(UnsupportedCompressionError, match="unknown compression codec"):
        codecs.decompress(codec, b"data")
    with pytest.raises(UnsupportedCompressionError):
        codecs.compress(codec, b"data")


def test_unsupported_compression_maps_to_kafka_error_name():
    assert issubclass(UnsupportedCompressionError, RecordError)
    assert UnsupportedCompressionError.kafka_error == "UNSUPPORTED_COMPRESSION_TYPE"
