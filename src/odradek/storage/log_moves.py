"""Moving a partition's log from one log directory to another (Kafka's
AlterReplicaLogDirs, KIP-113): the log manager's methods of that name are these
functions (``LogManager.start_future = log_moves.start_future``), kept apart from the
manager's opening, closing and duties; the protocol is in the manager's docstring.

Every function runs on the thread that appends (the broker's event loop): ``finish_move``
swaps the logs under the current log's lock, and the caller hands the new log to
whatever held the old one before anything else runs there.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from odradek.storage import checkpoint, partition_metadata
from odradek.storage.errors import StorageError
from odradek.storage.layout import future_dir_name, log_dir_name
from odradek.storage.log import Log

if TYPE_CHECKING:
    from odradek.storage.manager import LogManager

log = logging.getLogger(__name__)

# Bytes a future log copies per step (``copy_to_future``): the current log's lock is held
# for a read of this much, the copying's own appends take only the future's.
COPY_STEP_BYTES = 1 << 20


def future_dir_of(self: LogManager, topic: str, partition: int) -> str | None:
    """The directory the partition's log is being moved into (None: no move)."""
    return self._future_dir_of.get((topic, partition))


def start_future(self: LogManager, topic: str, partition: int, directory: str) -> Log | None:
    """Begin moving the partition's log into ``directory`` (one of the log
    directories): its future log there, empty, copied into by ``copy_to_future``.
    A move to another directory under way is abandoned; ``directory`` being the
    log's own only abandons it. Returns the future log, None when there is nothing
    to copy (no such log here, or already in ``directory``)."""
    tp = (topic, partition)
    self.check_dir(directory)
    current = self.logs.get(tp)
    if self._future_dir_of.get(tp) not in (None, directory):
        self.abort_move(topic, partition)
    if current is None or self._dir_of.get(tp) == directory:
        return None
    future = self.futures.get(tp)
    if future is None:
        path = os.path.join(directory, future_dir_name(topic, partition))
        future = Log.open(path, current.config, clock=self.clock, clean_shutdown=True)
        topic_id = self._topic_ids.get(tp)
        if topic_id is None:
            try:
                topic_id = partition_metadata.read(current.directory)
            except partition_metadata.PartitionMetadataError:
                topic_id = None
        if topic_id is not None:
            partition_metadata.write(path, topic_id)
        checkpoint.fsync_dir(directory)
        self.futures[tp] = future
        self._future_dir_of[tp] = directory
        self._counts[directory] += 1
        self._copied_at[tp] = current._truncations
        log.info("%s-%d: moving its log from %s to %s", *tp, self._dir_of[tp],
                 directory)
    return future


def copy_to_future(self: LogManager, topic: str, partition: int,
                   max_bytes: int = COPY_STEP_BYTES) -> bool:
    """One step of a move: up to ``max_bytes`` of the current log's batches from
    the future's log end appended to the future as a follower appends its
    leader's (offsets, leader epochs and producer ids as written). Returns whether
    the future has caught up with the current log's end."""
    tp = (topic, partition)
    current, future = self.logs[tp], self.futures[tp]
    with current.lock:
        if current._truncations != self._copied_at[tp] or (
                future.log_end_offset > current.log_end_offset):
            # The current log was cut (a follower's truncation) since batches were
            # copied: what the future holds may differ from it now. Start again.
            self._copied_at[tp] = current._truncations
            future.truncate_fully_and_start_at(current.log_start_offset)
        offset = future.log_end_offset
        if offset < current.log_start_offset:  # retention passed the copy
            future.truncate_fully_and_start_at(current.log_start_offset)
            offset = current.log_start_offset
        if offset >= current.log_end_offset:
            return True
        found = current.read(offset, max_bytes)
        data = found.region.read() if found.region is not None else b""
    if found.first_offset < offset:
        # The batch holding the log start begins below it (the copy starts mid-
        # batch): the future starts at the batch, as a follower fetching from its
        # leader's log start does.
        future.truncate_fully_and_start_at(found.first_offset)
    if data:
        future.append(data, assign_offsets=False, flush=False)
    return future.log_end_offset >= current.log_end_offset


def finish_move(self: LogManager, topic: str, partition: int) -> Log:
    """Make the future log the partition's log: the rest copied under the current
    log's lock (no append can come between), the future given the current log's
    leader epochs, producer state, log start and high watermark, closed and synced;
    then the current directory renamed ``-delete`` and the future's renamed to the
    partition's name, and opened there. Returns the new log; the caller gives it to
    whatever held the old one (the old one is closed: appends to it fail)."""
    tp = (topic, partition)
    current, future = self.logs[tp], self.futures[tp]
    source, destination = self._dir_of[tp], self._future_dir_of[tp]
    with current.lock:
        while not self.copy_to_future(topic, partition):
            pass
        future.leader_epochs.clear()
        future.leader_epochs.assign_all(
            (e.epoch, e.start_offset) for e in current.leader_epochs.entries)
        future.producer_state = current.producer_state
        # The current log's producer state at the end, which the open below reads
        # (close() writes none where a snapshot at the end exists already).
        future.producer_state.write_snapshot(future.directory, future.log_end_offset)
        if not future.close():
            raise StorageError(f"{future.directory}: could not be synced; the move "
                               "is abandoned")
        self.futures.pop(tp)
        self._future_dir_of.pop(tp)
        self._copied_at.pop(tp)
        self._counts[destination] -= 1
        # The commit point: from the rename of the current directory on, a start
        # finds only the future (complete) and makes it the log.
        self.logs.pop(tp)
        self._unplace(tp)
        self._retire(current, source)
        final = os.path.join(destination, log_dir_name(topic, partition))
        os.replace(future.directory, final)
        checkpoint.fsync_dir(destination)
        moved = Log.open(
            final, current.config, log_start_offset=current.log_start_offset,
            recovery_point=current.log_end_offset, clean_shutdown=True,
            clock=self.clock,
            high_watermark=current.high_watermark if current.replicated else None,
            replicated=current.replicated)
        self.logs[tp] = moved
        self._place(tp, destination)
        self._watch(moved)
    if source in self.cleaners:
        self.cleaners[source].forget(tp)
    self.write_checkpoints()
    log.info("%s-%d: its log moved from %s to %s", *tp, source, destination)
    return moved


def abort_move(self: LogManager, topic: str, partition: int) -> bool:
    """Abandon a move under way: its future log deleted. False if there was none."""
    tp = (topic, partition)
    future = self.futures.pop(tp, None)
    if future is None:
        return False
    directory = self._future_dir_of.pop(tp)
    self._copied_at.pop(tp, None)
    self._counts[directory] -= 1
    future.delete()
    checkpoint.fsync_dir(directory)
    log.info("%s-%d: the move of its log to %s abandoned", *tp, directory)
    return True
