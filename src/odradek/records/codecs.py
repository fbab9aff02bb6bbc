"""The five Kafka compression codecs, by their attribute id, through maintained libraries.

- 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (Kafka's CompressionType ids).
- gzip, lz4 (frame format, as KIP-57 fixed it) and zstd are standard streams.
- snappy: the Java client writes xerial's framing (a magic header, then length-prefixed
  raw blocks); librdkafka writes one raw block. Both must be read; we write xerial's
  framing, like the Java client, because every client reads it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

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


# The most one batch's records may decompress to. Kafka sets no such bound (its broker
# streams the records out of a compressed batch), but here a batch is decompressed whole
# (produce to a topic with its own compression.type or a compacted one, markers, the
# cleaner, readers), and a few bytes of gzip or zstd can stand for gigabytes: zstd's RLE
# blocks reach 32,768:1, so a 1 MiB produce request could have asked for 32 GiB (found
# while fuzzing the codecs, issue 21). Far above what clients batch (librdkafka's
# batch.size is 1 MB by default, the Java client's 16 KiB of compressed bytes). Snappy
# needs no bound: its format cannot pass ~64:1.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
_FIRST_OUTPUT_BYTES = 64 * 1024  # the first output buffer (or 8x the input, if larger)
_OUTPUT_FULL = "failed to write whole buffer"  # cramjam's words for an output buffer too small


def decompress(codec: int, data: bytes | memoryview,
               max_bytes: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress a batch's records section; a damaged stream, or one that decompresses to
    more than ``max_bytes``, is CorruptRecordError."""
    if codec == NONE:
        return bytes(data)
    try:
        if codec == GZIP:
            return _bounded(cramjam.gzip.decompress_into, data, max_bytes, codec)
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, max_bytes, codec)
        if codec == ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, max_bytes, codec)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"{NAMES[codec]} data does not decompress: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def _bounded(decompress_into: Callable[[Any, bytearray], int], data: bytes | memoryview,
             max_bytes: int, codec: int) -> bytes:
    """Decompress into buffers growing 4x (one byte more than the size tried: a full buffer
    says the output may be larger) until the output fits, or is over ``max_bytes``."""
    size = min(max_bytes, max(_FIRST_OUTPUT_BYTES, 8 * len(data)))
    while True:
        out = bytearray(size + 1)
        try:
            n = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _OUTPUT_FULL not in str(exc):
                raise
            n = size + 1
        if n <= size:
            return bytes(memoryview(out)[:n])
        if size >= max_bytes:
            raise CorruptRecordError(
                f"{NAMES[codec]} data decompresses to more than {max_bytes} bytes")
        size = min(max_bytes, 4 * size)


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
