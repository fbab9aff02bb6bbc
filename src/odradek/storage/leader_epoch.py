"""The leader epoch cache of one partition log: Kafka's LeaderEpochFileCache (KIP-101,
KIP-279).

It owns the list of (leader epoch, start offset) pairs of a partition, the first offset
each leader epoch wrote, and their file ``leader-epoch-checkpoint`` in the partition
directory. Replication asks it where an epoch ends (OffsetsForLeaderEpoch): after a
leader change a follower asks the new leader where the follower's latest epoch ended and
truncates its log there, where the two histories agree, instead of to its high watermark
(which can lose committed data or let the replicas diverge, KIP-101).

The entries are strictly increasing in both epoch and start offset. The log keeps them
in step with its batches: appends add an entry when a batch carries a higher epoch,
truncation and log start moves cut them (``truncate_from_end``/``truncate_from_start``).

File format (Kafka's LeaderEpochCheckpointFile, a CheckpointFile of version 0)::

    0                 version
    2                 number of entries
    0 0               <epoch> <start offset>, one line each, oldest first
    3 1500

Durability. An assignment changes memory only; a truncation writes the file at once
(whole, to ``leader-epoch-checkpoint.tmp`` renamed over the file) without fsync.
``flush`` writes what is unwritten and makes the file durable, and the log calls it
whenever it makes its data durable, before its recovery point moves
(``Log.flush``/``sync``/``flush_rolled``/``close``). So the file on disk always covers
the data below the recovery point, and after an unclean stop the
log re-derives the entries from the segment holding the recovery point on from the
batch headers it validates there (``open``'s ``recovered_from``), as Kafka's
LogSegment.recover assigns the epochs of the batches it recovers. The entries stay in
step with the log even when the crash lost the file, left an older version, or left a
torn one: each write is a new inode, whose unsynced bytes come back whole, empty or
zeroed, and the last two do not parse (the file is then rebuilt from every header).

This is a departure from Kafka, which still fsyncs the file in ``assign`` on the
appending thread (LeaderEpochFileCache.assign -> writeToFile, "we still flush the change
in #assign synchronously, meaning that it's guaranteed that the checkpoint file always
has no missing entries"). KAFKA-15046 (3.7) only took the fsync out of
truncateFromStart/End, relying on log loading to cut stale entries; KAFKA-16541 (3.8)
then restored it there (unsynced writes left corrupt files after OS crashes, and Kafka
takes a log directory with a corrupt file offline) and moved those writes to a
background thread instead. Here a corrupt file is not fatal (it is rebuilt from the
headers) and the entries above the recovery point are re-derived anyway, so the fsync
can wait for the log's own: with the produce path assigning epoch 0 on the first
append to every partition, a synced assign cost an fsync (and a written one a file) per
new partition on the event loop (see ``assign``). One write stays synced as in Kafka: ``clear``
(clearAndFlush), when a follower restarts its log at another offset, since its old
entries must not come back (see ``clear``).

An epoch below 0 (a batch without one) is ignored by ``assign`` rather than refused.

Threading: callers change the cache under the log's lock. Every change replaces the
entry tuple whole, so reading it (``latest_epoch``, ``end_offset_for``) from another
thread sees one consistent list. ``flush`` may run on another thread without the log's
lock (the log's background sync); ``_file_lock`` orders it with the writes.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import NamedTuple

from odradek.storage import checkpoint
from odradek.storage.errors import KafkaStorageError

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"

# OffsetsForLeaderEpochResponse's "nothing known" answer.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    """The first offset (``start_offset``) written in leader epoch ``epoch``."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """A partition's (epoch, start offset) entries and their checkpoint file."""

    def __init__(self, path: str, entries: Iterable[EpochEntry | tuple[int, int]] = ()) -> None:
        """A cache backed by the file at ``path`` holding ``entries`` (sanitised with
        ``assign``'s rules, as Kafka does when it reads the file); nothing is read or
        written here: see ``open``."""
        self.path = path
        self._entries: tuple[EpochEntry, ...] = ()
        # The highest epoch with an entry, -1 when there is none. A plain attribute, kept
        # by _set: the produce path compares an epoch with it on every append. Read-only.
        self.latest_epoch = UNDEFINED_EPOCH
        self._closed = False
        # Durability of the file: _version counts the writes (and removals) of the file,
        # _synced_version is the last of them known durable. Both change under
        # _file_lock, which a write holds while it replaces the file (unsynced but for
        # clear's) and flush only while it reads or compares them, never across its
        # fsyncs: so flush can tell whether the file it synced is still the current one.
        self._file_lock = threading.Lock()
        self._version = 0
        self._synced_version = 0
        # An assignment changes memory only (the next flush writes and syncs the file):
        # set until then.
        self._unwritten = False
        for epoch, start_offset in entries:
            self._assign(epoch, start_offset)

    @classmethod
    def open(
        cls,
        directory: str,
        *,
        log_start_offset: int,
        log_end_offset: int,
        rebuild: Callable[[int], Iterable[tuple[int, int]]] | None = None,
        recovered_from: int | None = None,
        durable: bool = False,
    ) -> LeaderEpochCache:
        """The cache of the log in ``directory``, from its checkpoint file, with entries
        outside [``log_start_offset``, ``log_end_offset``) cut, as Kafka's log loading
        does (LogLoader.load: truncateFromEnd(next offset), truncateFromStart(log
        start); here in the other order, see below): an entry may name data a crash
        lost, or data retention removed before the file was written. An entry starting
        at the log end names no data and goes too (an emptied log's latest epoch, kept
        at its log start, does not outlive a restart in Kafka either, when it comes
        from the file).

        ``rebuild(offset)`` gives (epoch, base offset) of the batches from ``offset`` on
        whose epoch is above every one before them from there (what appends would have
        assigned); None means the log has no batches. It is used:

        - without a readable file (a log written before leader epochs were kept, a file a
          crash lost or tore): every entry comes from ``rebuild(0)``;
        - after an unclean stop (``recovered_from``: the first offset the log validated
          batch by batch, at or below its recovery point): the entries from there on are
          cut and re-derived from ``rebuild(recovered_from)``, each epoch above the
          latest kept one assigned, as Kafka's LogSegment.recover does for the batches
          it recovers. The file is flushed before the recovery point moves (``flush``),
          so what it holds below the recovery point is what was synced with that data;
          above it the file may lack entries or hold stale ones, and the headers decide.

        ``durable``: the file on disk is known to be synced (the log was closed
        cleanly); otherwise the next ``flush`` syncs it, whatever it holds. Opening
        writes the file when the entries differ from it, never synced (the log's next
        flush syncs it; a crash before that repeats this same derivation)."""
        path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT_FILE)
        malformed = False
        try:
            lines = checkpoint.read_lines(path)
            cache = None if lines is None else cls(path, [_parse_entry(path, line)
                                                          for line in lines])
        except ValueError as exc:
            log.warning("%s; rebuilding it from the batch headers", exc)
            cache = None
            malformed = True
        if cache is None:
            file_exists = malformed
            cache = cls(path)
            derive_from: int | None = 0
            # Written even when empty, so the next open does not walk the headers again.
            loaded: tuple[EpochEntry, ...] | None = None if rebuild or malformed else ()
        else:
            file_exists = True
            derive_from = recovered_from
            loaded = cache._entries
            if recovered_from is not None:
                cache._truncate_from_end(recovered_from)
        if derive_from is not None and rebuild is not None:
            for epoch, start_offset in rebuild(derive_from):
                # LogSegment.recover's rule: a batch's epoch is assigned when it is above
                # the latest one (with the entries kept from the file, that may skip some
                # that rebuild() reports as above the ones before them from derive_from).
                if epoch > cache.latest_epoch:
                    cache._assign(epoch, start_offset)
        # The log end last (Kafka cuts it first): an emptied log's entry, which the
        # headers below the log start re-derive at the log start, goes as the file's
        # would, whether the stop was clean or not.
        cache._truncate_from_start(log_start_offset)
        cache._truncate_from_end(log_end_offset)
        if file_exists and not durable:
            cache._version = 1  # what a crash left may be only in the page cache
        if cache._entries != loaded:
            # Usually the recovered headers say what the file said, and nothing is
            # written. Failing to write it only costs this derivation at the next open.
            cache._persist()
        return cache

    # --- reading -----------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        """Every entry, oldest first."""
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for ``requested_epoch``: Kafka's ``endOffsetFor``.

        The epoch is the largest one known that is <= the requested one, the end offset
        the start of the first epoch above the requested one, or ``log_end_offset`` when
        the latest epoch is requested (it is still being written). Unknown (requested
        epoch undefined, or above every known one): (UNDEFINED_EPOCH,
        UNDEFINED_EPOCH_OFFSET). Below every known epoch: the requested epoch itself
        with the first entry's start offset (Kafka: the data before it is gone, so the
        follower truncates to where the leader's history starts)."""
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        # The first entry with an epoch above the requested one.
        higher = bisect.bisect_right(entries, requested_epoch, key=_epoch_of)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end = entries[higher].start_offset
        if higher == 0:
            return requested_epoch, end
        return entries[higher - 1].epoch, end

    # --- changing ----------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that leader epoch ``epoch`` starts at ``start_offset`` (in memory: the
        next ``flush`` writes and syncs the file); returns whether anything changed.
        Kafka's ``assign``:

        - ignored when the latest entry has this epoch already, unless the new start is
          earlier (a leader assigns its epoch at the offset of its first append);
        - otherwise every entry that would break the ordering goes first (from the end:
          those with an epoch >= ``epoch`` or a start offset >= ``start_offset``), then
          the new entry is appended.

        An epoch below 0 (a batch written without one, RecordBatch.NO_PARTITION_LEADER_EPOCH)
        is ignored; Kafka's callers filter those out before they get here.

        Neither written nor synced here, unlike Kafka's (see the module's notes): the
        produce path assigns epoch 0 on the first append to every new partition, under
        the log's lock on the event loop. Measured in-process (the first append with
        leader_epoch=0 to each of 1,000 new logs, ``Log.open`` on fresh directories,
        ext4; 5 runs x 3): 0.78-1.27 s in total with the file written and synced here,
        0.22-0.26 s written but not synced, 0.011 s in memory (0.010 s with no epoch at
        all). Later appends assign nothing and cost the same (6.4-6.8 us) either way.
        The log flushes the cache before its recovery point passes the entry, and an
        entry lost with an unflushed tail is rebuilt from the recovered batches."""
        if self._assign(epoch, start_offset):
            self._mark_unwritten()
            return True
        return False

    def _mark_unwritten(self) -> None:
        with self._file_lock:
            self._version += 1
            self._unwritten = True

    def assign_all(self, entries: Iterable[tuple[int, int]]) -> bool:
        """``assign`` each (epoch, start offset) in turn, writing the file once (a
        follower's append may carry several leader epochs)."""
        changed = False
        for epoch, start_offset in entries:
            changed = self._assign(epoch, start_offset) or changed
        if changed:
            self._mark_unwritten()
        return changed

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries starting at or after ``end_offset`` (the log was cut there;
        Kafka's ``truncateFromEnd``); a negative offset (undefined) changes nothing.
        Written, not synced (Kafka has not synced it on the caller's thread since
        KAFKA-15046 either): a stale file is cut again when the log is opened."""
        if self._truncate_from_end(end_offset):
            self._persist()
            return True
        return False

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: the entries starting at or before it
        go, except the last of them, which is kept with its start moved to
        ``start_offset`` (the epoch of the first offset still in the log). Kafka's
        ``truncateFromStart``; an offset before every entry changes nothing. Written,
        not synced, as ``truncate_from_end``."""
        if self._truncate_from_start(start_offset):
            self._persist()
            return True
        return False

    def clear(self) -> None:
        """Drop every entry (the log was emptied and restarts at some offset), and sync
        that at once, as Kafka's clearAndFlush (UnifiedLog.truncateFullyAndStartAt):
        the old entries lie below the new start, where neither the cuts at open nor the
        headers of recovered data would remove them, so a crash must not bring them
        back. Rare (a follower restarting at the leader's log start)."""
        if self._entries:
            self._set(())
            self._persist(sync=True)

    @property
    def unsynced(self) -> bool:
        """The file changed (written or removed) since it was last made durable."""
        return self._version != self._synced_version

    def flush(self) -> None:
        """Make the file as last written durable: fsync it, then its directory (every
        write renames a new file in, and a removal must stick too). Nothing to do when
        nothing changed since the last flush, or after ``close``/``delete``.

        The log calls it before its recovery point moves, without the log's lock where
        it syncs its segments without it: a write meanwhile is not waited for (it
        replaces the file under ``_file_lock``, without syncing) but makes the loop sync
        again, so that the version marked durable is one that was synced. Raises
        KafkaStorageError when an fsync fails; a directory gone (the log is being
        deleted) is not an error, as in Kafka's writeIfDirExists/flushFileIfExists."""
        directory = os.path.dirname(self.path) or "."
        while not self._closed:
            with self._file_lock:
                version = self._version
                unwritten = self._unwritten
            if version == self._synced_version:
                return
            if unwritten:
                try:
                    self._write()
                except FileNotFoundError:
                    return  # the directory went: the log is being deleted
                except OSError as exc:
                    raise KafkaStorageError(f"writing {self.path} failed: {exc}") from exc
                continue  # the write is a new version: sync that one
            try:
                try:
                    fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    pass  # removed (_drop_file): only the directory has to be synced
                else:
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                checkpoint.fsync_dir(directory)
            except FileNotFoundError:
                return  # the directory went: the log is being deleted
            except OSError as exc:
                raise KafkaStorageError(f"fsync of {self.path} failed: {exc}") from exc
            with self._file_lock:
                if self._version == version:
                    self._synced_version = version
                    return

    def close(self) -> None:
        """Stop writing (and flushing) the file: later changes stay in memory. No
        descriptor is held between writes, so there is nothing else to close; the log
        flushes the cache before it closes it."""
        with self._file_lock:  # a flush writing meanwhile finishes first
            self._closed = True

    def delete(self) -> None:
        """Remove the file (the log is being deleted) and stop writing it: once this
        returns no write (a flush's, off the log's lock) can put it back."""
        with self._file_lock:
            self._closed = True
            for path in (self.path, self.path + ".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    # --- internals ---------------------------------------------------------------------

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0:
            return False
        if start_offset < 0:
            raise ValueError(f"leader epoch {epoch} cannot start at offset {start_offset}")
        entries = self._entries
        if entries:
            latest = entries[-1]
            # Kafka's isUpdateNeeded: the same epoch again changes nothing, unless it
            # now starts earlier.
            if latest.epoch == epoch and start_offset >= latest.start_offset:
                return False
        keep = len(entries)
        while keep and (entries[keep - 1].epoch >= epoch
                        or entries[keep - 1].start_offset >= start_offset):
            keep -= 1
        removed = entries[keep:]
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            # As Kafka: a removed entry that started where the new one does held no
            # data; anything else is history being rewritten, worth a line in the log.
            log.warning("%s: epoch %d at %d removed conflicting entries %s", self.path,
                        epoch, start_offset, list(removed))
        self._set((*entries[:keep], EpochEntry(epoch, start_offset)))
        return True

    def _truncate_from_end(self, end_offset: int) -> bool:
        entries = self._entries
        if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
            return False
        keep = bisect.bisect_left(entries, end_offset, key=_start_of)
        self._set(entries[:keep])
        return True

    def _truncate_from_start(self, start_offset: int) -> bool:
        entries = self._entries
        first_kept = bisect.bisect_right(entries, start_offset, key=_start_of)
        if first_kept == 0:
            return False
        floor = entries[first_kept - 1]
        new = (EpochEntry(floor.epoch, start_offset), *entries[first_kept:])
        if new == entries:
            return False  # the first entry starts at ``start_offset`` already
        self._set(new)
        return True

    def _persist(self, *, sync: bool = False) -> None:
        """Write the entries after a truncation or ``clear`` (synced only when ``sync``).
        When that fails (a full disk) the change stays done in memory (the log was cut
        already) and the file is removed instead (``_drop_file``), so that no stale
        entry can outlive a crash."""
        try:
            self._write(sync=sync)
        except OSError as exc:
            self._drop_file(exc)

    def _drop_file(self, exc: OSError) -> None:
        """Remove the file that could not be rewritten: a missing file is rebuilt from
        the batch headers at the next open, while an old one could hold entries that no
        longer match the log (``flush`` makes the removal durable). Unlinking needs no
        free space; if even that fails, the disk is not usable and KafkaStorageError
        says so."""
        log.warning("%s: could not write it (%s); removed, the next open rebuilds it "
                    "from the batch headers", self.path, exc)
        try:
            with self._file_lock:
                for path in (self.path, self.path + ".tmp"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                self._version += 1
        except OSError as again:
            raise KafkaStorageError(f"{self.path}: could not write or remove it: {again}"
                                    ) from exc

    def _set(self, entries: tuple[EpochEntry, ...]) -> None:
        # One tuple replaced whole (readers on other threads see the old or the new one),
        # then the epoch derived from it.
        self._entries = entries
        self.latest_epoch = entries[-1].epoch if entries else UNDEFINED_EPOCH

    def _write(self, *, sync: bool = False) -> None:
        """Replace the file with the entries (tmp + rename: atomic); synced only when
        ``sync`` (``clear``), otherwise by the next ``flush``.

        The entries are read, and ``_closed`` checked, under ``_file_lock``: ``flush``
        writes without the log's lock, so a change may land just before; read earlier,
        the write would replace the file with entries missing an assignment (its
        ``_unwritten`` mark cleared all the same) or holding entries a truncation cut,
        and flush would make that durable; or it would put a file back after
        ``delete``."""
        with self._file_lock:
            if self._closed:
                return
            lines = [f"{e} {s}" for e, s in self._entries]
            checkpoint.write_lines(self.path, lines, sync=sync)
            self._unwritten = False
            self._version += 1
            if sync:
                self._synced_version = self._version

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {list(self._entries)})"


def _epoch_of(entry: EpochEntry) -> int:
    return entry.epoch


def _start_of(entry: EpochEntry) -> int:
    return entry.start_offset


def _parse_entry(path: str, line: str) -> EpochEntry:
    fields = line.split()
    if len(fields) != 2:
        raise ValueError(f"{path}: malformed leader epoch entry {line!r}")
    try:
        return EpochEntry(int(fields[0]), int(fields[1]))
    except ValueError:
        raise ValueError(f"{path}: malformed leader epoch entry {line!r}") from None
