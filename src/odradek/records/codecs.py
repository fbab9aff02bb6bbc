"""The five Kafka compression codecs, by their attribute id, through maintained libraries.

- 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (Kafka's CompressionType ids).
- gzip, lz4 (frame format, as KIP-57 fixed it) and zstd are standard streams.
- snappy: the Java client writes xerial's framing (a magic header, then length-prefixed
  raw blocks); librdkafka writes one raw block. Both must be read; we write xerial's
  framing, like the Java client, because every client reads it.
"""

from __future__ import annotations

import struct

import cramjam

from odradek.records.errors import CorruptRecordError, UnsupportedCompressionError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
IDS = {name: codec for codec, name in NAMES.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible 1
_XERIAL_BLOCK = 32 * 1024  # xerial's default block size, as kafka-python and Java use
_I32 = struct.Struct(">i")


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` with a Kafka codec id."""
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a batch's records section; a damaged stream is CorruptRecordError."""
    if codec == NONE:
        return bytes(data)
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"{NAMES[codec]} data does not decompress: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def _xerial_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out.append(_I32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < len(_XERIAL_HEADER):
        raise CorruptRecordError("xerial snappy header is cut short")
    pos = len(_XERIAL_HEADER)
    out = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("xerial snappy block length is cut short")
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CorruptRecordError("xerial snappy block runs past the end of the data")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)
