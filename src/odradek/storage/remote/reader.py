"""Reads of the remote tier for fetches (Kafka's RemoteLogReader and its caches).

A fetch below a tiered log's local log start is answered from the object store. The
request path never waits on the store: ``read`` answers from a bounded cache of
segment chunks (``rsm.config.chunk.size`` bytes of a segment's .log each, Aiven's
plugin's unit) and of segments' indexes; what is missing is fetched on reader threads
(``remote.log.reader.threads``) and ``read`` returns ``PENDING``; when the bytes land,
``on_ready(topic, partition)`` wakes the fetch waiting for them (the fetch purgatory).
The next chunks are fetched ahead while one is served, so a consumer reading the
history in order finds it cached.

Returned batches are whole, start at the batch holding the offset asked for, and pass
their CRC-32C check here (many consumers do not check: librdkafka's check.crcs is off
by default), so a corrupt remote object fails its reads with RemoteStorageError (and
a logged error) rather than reaching a client. A store that fails a fetch fails the
reads needing it for ``FAILURE_BACKOFF_S``, then is asked again.
"""

from __future__ import annotations

import bisect
import logging
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from odradek.records import batch as rb
from odradek.records import builder
from odradek.records.errors import CorruptRecordError
from odradek.storage.errors import RemoteStorageError
from odradek.storage.index import IndexCorruptError, OffsetIndex
from odradek.storage.remote.manager import RemoteLogManager, RemotePartition
from odradek.storage.remote.metadata import (
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    RemoteSegment,
    pack_indexes,
    unpack_indexes,
)
from odradek.storage.txn_index import ENTRY_SIZE, AbortedTxn

log = logging.getLogger(__name__)

PENDING: Final = None
FAILURE_BACKOFF_S = 1.0
READ_AHEAD_CHUNKS = 4  # chunks fetched ahead of a read (16 MiB at the default size)
_HEADER = rb.HEADER_SIZE
_TXN_ENTRY = struct.Struct(">hqqqq")  # Kafka's .txnindex entry (storage/txn_index.py)
_TIME_ENTRY_STRUCT = struct.Struct(">qi")  # Kafka's .timeindex entry (storage/index.py)


def _pack_offset_only(parts: dict[str, bytes]) -> bytes:
    """An .indexes object of ``parts``' offset index alone (for ``_Indexes``)."""
    return pack_indexes({"offset": parts["offset"]})


class _Indexes:
    __slots__ = ("aborted", "offsets", "positions")

    def __init__(self, data: bytes, base: int, name: str) -> None:
        parts = unpack_indexes(data)
        index = OffsetIndex.from_bytes(name, base, parts["offset"])
        assert isinstance(index, OffsetIndex)
        self.offsets = [base + o for o in index.offsets]
        self.positions = list(index.positions)
        txn = parts["transaction"]
        self.aborted = []
        for pos in range(0, len(txn) - len(txn) % ENTRY_SIZE, ENTRY_SIZE):
            _, *fields = _TXN_ENTRY.unpack_from(txn, pos)
            self.aborted.append(AbortedTxn(*fields))

    def floor_position(self, offset: int) -> int:
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    @property
    def size(self) -> int:
        return 16 * len(self.offsets) + 34 * len(self.aborted) + 64


class RemoteReader:
    """Serves remote reads from its caches, filling them on its own threads."""

    def __init__(self, manager: RemoteLogManager, *, chunk_size: int = 4 << 20,
                 cache_bytes: int = 256 << 20, threads: int = 4,
                 on_ready: Callable[[str, int], None] | None = None) -> None:
        self.manager = manager
        self.store = manager.store
        self.chunk_size = chunk_size
        self.cache_bytes = max(cache_bytes, 2 * chunk_size)
        self.on_ready = on_ready or (lambda topic, partition: None)
        self._pool = ThreadPoolExecutor(max_workers=threads,
                                        thread_name_prefix="odradek-remote-read")
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._indexes: OrderedDict[str, _Indexes] = OrderedDict()
        self._cached = 0
        self._inflight: set[tuple[str, int]] = set()
        self._failed: dict[tuple[str, int], tuple[float, str]] = {}
        # Figures for metrics and benchmarks.
        self.fetched_bytes = 0
        self.hits = 0
        self.misses = 0
        self.errors = 0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the cache ---------------------------------------------------------------------

    def _get(self, key: tuple[str, int]) -> bytes | None:
        data = self._chunks.get(key)
        if data is not None:
            self._chunks.move_to_end(key)
        return data

    def _put(self, key: tuple[str, int], data: bytes) -> None:
        old = self._chunks.pop(key, None)
        if old is not None:
            self._cached -= len(old)
        self._chunks[key] = data
        self._cached += len(data)
        while self._cached > self.cache_bytes and len(self._chunks) > 1:
            _, dropped = self._chunks.popitem(last=False)
            self._cached -= len(dropped)

    def _check_failed(self, key: tuple[str, int]) -> None:
        failed = self._failed.get(key)
        if failed is None:
            return
        at, why = failed
        if time.monotonic() - at < FAILURE_BACKOFF_S:
            raise RemoteStorageError(why)
        del self._failed[key]

    def _schedule(self, key: tuple[str, int], fetch: Callable[[], object],
                  tp: tuple[str, int]) -> None:
        if key in self._inflight:
            return
        self._inflight.add(key)
        self._pool.submit(self._fetch, key, fetch, tp)

    def _fetch(self, key: tuple[str, int], fetch: Callable[[], object],
               tp: tuple[str, int]) -> None:
        try:
            fetch()
        except Exception as exc:
            why = f"remote read of {key[0]} failed: {exc}"
            log.error("%s-%d: %s", tp[0], tp[1], why)
            with self._lock:
                self._failed[key] = (time.monotonic(), why)
                self.errors += 1
        finally:
            with self._lock:
                self._inflight.discard(key)
        self.on_ready(*tp)

    def _chunk(self, prefix: str, seg: RemoteSegment, index: int,
               tp: tuple[str, int]) -> bytes | None:
        """Chunk ``index`` of ``seg``'s .log, or None (fetch scheduled)."""
        key = (seg.segment_id, index)
        data = self._get(key)
        if data is not None:
            self.hits += 1
            return data
        self._check_failed(key)
        self.misses += 1
        object_key = seg.key(prefix, LOG_SUFFIX)
        start = index * self.chunk_size
        length = min(self.chunk_size, seg.size - start)

        def fetch() -> None:
            got = self.store.get_range(object_key, start, length)
            if len(got) != length:
                raise RemoteStorageError(f"{object_key} gave {len(got)} bytes of "
                                         f"[{start}, {start + length}), not {length}")
            with self._lock:
                self._put(key, got)
                self.fetched_bytes += len(got)

        self._schedule(key, fetch, tp)
        return None

    def _segment_indexes(self, prefix: str, seg: RemoteSegment,
                         tp: tuple[str, int]) -> _Indexes | None:
        found = self._indexes.get(seg.segment_id)
        if found is not None:
            self._indexes.move_to_end(seg.segment_id)
            return found
        key = (seg.segment_id, -1)
        self._check_failed(key)
        object_key = seg.key(prefix, INDEXES_SUFFIX)

        def fetch() -> None:
            try:
                parsed = _Indexes(self.store.get(object_key), seg.base_offset, object_key)
            except (ValueError, IndexError, IndexCorruptError) as exc:
                raise RemoteStorageError(f"{object_key} is corrupt: {exc}") from exc
            with self._lock:
                self._indexes[seg.segment_id] = parsed
                while len(self._indexes) > 4096:
                    self._indexes.popitem(last=False)

        self._schedule(key, fetch, tp)
        return None

    def _bytes(self, prefix: str, seg: RemoteSegment, start: int, length: int,
               tp: tuple[str, int]) -> bytes | None:
        """``length`` bytes of ``seg``'s .log from ``start`` (cut at its end), or None."""
        end = min(start + length, seg.size)
        size = self.chunk_size
        out = []
        for index in range(start // size, (end - 1) // size + 1):
            chunk = self._chunk(prefix, seg, index, tp)
            if chunk is None:
                return None
            lo = max(start - index * size, 0)
            hi = min(end - index * size, len(chunk))
            out.append(chunk[lo:hi])
        return b"".join(out) if len(out) != 1 else out[0]

    # --- reads -------------------------------------------------------------------------

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, *,
             min_one: bool = True, read_committed: bool = False
             ) -> tuple[int, bytes, list[AbortedTxn] | None] | None:
        """Whole batches from the remote batch holding ``offset``, up to ``max_bytes``
        (at least one when ``min_one``), with, for read_committed, the aborted
        transactions they overlap: (first offset, bytes, aborted), ``b""`` when
        nothing fits, or ``PENDING`` while the store is asked. Raises
        RemoteStorageError (store failed, object missing or corrupt) and
        LookupError (no remote segment holds the offset)."""
        rp = self.manager.get(topic, partition)
        seg = rp.find(offset) if rp is not None else None
        if rp is None or seg is None:
            raise LookupError(f"no remote segment of {topic}-{partition} holds {offset}")
        tp = (topic, partition)
        with self._lock:
            indexes = self._segment_indexes(rp.prefix, seg, tp)
            if indexes is None:
                return PENDING
            pos = indexes.floor_position(offset)
            first = -1
            start = pos
            # Skip the batches before the one holding ``offset``.
            while True:
                if pos >= seg.size:
                    raise LookupError(f"{topic}-{partition}: offset {offset} is past "
                                      f"remote segment {seg.segment_id}'s data")
                head = self._bytes(rp.prefix, seg, pos, _HEADER, tp)
                if head is None:
                    return PENDING
                header = self._frame(head, seg, pos, _HEADER)
                if header.base_offset + header.last_offset_delta >= offset:
                    first = header.base_offset
                    start = pos
                    break
                pos += header.size
            # Whole batches from ``start`` while they fit.
            end = start
            budget = max_bytes
            while end < seg.size:
                head = self._bytes(rp.prefix, seg, end, _HEADER, tp)
                if head is None:
                    if end > start:
                        break  # serve what is here; the rest comes with the next fetch
                    return PENDING
                header = self._frame(head, seg, end, _HEADER)
                if header.size > budget and not (min_one and end == start):
                    break
                budget -= header.size
                end += header.size
            if end == start:
                return first, b"", None
            data = self._bytes(rp.prefix, seg, start, end - start, tp)
            if data is None:
                return PENDING
            self._check_crcs(data, seg, start, topic, partition)
            # Read ahead: the chunks after the one this read ended in, so that a consumer
            # reading on finds them cached (the reader threads fetch them side by side).
            nxt = end // self.chunk_size
            for ahead in range(nxt, nxt + READ_AHEAD_CHUNKS):
                if ahead * self.chunk_size >= seg.size:
                    break
                self._chunk(rp.prefix, seg, ahead, tp)
            aborted = None
            if read_committed:
                last = _last_offset(data)
                aborted = [t for t in self._aborted_after(rp, seg, tp)
                           if t.last_offset >= first and t.first_offset <= last]
        return first, data, aborted

    def _aborted_after(self, rp: RemotePartition, seg: RemoteSegment,
                       tp: tuple[str, int]) -> list[AbortedTxn]:
        """The aborted transactions of ``seg`` and of the remote segments after it (a
        transaction's marker, which indexes it, may lie in a later segment)."""
        out: list[AbortedTxn] = []
        i = rp.chain.index(seg) if seg in rp.chain else len(rp.chain)
        for later in rp.chain[i:]:
            found = self._segment_indexes(rp.prefix, later, tp)
            if found is not None:
                out += found.aborted
        return out

    # --- ListOffsets by timestamp (blocking: called on a worker thread) ----------------

    def offset_for_timestamp(self, topic: str, partition: int, lower_than: int,
                             timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first remote record below ``lower_than`` (the
        local log start) with timestamp >= ``timestamp``, or None: the remote segment by
        its largest timestamp, its time index to skip what is older, then its batches
        read from the store chunk by chunk (Kafka's RemoteLogManager.findOffsetByTimestamp).
        Blocking; raises RemoteStorageError."""
        rp = self.manager.get(topic, partition)
        if rp is None:
            return None
        for seg in list(rp.chain):
            if seg.max_timestamp < timestamp or seg.base_offset >= lower_than:
                continue
            parts = unpack_indexes(self.store.get(seg.key(rp.prefix, INDEXES_SUFFIX)))
            start = seg.base_offset
            for ts, rel in _TIME_ENTRY_STRUCT.iter_unpack(parts["time"]):
                if ts >= timestamp:
                    break
                start = seg.base_offset + rel
            index = _Indexes(_pack_offset_only(parts), seg.base_offset, seg.segment_id)
            pos = index.floor_position(start)
            while pos < seg.size:
                length = min(self.chunk_size, seg.size - pos)
                data = self.store.get_range(seg.key(rp.prefix, LOG_SUFFIX), pos, length)
                if len(data) < _HEADER:
                    break
                header = rb.read_header(data, 0)
                if header.size > len(data):
                    data = self.store.get_range(seg.key(rp.prefix, LOG_SUFFIX), pos,
                                                header.size)
                view = memoryview(data)
                at = 0
                while at + _HEADER <= len(view):
                    header = rb.read_header(view, at)
                    if at + header.size > len(view):
                        break
                    if header.max_timestamp >= timestamp:
                        decoded = builder.decode_batch(bytes(view[at:at + header.size]))
                        for r in decoded.records:
                            if r.timestamp >= timestamp and r.offset < lower_than:
                                return r.offset, r.timestamp
                    at += header.size
                if at == 0:
                    break
                pos += at
        return None

    def _frame(self, head: bytes, seg: RemoteSegment, pos: int, length: int
               ) -> rb.BatchHeader:
        try:
            header = rb.read_header(head, 0)
            if header.magic != rb.MAGIC_V2 or header.size < _HEADER:
                raise CorruptRecordError(f"bad batch header at byte {pos}")
            return header
        except (CorruptRecordError, ValueError) as exc:
            why = f"remote segment {seg.segment_id} is corrupt: {exc}"
            log.error(why)
            raise RemoteStorageError(why) from exc

    def _check_crcs(self, data: bytes, seg: RemoteSegment, start: int, topic: str,
                    partition: int) -> None:
        try:
            for _ in rb.iter_headers(data):
                pass
        except CorruptRecordError as exc:
            why = (f"{topic}-{partition}: remote segment {seg.segment_id} "
                   f"[{seg.base_offset}, {seg.end_offset}] failed its CRC check near "
                   f"byte {start}: {exc}")
            log.error(why)
            raise RemoteStorageError(why) from exc


def _last_offset(data: bytes) -> int:
    last = -1
    for _, header in rb.iter_headers(data, crc=False):
        last = header.last_offset
    return last
