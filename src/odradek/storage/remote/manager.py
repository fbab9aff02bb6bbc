"""The remote log manager (Kafka's RemoteLogManager): copies a tiered log's rolled
segments to the object store, expires them there by the topic's total retention, and
keeps, per partition, the list of remote segments reads are served from.

What it does for each tiered log this broker leads, every
``remote.log.manager.task.interval.ms`` on a thread of its own:

1. On first sight (and after a restart): list the partition's metadata objects, finish
   what a crash interrupted (a DELETE_SEGMENT_STARTED segment's deletion; a
   COPY_SEGMENT_STARTED one another manager instance left behind is deleted: never
   served, so never a hole), and tell the log how far the remote tier reaches
   (``Log.highest_remote_offset``, which local retention waits for) and where the
   whole log starts. A single node that finds the remote tier ahead of its disk (the
   disk was lost) starts its log after the remote part, so offsets go on, never
   reused.
2. Copy: each rolled segment above the highest remote offset and wholly below the high
   watermark and the last stable offset (only committed data goes up), oldest first:
   metadata STARTED, the .log, the .indexes, metadata FINISHED.
3. Expire: remote segments past ``retention.ms`` (by their largest timestamp) or
   beyond ``retention.bytes`` (counting the remote part below the local log and the
   local log), below a DeleteRecords' log start, or duplicated by a leadership race;
   the log start moves past them. Deletion: metadata DELETE_STARTED, the data
   objects, the metadata.

A store that fails (down, slow, refusing) stops the partition's pass with a WARN; the
next interval retries it, and local retention keeps every segment not yet copied.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.storage import partition_metadata
from odradek.storage.errors import OffsetOutOfRangeError, RemoteStorageError
from odradek.storage.producer_state import SNAPSHOT_SUFFIX
from odradek.storage.remote.metadata import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_STARTED,
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    META_SUFFIX,
    RemoteSegment,
    pack_indexes,
    partition_prefix,
    serving_chain,
    unpack_indexes,
)
from odradek.storage.remote.store import ObjectStore, RemoteObjectMissing

if TYPE_CHECKING:
    from odradek.storage.log import Log

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class RemotePartition:
    """What the remote tier holds of one partition, as this broker knows it."""

    prefix: str
    segments: dict[str, RemoteSegment] = field(default_factory=dict)
    chain: list[RemoteSegment] = field(default_factory=list)  # serves reads
    bases: list[int] = field(default_factory=list)  # the chain's base offsets
    failing: bool = False  # the last pass failed (said once, WARN)
    lead: bool = False  # loaded as the leader (crash leftovers handled)

    def rebuild(self) -> None:
        self.chain = serving_chain(list(self.segments.values()))
        self.bases = [s.base_offset for s in self.chain]

    @property
    def highest_offset(self) -> int:
        return self.chain[-1].end_offset if self.chain else -1

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.chain)

    def find(self, offset: int) -> RemoteSegment | None:
        """The serving segment holding ``offset``."""
        i = bisect.bisect_right(self.bases, offset) - 1
        if i < 0:
            return None
        seg = self.chain[i]
        return seg if offset <= seg.end_offset else None


# The logs a pass looks at: (topic, partition, log, whether this broker leads it).
Leading = Callable[[], Iterable[tuple[str, int, "Log", bool]]]


class RemoteLogManager:
    """Copies, expires and knows remote segments; ``run_once`` is one pass, ``start``
    runs passes on a thread until ``stop``."""

    def __init__(self, store: ObjectStore, *, broker_id: int, leading: Leading,
                 interval_ms: int = 30_000, clock: Callable[[], int] | None = None) -> None:
        self.store = store
        self.broker_id = broker_id
        self.leading = leading
        self.interval_ms = interval_ms
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.instance = uuid.uuid4().hex  # tells this process's uploads from others'
        self._partitions: dict[TopicPartition, RemotePartition] = {}
        self._doomed: list[str] = []  # key prefixes of deleted topics' partitions
        self._lock = threading.Lock()  # the partition map; passes run one at a time
        self._pass_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # Figures for metrics and DescribeLogDirs.
        self.copied_bytes = 0
        self.copied_segments = 0
        self.deleted_segments = 0
        self.failures = 0

    # --- the partition's remote view -----------------------------------------------

    def get(self, topic: str, partition: int) -> RemotePartition | None:
        return self._partitions.get((topic, partition))

    def remote_size(self, topic: str, partition: int) -> int:
        rp = self._partitions.get((topic, partition))
        return rp.size_bytes if rp is not None else 0

    def forget(self, topic: str, partition: int) -> None:
        """No longer led here (or deleted): loaded afresh when led again."""
        with self._lock:
            self._partitions.pop((topic, partition), None)

    def _load(self, topic: str, partition: int, lg: Log, lead: bool) -> RemotePartition:
        """The partition's remote view: read from the store once while this broker
        leads it (it alone changes it then), at every pass while it follows (the
        leader's copies and deletions show up there)."""
        tp = (topic, partition)
        rp = self._partitions.get(tp)
        if rp is not None and rp.lead and lead:
            return rp
        if rp is not None and not lead:
            self._read_metadata(rp, lg)
            rp.rebuild()
            self._tell_log(lg, rp, loaded=True, lead=False)
            return rp
        prefix = partition_prefix(topic, partition_metadata.read(lg.directory), partition)
        rp = RemotePartition(prefix, lead=lead)
        self._read_metadata(rp, lg)
        if lead:
            for seg in list(rp.segments.values()):
                if seg.state == DELETE_STARTED or (seg.state == COPY_STARTED
                                                   and seg.writer != self.instance):
                    # An interrupted deletion, or an upload whose writer is gone (this
                    # broker's earlier life, or an old leader): never served; removed.
                    log.info("%s: removing remote segment %s [%d, %d] left %s", lg.name,
                             seg.segment_id, seg.base_offset, seg.end_offset, seg.state)
                    self._delete_objects(rp, seg)
        rp.rebuild()
        with self._lock:
            self._partitions[tp] = rp
        self._tell_log(lg, rp, loaded=True, lead=lead)
        return rp

    def _read_metadata(self, rp: RemotePartition, lg: Log) -> None:
        """Bring ``rp.segments`` in line with the store's metadata objects: new ones
        read, gone ones dropped, and those not FINISHED when last read read again (a
        FINISHED one changes only to DELETE_STARTED, then goes: not worth a request)."""
        keys = {key for key in self.store.list(rp.prefix) if key.endswith(META_SUFFIX)}
        known = {seg.key(rp.prefix, META_SUFFIX): seg.segment_id
                 for seg in rp.segments.values() if seg.state == COPY_FINISHED}
        for seg in list(rp.segments.values()):
            if seg.state != COPY_FINISHED or seg.key(rp.prefix, META_SUFFIX) not in keys:
                rp.segments.pop(seg.segment_id, None)
        for key in keys - known.keys():
            try:
                seg = RemoteSegment.decode(self.store.get(key))
            except RemoteObjectMissing:
                continue  # deleted meanwhile
            except ValueError as exc:
                log.error("%s: remote metadata %s is unreadable (%s): ignored", lg.name,
                          key, exc)
                continue
            rp.segments[seg.segment_id] = seg

    def _tell_log(self, lg: Log, rp: RemotePartition, *, loaded: bool = False,
                  lead: bool = True) -> None:
        """The log learns how far the remote tier reaches and where it starts."""
        with lg.lock:
            lg.highest_remote_offset = rp.highest_offset
            if not rp.chain:
                return
            if (loaded and lead and not lg.replicated and lg.size_bytes == 0
                    and rp.highest_offset >= lg.log_end_offset):
                # The disk lost what the remote tier has: go on after it.
                log.warning("%s: the local log ends at %d but the remote tier holds up "
                            "to %d: starting the local log at %d", lg.name,
                            lg.log_end_offset, rp.highest_offset, rp.highest_offset + 1)
                lg.truncate_fully_and_start_at(rp.highest_offset + 1)
                lg.log_start_offset = rp.chain[0].base_offset
            elif loaded:
                earliest = min(rp.chain[0].base_offset, lg.local_log_start_offset)
                lg.log_start_offset = max(lg.log_start_offset, earliest)

    # --- passes ------------------------------------------------------------------------

    def run_once(self) -> None:
        """One pass over the tiered logs: load, copy (leaders), expire (leaders)."""
        with self._pass_lock:
            if self._doomed:
                self._delete_doomed()
            for topic, partition, lg, lead in list(self.leading()):
                if lg.closed or not lg.tiered:
                    continue
                rp = self._partitions.get((topic, partition))
                try:
                    rp = self._load(topic, partition, lg, lead)
                    if lead:
                        if not lg.config.remote_log_copy_disable:
                            self._copy(lg, rp)
                        self._expire(lg, rp)
                except (RemoteStorageError, OSError) as exc:
                    self.failures += 1
                    if rp is None or not rp.failing:
                        log.warning("%s: the remote tier failed (%s); retrying every %d ms; "
                                    "%d bytes wait to be copied", lg.name, exc,
                                    self.interval_ms, lg.pending_upload_bytes())
                    if rp is not None:
                        rp.failing = True
                    continue
                if rp.failing:
                    rp.failing = False
                    log.info("%s: the remote tier works again; remote log up to %d",
                             lg.name, rp.highest_offset)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="odradek-remote-log",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run a pass now (tests, and a topic made tiered)."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("remote log manager pass failed; next in %d ms",
                              self.interval_ms)
            self._wake.wait(self.interval_ms / 1000)
            self._wake.clear()

    # --- copying -----------------------------------------------------------------------

    def _copy(self, lg: Log, rp: RemotePartition) -> None:
        while not self._stop.is_set():
            snap = _next_to_copy(lg, rp.highest_offset)
            if snap is None:
                return
            self._upload(lg, rp, snap)

    def _upload(self, lg: Log, rp: RemotePartition, snap: _SegmentSnapshot) -> None:
        seg = RemoteSegment(
            segment_id=RemoteSegment.new_id(), base_offset=snap.base,
            end_offset=snap.next_offset - 1, max_timestamp=snap.max_timestamp,
            size=snap.size, leader_epochs=snap.epochs, state=COPY_STARTED,
            broker=self.broker_id, writer=self.instance, event_ms=self.clock())
        store = self.store
        try:
            store.put(seg.key(rp.prefix, META_SUFFIX), seg.encode())
            rp.segments[seg.segment_id] = seg
            with os.fdopen(snap.fd, "rb", closefd=False) as f:
                store.put_file(seg.key(rp.prefix, LOG_SUFFIX), f, snap.size)
            store.put(seg.key(rp.prefix, INDEXES_SUFFIX), pack_indexes(snap.indexes))
            done = seg.with_state(COPY_FINISHED, self.clock())
            store.put(seg.key(rp.prefix, META_SUFFIX), done.encode())
        finally:
            os.close(snap.fd)
        rp.segments[done.segment_id] = done
        rp.rebuild()
        with lg.lock:
            for offset in [o for o in lg.roll_snapshots if o <= snap.next_offset]:
                del lg.roll_snapshots[offset]
        self.copied_bytes += snap.size
        self.copied_segments += 1
        self._tell_log(lg, rp)
        log.info("%s: copied segment [%d, %d] (%d bytes) to the remote tier as %s",
                 lg.name, seg.base_offset, seg.end_offset, seg.size, seg.segment_id)

    # --- expiring ----------------------------------------------------------------------

    def _expire(self, lg: Log, rp: RemotePartition) -> None:
        cfg = lg.config
        now = self.clock()
        chain = rp.chain
        doomed: list[RemoteSegment] = []
        served = {s.segment_id for s in chain}
        # Duplicates a race left: FINISHED but covered by the chain.
        doomed += [s for s in rp.segments.values()
                   if s.state == COPY_FINISHED and s.segment_id not in served]
        start = lg.log_start_offset
        remote_only = [s for s in chain if s.base_offset < lg.local_log_start_offset]
        total = sum(s.size for s in remote_only) + lg.size_bytes
        new_start = start
        for s in chain:
            expired = (s.end_offset < start
                       or (cfg.deletes and cfg.retention_ms >= 0
                           and s.max_timestamp < now - cfg.retention_ms)
                       or (cfg.deletes and cfg.retention_bytes >= 0
                           and total - s.size >= cfg.retention_bytes))
            if not expired:
                break
            doomed.append(s)
            total -= s.size
            new_start = max(new_start, s.end_offset + 1)
        if not doomed:
            return
        if new_start > lg.log_start_offset:
            # The start moves first: nothing past it is read from a segment going away.
            with lg.lock:
                if new_start > lg.local_log_start_offset:
                    try:
                        lg.delete_records_before(new_start)
                    except OffsetOutOfRangeError:
                        return
                lg.log_start_offset = max(lg.log_start_offset, new_start)
            log.info("%s: remote retention moved the log start offset to %d", lg.name,
                     lg.log_start_offset)
        for s in doomed:
            self._delete_objects(rp, s)
            self.deleted_segments += 1
        rp.rebuild()
        self._tell_log(lg, rp)

    def _delete_objects(self, rp: RemotePartition, seg: RemoteSegment) -> None:
        store = self.store
        meta = seg.key(rp.prefix, META_SUFFIX)
        if seg.state != DELETE_STARTED:
            seg = seg.with_state(DELETE_STARTED, self.clock())
            store.put(meta, seg.encode())
            rp.segments[seg.segment_id] = seg
        store.delete(seg.key(rp.prefix, LOG_SUFFIX))
        store.delete(seg.key(rp.prefix, INDEXES_SUFFIX))
        store.delete(meta)
        rp.segments.pop(seg.segment_id, None)

    def producer_snapshot_at(self, topic: str, topic_id: uuid.UUID | None, partition: int,
                             offset: int) -> bytes | None:
        """The producer state at ``offset`` as the remote segment ending just below it
        holds it (KIP-405's auxiliary state of a replica that starts at the leader's
        local log start), or None if no such segment or snapshot is there. Blocking: a
        listing and two reads; raises RemoteStorageError."""
        prefix = partition_prefix(topic, topic_id, partition)
        for key in sorted(self.store.list(prefix), reverse=True):
            if not key.endswith(META_SUFFIX):
                continue
            base = int(key[len(prefix):].split("-", 1)[0])
            if base >= offset:
                continue
            try:
                seg = RemoteSegment.decode(self.store.get(key))
            except (RemoteObjectMissing, ValueError):
                continue
            if seg.state != COPY_FINISHED or seg.end_offset != offset - 1:
                continue
            parts = unpack_indexes(self.store.get(seg.key(prefix, INDEXES_SUFFIX)))
            data = parts["producer_snapshot"]
            if len(data) > _I64.size and _I64.unpack_from(data)[0] == offset:
                return data[_I64.size:]
            return None
        return None

    def delete_partition(self, topic: str, partition: int, topic_id: uuid.UUID | None) -> None:
        """A deleted topic's partition: its objects go at the next pass (retried while
        the store fails, as Kafka's remote log manager deletes a deleted topic's
        segments)."""
        self.forget(topic, partition)
        with self._lock:
            self._doomed.append(partition_prefix(topic, topic_id, partition))
        self.wake()

    def _delete_doomed(self) -> None:
        with self._lock:
            doomed = list(self._doomed)
        for prefix in doomed:
            try:
                for key in self.store.list(prefix):
                    self.store.delete(key)
            except RemoteStorageError as exc:
                log.warning("cannot delete the remote objects of deleted %s yet: %s",
                            prefix, exc)
                continue
            log.info("deleted the remote objects under %s (topic deleted)", prefix)
            with self._lock:
                self._doomed.remove(prefix)


@dataclass(slots=True)
class _SegmentSnapshot:
    """A rolled segment's data as the copy takes it: an open descriptor of its .log
    (so a later rename or unlink does not disturb the upload) and its index bytes."""

    base: int
    next_offset: int
    size: int
    max_timestamp: int
    fd: int
    indexes: dict[str, bytes]
    epochs: tuple[tuple[int, int], ...]


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _next_to_copy(lg: Log, highest_remote: int) -> _SegmentSnapshot | None:
    """The oldest rolled segment past ``highest_remote`` and wholly committed, taken
    under the log's lock; None if there is none."""
    with lg.lock:
        if lg.closed:
            return None
        limit = min(lg.high_watermark, lg.last_stable_offset)
        bases = lg._bases
        for i in range(len(lg.segments) - 1):
            seg, nxt = lg.segments[i], bases[i + 1]
            if nxt - 1 <= highest_remote:
                continue
            if nxt > limit or seg.size == 0:
                return None
            if seg.base_offset <= highest_remote:
                # Already partly remote (a local log that starts mid-segment after a
                # leadership change): copying it would duplicate offsets.
                continue
            seg.offset_index.flush(fsync=False)
            seg.time_index.flush(fsync=False)
            fd = os.open(seg.log_path, os.O_RDONLY)
            txn = lg._txn_indexes.get(seg.base_offset)
            indexes = {
                "offset": _read_file(seg.offset_index.path),
                "time": _read_file(seg.time_index.path),
                "transaction": _read_file(txn.path) if txn is not None else b"",
                "producer_snapshot": (_I64.pack(nxt) + lg.roll_snapshots[nxt]
                                      if nxt in lg.roll_snapshots
                                      else _snapshot_at(lg.directory, nxt)),
            }
            entries = lg.leader_epochs.entries
            epochs: list[tuple[int, int]] = []
            for epoch, start in entries:
                if start < nxt:
                    if start <= seg.base_offset:
                        epochs = [(epoch, seg.base_offset)]
                    else:
                        epochs.append((epoch, start))
            indexes["leader_epoch"] = "\n".join(f"{e} {s}" for e, s in epochs).encode()
            return _SegmentSnapshot(seg.base_offset, nxt, seg.size, seg.max_timestamp, fd,
                                    indexes, tuple(epochs))
    return None


def _snapshot_at(directory: str, offset: int) -> bytes:
    """The newest producer snapshot at or below ``offset``, its offset first (empty if
    none)."""
    best = -1
    for name in os.listdir(directory):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and stem.isdigit() and best < int(stem) <= offset:
            best = int(stem)
    if best < 0:
        return b""
    return _I64.pack(best) + _read_file(os.path.join(directory, f"{best:020d}{SNAPSHOT_SUFFIX}"))
