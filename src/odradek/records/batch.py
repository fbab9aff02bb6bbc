"""The Kafka v2 RecordBatch header: layout, views, validation and in-place rewrites.

This module owns the 61-byte header that starts every batch on the wire and on disk
(Kafka protocol guide, "Record Batch"; KIP-98). The broker's hot paths only ever touch
this header: they never decode the records behind it.

CRC-32C covers bytes 21..end (attributes onwards), so the base offset and the partition
leader epoch, which sit before it, can be rewritten without recomputing the checksum.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c as _crc32c

from odradek.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
)

# One struct for the whole fixed layout; big-endian as everything in Kafka.
HEADER = struct.Struct(
    ">"
    "q"  # baseOffset            @0   first offset of the batch
    "i"  # batchLength           @8   bytes after this field (total size - 12)
    "i"  # partitionLeaderEpoch  @12  set by the leader on append
    "b"  # magic                 @16  2 for this format
    "I"  # crc                   @17  CRC-32C of bytes 21..end
    "h"  # attributes            @21  codec, timestamp type, transactional, control, horizon
    "i"  # lastOffsetDelta       @23  offset of the last record minus baseOffset
    "q"  # baseTimestamp         @27  (the delete horizon when that attribute bit is set)
    "q"  # maxTimestamp          @35  largest record timestamp (or LogAppendTime)
    "q"  # producerId            @43  -1 when not idempotent
    "h"  # producerEpoch         @51
    "i"  # baseSequence          @53  -1 when not idempotent
    "i"  # recordCount           @57  number of records that follow
)
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

# The two leading fields, enough to walk a file batch by batch.
LOG_OVERHEAD = struct.Struct(">qi")  # baseOffset, batchLength
LOG_OVERHEAD_SIZE = LOG_OVERHEAD.size  # 12

# Offsets of the fields that are read or rewritten on their own.
BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21  # the CRC covers from here to the end of the batch
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
RECORD_COUNT_AT = 57

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

MAGIC_V2 = 2

# Attribute bits (DefaultRecordBatch in Kafka).
COMPRESSION_MASK = 0x07
MAX_CODEC_ID = 4  # zstd; records.codecs names the five
TIMESTAMP_TYPE_BIT = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # KIP-534: baseTimestamp holds the tombstone delete horizon

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


class BatchHeader(NamedTuple):
    """The decoded fixed header of one batch (a tuple: cheap to make, cheap to read)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD_SIZE

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at ``pos``; the caller guarantees 61 bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C over attributes..end of one whole batch."""
    return _crc32c.crc32c(memoryview(batch)[ATTRIBUTES_AT:])


def check_batch(buf: bytes | bytearray | memoryview, pos: int, end: int) -> BatchHeader:
    """Validate the batch that starts at ``pos`` and must end at or before ``end``:
    its framing (``check_frame``) and its CRC (``check_crc``).

    Raises CorruptRecordError when the bytes cannot be a batch (bad magic, size or CRC).
    """
    header = check_frame(buf, pos, end)
    check_crc(buf, pos, header)
    return header


def check_frame(buf: bytes | bytearray | memoryview, pos: int, end: int) -> BatchHeader:
    """Everything ``check_batch`` checks except the CRC: magic, sizes, counts."""
    if end - pos < HEADER_SIZE:
        raise CorruptRecordError(f"batch at byte {pos} is shorter than the 61-byte header")
    header = read_header(buf, pos)
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(
            f"batch at byte {pos} has magic {header.magic}; only record batch v2 is supported"
        )
    size = header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD_SIZE or pos + size > end:
        raise CorruptRecordError(
            f"batch at byte {pos} claims {size} bytes but {end - pos} are left"
        )
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError(f"batch at byte {pos} has a negative count or offset delta")
    return header


def check_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    """CRC-32C over attributes..end of the batch at ``pos`` (whose frame was checked).
    Releases the GIL while it runs, so another thread can write meanwhile."""
    crc = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_AT : pos + header.size], 0, 1)
    if crc != header.crc:
        raise CorruptRecordError(
            f"batch at byte {pos} failed its CRC-32C check "
            f"(stored {header.crc:#010x}, computed {crc:#010x})"
        )


def check_producer_batch(header: BatchHeader) -> None:
    """Rules Kafka enforces on batches that producers send (LogValidator).

    A producer's batch numbers its records 0..n-1, so lastOffsetDelta must be count - 1,
    and it may not be empty. Control batches come only from transaction coordinators.
    Its codec id must be one of the five (0-4): an unknown one is refused here, where the
    batch is not otherwise decompressed, so that no reader (follower or consumer) meets
    it later. Kafka fails such a batch while validating it (UNKNOWN_SERVER_ERROR, from
    an IllegalArgumentException); the specific UNSUPPORTED_COMPRESSION_TYPE says more.
    """
    if header.record_count == 0:
        raise InvalidRecordError("a produced batch must hold at least one record")
    if header.last_offset_delta != header.record_count - 1:
        raise InvalidRecordError(
            f"batch says {header.record_count} records but its last offset delta is "
            f"{header.last_offset_delta}"
        )
    if header.is_control:
        raise InvalidRecordError("clients may not produce control batches")
    if header.compression > MAX_CODEC_ID:
        raise UnsupportedCompressionError(f"unknown compression codec id {header.compression}")


def iter_headers(
    buf: bytes | bytearray | memoryview, *, crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each batch in a buffer of whole batches, each one
    validated (its CRC too, unless ``crc`` is False and the caller checks it)."""
    end = len(buf)
    pos = 0
    while pos < end:
        header = check_frame(buf, pos, end)
        if crc:
            check_crc(buf, pos, header)
        yield pos, header
        pos += header.size


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Rewrite the base offset in place (outside the CRC: no checksum work)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_AT, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Rewrite the leader epoch in place (outside the CRC: no checksum work)."""
    _I32.pack_into(buf, pos + LEADER_EPOCH_AT, epoch)


def set_log_append_time(buf: bytearray | memoryview, timestamp_ms: int, pos: int = 0) -> None:
    """Mark a batch LogAppendTime with the broker's clock (needs a new CRC, as in Kafka)."""
    attributes = _I16.unpack_from(buf, pos + ATTRIBUTES_AT)[0] | TIMESTAMP_TYPE_BIT
    _I16.pack_into(buf, pos + ATTRIBUTES_AT, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_AT, timestamp_ms)
    size = _I32.unpack_from(buf, pos + LENGTH_AT)[0] + LOG_OVERHEAD_SIZE
    crc = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_AT : pos + size])
    _U32.pack_into(buf, pos + CRC_AT, crc)

