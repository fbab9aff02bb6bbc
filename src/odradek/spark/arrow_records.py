"""Kafka v2 record batches, as a Fetch response carries them, straight into Arrow columns.

librdkafka hands Python one Message object per record, and turning those into Arrow cost
several Python calls per record: most of the reader's time. Here the per-batch work
(header, CRC-32C, decompression, transaction filtering) is Python, and the per-record work
is two small loops compiled by numba: one walks the records (length-prefixed, varint
fields: only a sequential walk can find them) into arrays of positions and values, one
copies the key and value bytes into Arrow's binary layout. Records with headers have them
decoded in Python, and only when the headers column is asked for.

Everything a record claims is checked against the bytes of its batch: a batch that does
not decode is CorruptRecordError naming its offsets, never a wrong row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numba
import numpy as np
import pyarrow as pa

from odradek.records import batch as rb
from odradek.records import builder, codecs
from odradek.records.errors import CorruptRecordError

ABORT = 0  # control record key type: 0 ABORT, 1 COMMIT (Kafka's ControlRecordType)
# Columns of the per-record table the walk fills in.
_KEY_AT, _KEY_LEN, _VALUE_AT, _VALUE_LEN, _TS_DELTA, _OFFSET_DELTA, _HEADERS_AT, _END = range(8)
_FIELDS = 8
_MIN_RECORD_BYTES = 7
# Compiled once and cached beside the module (__pycache__), so a Spark worker loads it.
_jit = numba.njit(cache=True, nogil=True)


class AbortedTxn(NamedTuple):
    """One entry of a Fetch response's aborted_transactions list."""

    producer_id: int
    first_offset: int


class Batches(NamedTuple):
    """The data batches of one fetched partition, ready to decode."""

    bodies: list[bytes | memoryview]  # records sections, decompressed
    headers: list[rb.BatchHeader]  # the header of each body
    next_offset: int  # the offset after the last whole batch (data or control) seen


def walk(data: bytes | memoryview, fetch_offset: int, *, read_committed: bool = False,
         aborted: Iterable[AbortedTxn] = ()) -> Batches:
    """The whole batches in ``data`` (a partition's records from a Fetch response, whose
    last batch may be cut short by the response's size limit), each one CRC-checked.

    Control batches are dropped, and with ``read_committed`` the batches of aborted
    transactions, found as the Java consumer finds them: a producer's transactional
    batches are skipped from the first offset the response lists as aborted up to that
    producer's ABORT marker.
    """
    view = memoryview(data)
    end = len(view)
    pending = sorted(aborted, key=lambda txn: txn.first_offset)
    aborting: set[int] = set()
    bodies: list[bytes | memoryview] = []
    headers: list[rb.BatchHeader] = []
    next_offset = fetch_offset
    pos = 0
    while end - pos >= rb.LOG_OVERHEAD_SIZE:
        _, length = rb.LOG_OVERHEAD.unpack_from(view, pos)
        if length >= 0 and pos + length + rb.LOG_OVERHEAD_SIZE > end:
            break  # cut short by the response's size limit: fetched whole next time
        header = rb.check_batch(view, pos, end)
        batch = view[pos: pos + header.size]
        pos += header.size
        next_offset = header.next_offset
        if read_committed and header.producer_id >= 0:
            while pending and pending[0].first_offset <= header.last_offset:
                aborting.add(pending.pop(0).producer_id)
            if header.is_control:
                if _control_type(batch) == ABORT:
                    aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
        if header.is_control or header.record_count == 0:
            continue
        body: bytes | memoryview = batch[rb.HEADER_SIZE:]
        if header.compression != codecs.NONE:
            body = codecs.decompress(header.compression, body)
        bodies.append(body)
        headers.append(header)
    return Batches(bodies, headers, next_offset)


def _control_type(batch: memoryview) -> int:
    decoded = builder.decode_batch(bytes(batch))
    if len(decoded.records) != 1:
        raise CorruptRecordError(f"control batch at offset {decoded.header.base_offset} "
                                 f"holds {len(decoded.records)} records, not 1")
    return builder.control_type(decoded.records[0])


class Columns(NamedTuple):
    """The records of some batches as Arrow arrays, in offset order."""

    key: pa.Array  # binary
    value: pa.Array  # binary
    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64, milliseconds
    timestamp_type: np.ndarray  # int32: 0 CreateTime, 1 LogAppendTime
    headers: list[list[tuple[str, bytes | None]]] | None  # per record, when asked for


def decode(batches: Batches, *, with_headers: bool = False) -> Columns | None:
    """Every record of ``batches`` (None if there is none)."""
    heads = batches.headers
    if not heads:
        return None
    counts = np.fromiter((h.record_count for h in heads), np.int64, len(heads))
    bounds = np.zeros(len(heads) + 1, np.int64)
    np.cumsum(np.fromiter((len(body) for body in batches.bodies), np.int64, len(heads)),
              out=bounds[1:])
    # A record takes at least 7 bytes (length, attributes, two deltas, key and value
    # lengths, header count: one byte each): a count beyond that is damage, and must not
    # size the table (a CRC-valid batch claiming 2**31 records would ask for 128 GiB).
    short = np.flatnonzero(counts * _MIN_RECORD_BYTES > np.diff(bounds))
    if short.size:
        head = heads[int(short[0])]
        raise CorruptRecordError(f"the batch at offset {head.base_offset} claims "
                                 f"{head.record_count} records in {int(np.diff(bounds)[short[0]])}"
                                 " bytes")
    joined = b"".join(batches.bodies)  # one copy: the kernels read one buffer
    buf = np.frombuffer(joined, np.uint8)
    table = np.empty((int(counts.sum()), _FIELDS), np.int64)
    failed = _walk_records(buf, bounds, counts, table)
    if failed >= 0:
        batch = int(np.searchsorted(np.cumsum(counts), failed, side="right"))
        head = heads[min(batch, len(heads) - 1)]
        raise CorruptRecordError(f"record {failed - int(counts[:batch].sum())} of the batch "
                                 f"at offset {head.base_offset} does not decode (a length or "
                                 "varint runs past its record, or the batch holds other "
                                 "than its record count)")
    batch_of = np.repeat(np.arange(len(heads)), counts)
    base_offsets = np.fromiter((h.base_offset for h in heads), np.int64, len(heads))
    offsets = base_offsets[batch_of] + table[:, _OFFSET_DELTA]
    if len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all():
        raise CorruptRecordError(f"record offsets do not increase in the batches at offsets "
                                 f"{heads[0].base_offset} to {heads[-1].last_offset}")
    # A LogAppendTime batch's records all carry the broker's time (its maxTimestamp).
    append_time = np.fromiter((h.is_log_append_time for h in heads), np.bool_,
                              len(heads))[batch_of]
    stamps = np.fromiter((h.max_timestamp if h.is_log_append_time else h.base_timestamp
                          for h in heads), np.int64, len(heads))[batch_of]
    timestamps = np.where(append_time, stamps, stamps + table[:, _TS_DELTA])
    headers: list[list[tuple[str, bytes | None]]] | None = None
    if with_headers:
        headers = [[] for _ in range(len(offsets))]
        for i in np.flatnonzero(table[:, _HEADERS_AT] != table[:, _END]).tolist():
            headers[i] = _record_headers(joined, int(table[i, _HEADERS_AT]),
                                         int(table[i, _END]))
    return Columns(_binary(buf, table[:, _KEY_AT], table[:, _KEY_LEN]),
                   _binary(buf, table[:, _VALUE_AT], table[:, _VALUE_LEN]),
                   offsets, timestamps, append_time.astype(np.int32), headers)


@_jit
def _varint(buf: np.ndarray, pos: int | np.int64,
            limit: int | np.int64) -> tuple[int | np.int64, int | np.int64]:
    """The zig-zag varint at ``pos`` and the position after it; position -1 if it runs
    past ``limit`` or does not fit in 64 bits."""
    value = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if pos >= limit:
            return 0, -1
        byte = buf[pos]
        pos += 1
        if shift == 63 and byte > 1:  # the 10th byte holds one bit
            return 0, -1
        value |= np.uint64(byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += np.uint64(7)
    return np.int64(value >> np.uint64(1)) ^ -np.int64(value & np.uint64(1)), pos


@_jit
def _walk_records(buf: np.ndarray, bounds: np.ndarray, counts: np.ndarray,
                  table: np.ndarray) -> int:
    """Fill ``table`` (one row per record: key at/length, value at/length, timestamp and
    offset deltas, where the headers start, where the record ends) from the records of
    the batch bodies buf[bounds[b]:bounds[b+1]], counts[b] records each. Returns -1, or
    the index of the first record that does not decode."""
    row = 0
    for b in range(len(counts)):
        pos = bounds[b]
        end = bounds[b + 1]
        for _ in range(counts[b]):
            length, pos = _varint(buf, pos, end)
            if pos < 0 or length < 1 or length > end - pos:
                return row
            record_end = pos + length
            pos += 1  # the record's attributes (unused)
            delta, pos = _varint(buf, pos, record_end)
            if pos < 0:
                return row
            table[row, _TS_DELTA] = delta
            delta, pos = _varint(buf, pos, record_end)
            if pos < 0:
                return row
            table[row, _OFFSET_DELTA] = delta
            for field in (_KEY_AT, _VALUE_AT):  # key, then value: length, bytes
                size, pos = _varint(buf, pos, record_end)
                if pos < 0 or size > record_end - pos:
                    return row
                table[row, field] = pos
                table[row, field + 1] = max(size, -1)  # any negative length is null (Kafka)
                if size > 0:
                    pos += size
            count, pos = _varint(buf, pos, record_end)
            if pos < 0 or count < 0:
                return row
            table[row, _HEADERS_AT] = pos
            for _h in range(count):  # checked here; decoded only if asked for
                size, pos = _varint(buf, pos, record_end)
                if pos < 0 or size < 0 or size > record_end - pos:  # a null key is invalid
                    return row
                pos += size
                size, pos = _varint(buf, pos, record_end)
                if pos < 0 or size > record_end - pos:
                    return row
                if size > 0:
                    pos += size
            if pos != record_end:
                return row
            table[row, _END] = record_end
            row += 1
        if pos != end:  # bytes after the batch's last record
            return row - 1 if row > 0 else 0
    return -1


@_jit
def _gather(buf: np.ndarray, at: np.ndarray, size: np.ndarray, offsets: np.ndarray,
            data: np.ndarray) -> None:
    """Copy buf[at[i]:at[i]+size[i]] one after the other into ``data``; ``offsets`` gets
    where each starts (Arrow's binary layout; a null, size -1, takes no bytes)."""
    out = 0
    for i in range(len(at)):
        offsets[i] = out
        n = size[i]
        if n > 0:
            data[out:out + n] = buf[at[i]:at[i] + n]
            out += n
    offsets[len(at)] = out


def _binary(buf: np.ndarray, at: np.ndarray, size: np.ndarray) -> pa.Array:
    """An Arrow binary array of buf[at[i]:at[i]+size[i]] (null where size is -1)."""
    n = len(at)
    total = int(size[size > 0].sum())
    if total >= 2**31:
        raise CorruptRecordError("more than 2 GiB of keys or values in one fetch")
    offsets = np.empty(n + 1, np.int32)
    data = np.empty(total, np.uint8)
    _gather(buf, at, size, offsets, data)
    present = size >= 0
    nulls = n - int(np.count_nonzero(present))
    validity = pa.py_buffer(np.packbits(present, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)], null_count=nulls)


def _record_headers(joined: bytes, pos: int, end: int) -> list[tuple[str, bytes | None]]:
    """A record's headers (checked by the walk; rare on the bulk path, so decoded here)."""
    data = joined[pos:end]
    out: list[tuple[str, bytes | None]] = []
    at = 0
    while at < len(data):
        key, at = builder.get_bytes(data, at)
        value, at = builder.get_bytes(data, at)
        out.append(((key or b"").decode("utf-8", "replace"), value))
    return out
