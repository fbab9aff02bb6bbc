"""Build and decode whole v2 record batches, records included.

For tests, tools and the broker's own records (group and transaction state, control
markers, the log cleaner). The produce and fetch paths never come here: they move
batches as opaque bytes and look only at the header (see ``batch``).

Record layout (Kafka protocol guide, "Record"): length varint, attributes int8,
timestampDelta varlong, offsetDelta varint, key (varint length, -1 for null),
value (likewise), header count varint, then each header's key and value.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from odradek.records import batch as b
from odradek.records import codecs
from odradek.records.errors import CorruptRecordError

Headers = Sequence[tuple[str, bytes | None]]


@dataclass(slots=True)
class Record:
    """One record with its absolute offset and timestamp (as a consumer sees it)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class DecodedBatch:
    header: b.BatchHeader
    records: list[Record]


# --- varints (zig-zag, as protobuf and Kafka) ------------------------------------------


def _wrap64(value: int) -> int:
    """Two's-complement wrap to int64, as Java's long arithmetic does: a timestamp delta
    between extreme timestamps then round-trips exactly (base + delta wraps back)."""
    return ((value + 2**63) % 2**64) - 2**63


def _put_varint(out: bytearray, value: int) -> None:
    value = _wrap64(value)
    zz = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    while zz & ~0x7F:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)


def _get_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint runs past the end of the record data")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    if result >= 2**64:
        raise CorruptRecordError("varint does not fit in 64 bits")
    return (result >> 1) ^ -(result & 1), pos


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _put_varint(out, -1)
    else:
        _put_varint(out, len(data))
        out += data


def get_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """A varint-length-prefixed field (key, value, header key or value; -1 is null) at
    ``pos``, and the position after it."""
    length, pos = _get_varint(buf, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptRecordError("record field runs past the end of the record data")
    return buf[pos:end], end


# --- building ----------------------------------------------------------------------------


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers = (),
) -> None:
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    _put_varint(body, timestamp_delta)
    _put_varint(body, offset_delta)
    _put_bytes(body, key)
    _put_bytes(body, value)
    _put_varint(body, len(headers))
    for hkey, hvalue in headers:
        _put_bytes(body, hkey.encode())
        _put_bytes(body, hvalue)
    _put_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset_delta: int | None = None,
    codec: int = codecs.NONE,
    producer_id: int = b.NO_PRODUCER_ID,
    producer_epoch: int = b.NO_PRODUCER_EPOCH,
    base_sequence: int = b.NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = b.NO_PARTITION_LEADER_EPOCH,
    log_append_time: int | None = None,
    delete_horizon: int | None = None,
) -> bytes:
    """Encode records into one batch; offsets are taken from the records.

    ``base_offset`` defaults to the first record's offset; ``last_offset_delta`` to the
    last record's. The cleaner passes both to keep a batch's offset span (and with it
    the producer's sequence numbers) after dropping records from it.
    """
    if base_offset is None:
        if not records:
            raise ValueError("an empty batch needs an explicit base offset")
        base_offset = records[0].offset
    if last_offset_delta is None:
        last_offset_delta = (records[-1].offset - base_offset) if records else 0
    if delete_horizon is not None:
        base_timestamp = delete_horizon
    elif records:
        base_timestamp = records[0].timestamp
    else:
        base_timestamp = b.NO_TIMESTAMP
    max_timestamp = max((r.timestamp for r in records), default=b.NO_TIMESTAMP)
    body = bytearray()
    for record in records:
        encode_record(
            body,
            record.offset - base_offset,
            record.timestamp - base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
    payload = codecs.compress(codec, bytes(body))
    attributes = codec
    if log_append_time is not None:
        attributes |= b.TIMESTAMP_TYPE_BIT
        max_timestamp = log_append_time
    if transactional:
        attributes |= b.TRANSACTIONAL_BIT
    if control:
        attributes |= b.CONTROL_BIT
    if delete_horizon is not None:
        attributes |= b.DELETE_HORIZON_BIT
    out = bytearray(b.HEADER_SIZE)
    b.HEADER.pack_into(
        out,
        0,
        base_offset,
        b.HEADER_SIZE - b.LOG_OVERHEAD_SIZE + len(payload),
        partition_leader_epoch,
        b.MAGIC_V2,
        0,  # crc, filled in below
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out += payload
    struct.pack_into(">I", out, b.CRC_AT, b.compute_crc(out))
    return bytes(out)


def rebuild_batch(
    header: b.BatchHeader,
    records: Sequence[Record],
    *,
    codec: int | None = None,
    delete_horizon: int | None = None,
) -> bytes:
    """Re-encode (some of) a batch's records into a batch that keeps everything else of
    ``header``: base offset and offset span (so producer sequences stay right), producer
    id, epoch and sequence, transactional and control flags, leader epoch, LogAppendTime, and codec
    unless another is given. The log cleaner and topic-level recompression use it."""
    return build_batch(
        records,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        codec=header.compression if codec is None else codec,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        log_append_time=header.max_timestamp if header.is_log_append_time else None,
        delete_horizon=delete_horizon,
    )


def build_simple(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp: int = 0,
    codec: int = codecs.NONE,
    **kwargs: object,
) -> bytes:
    """A producer-style batch (offsets 0..n-1, one timestamp) from a list of values."""
    keys = keys if keys is not None else [None] * len(values)
    pairs = zip(keys, values, strict=True)
    records = [Record(i, timestamp, k, v) for i, (k, v) in enumerate(pairs)]
    return build_batch(records, codec=codec, **kwargs)  # type: ignore[arg-type]


# Control records (KIP-98): key = version int16 + type int16; value = version int16 +
# coordinator epoch int32.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def build_control_batch(
    kind: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
) -> bytes:
    """A transaction marker batch: one control record, COMMIT (1) or ABORT (0)."""
    record = Record(
        base_offset,
        timestamp,
        _CONTROL_KEY.pack(0, kind),
        _CONTROL_VALUE.pack(0, coordinator_epoch),
    )
    return build_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def control_type(record: Record) -> int:
    """COMMIT or ABORT from a control record's key."""
    if record.key is None or len(record.key) < 4:
        raise CorruptRecordError("control record without a 4-byte key")
    return _CONTROL_KEY.unpack_from(record.key)[1]


# --- decoding ----------------------------------------------------------------------------


def decode_batch(buf: bytes | memoryview, pos: int = 0) -> DecodedBatch:
    """Validate and decode the batch at ``pos`` (CRC checked, records decompressed)."""
    buf = bytes(buf) if isinstance(buf, memoryview) else buf
    header = b.check_batch(buf, pos, len(buf))
    payload = buf[pos + b.HEADER_SIZE : pos + header.size]
    data = codecs.decompress(header.compression, payload)
    records: list[Record] = []
    rpos = 0
    for _ in range(header.record_count):
        length, rpos = _get_varint(data, rpos)
        end = rpos + length
        if length < 0 or end > len(data):
            raise CorruptRecordError("record length runs past the end of the batch")
        rpos += 1  # record attributes
        ts_delta, rpos = _get_varint(data, rpos)
        offset_delta, rpos = _get_varint(data, rpos)
        key, rpos = get_bytes(data, rpos)
        value, rpos = get_bytes(data, rpos)
        count, rpos = _get_varint(data, rpos)
        if count < 0:
            raise CorruptRecordError(f"invalid number of record headers {count}")
        headers = []
        for _h in range(count):
            hkey, rpos = get_bytes(data, rpos)
            if hkey is None:
                raise CorruptRecordError("a record header has a null key")
            hvalue, rpos = get_bytes(data, rpos)
            headers.append((hkey.decode("utf-8", "replace"), hvalue))
        if rpos != end:
            raise CorruptRecordError("record length does not match its fields")
        timestamp = (
            header.max_timestamp if header.is_log_append_time
            else _wrap64(header.base_timestamp + ts_delta)
        )
        records.append(Record(header.base_offset + offset_delta, timestamp, key, value, headers))
    if rpos != len(data):
        raise CorruptRecordError(
            f"batch declares {header.record_count} records but holds more data after them"
        )
    return DecodedBatch(header, records)


def keyless_records(batch: bytes | memoryview) -> list[int]:
    """Indexes (in the batch) of the records without a key, in one whole batch; what
    Kafka's LogValidator refuses in a compacted topic."""
    return [i for i, record in enumerate(decode_batch(batch).records) if record.key is None]


def decode_batches(buf: bytes | memoryview) -> list[DecodedBatch]:
    """Decode every batch in a buffer of whole batches."""
    buf = bytes(buf)
    out = []
    pos = 0
    while pos < len(buf):
        decoded = decode_batch(buf, pos)
        out.append(decoded)
        pos += decoded.header.size
    return out
