"""Moving partition logs between this broker's log directories: Kafka's
``ReplicaManager.alterReplicaLogDirs`` (what AlterReplicaLogDirs may do to each
partition, and its error) and its ReplicaAlterLogDirsManager (the copying).

A move runs as one task per partition on the event loop: steps of
``storage.log_moves.COPY_STEP_BYTES`` from the current log into the future one, other
requests served between steps, paced by the dynamic broker config
``replica.alter.log.dirs.io.max.bytes.per.second`` (Kafka's, default unlimited; one
rate for all the broker's moves, in steps of a tenth of a second's bytes); when
the future has caught up, ``LogManager.finish_move`` swaps it in and the topology's
partition takes the new log before anything else runs on the loop, so no append lands
in the old one. Moves a stop interrupted start again when the broker starts.

Kafka takes a whole log directory offline when a disk fails (KAFKA_STORAGE_ERROR for
its partitions from then on); this broker keeps no such state (a failed write answers
KAFKA_STORAGE_ERROR for that request), so every directory is reported online.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.cluster.quota import ReplicationQuota
from odradek.storage.errors import LogDirNotFoundError
from odradek.storage.layout import future_dir_name
from odradek.storage.log_moves import COPY_STEP_BYTES

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

IO_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
MAX_DIR_NAME = 255  # bytes of a file name on the file systems Linux runs Kafka on

TopicPartition = tuple[str, int]


class LogDirMoves:
    """The moves of this broker's partition logs between its log directories."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        self._quota = ReplicationQuota()

    def start(self) -> None:
        """Start again the moves a stop interrupted."""
        logs = self.broker.logs
        assert logs is not None
        for (topic, partition), directory in sorted(logs.pending_moves.items()):
            if logs.start_future(topic, partition, directory) is not None:
                self._run(topic, partition)
        logs.pending_moves.clear()

    async def stop(self) -> None:
        """Stop copying; the futures stay, and the next start moves them again."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def alter(self, topic: str, partition: int, directory: str) -> int:
        """Move the partition's log to ``directory`` (the error code for it, as Kafka's
        alterReplicaLogDirs answers): INVALID_TOPIC_EXCEPTION for a name too long for
        the future log's directory, LOG_DIR_NOT_FOUND for a path that is not a log
        directory, REPLICA_NOT_AVAILABLE when this broker has no replica of the
        partition and UNKNOWN_TOPIC_OR_PARTITION when there is no such partition (either
        way the directory is remembered for when it has one), else NONE: the move started, is
        under way, is abandoned (``directory`` is where the log already is), or there
        is nothing to do."""
        logs = self.broker.logs
        assert logs is not None
        if len(future_dir_name(topic, partition).encode()) > MAX_DIR_NAME:
            return ErrorCode.invalid_topic_exception
        try:
            logs.check_dir(directory)
        except LogDirNotFoundError:
            return ErrorCode.log_dir_not_found
        if logs.get_log(topic, partition) is None:
            logs.prefer_dir(topic, partition, directory)
            # Kafka's getPartitionOrException: NOT_LEADER_OR_FOLLOWER (answered as
            # REPLICA_NOT_AVAILABLE here) for a partition that exists elsewhere, else
            # UNKNOWN_TOPIC_OR_PARTITION.
            code = self.broker.topology.missing_partition_error(topic, partition)
            return (ErrorCode.replica_not_available
                    if code == ErrorCode.not_leader_or_follower else code)
        if logs.start_future(topic, partition, directory) is not None:
            self._run(topic, partition)
        return ErrorCode.none

    def _run(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        if tp not in self._tasks:
            task = asyncio.get_running_loop().create_task(self._move(topic, partition))
            self._tasks[tp] = task
            task.add_done_callback(lambda _: self._tasks.pop(tp, None))

    async def _move(self, topic: str, partition: int) -> None:
        logs = self.broker.logs
        assert logs is not None
        synced = None  # the future log synced off the loop (another may replace it)
        try:
            # Until the move is done, abandoned (moved back, or the partition deleted
            # or moved away from this broker) or replaced by one to another directory.
            while logs.future_dir_of(topic, partition) is not None:
                quota = self._quota
                quota.set_rate(self.broker.setting(IO_RATE))
                # Throttled: steps of a tenth of a second's bytes (at least a batch).
                step = COPY_STEP_BYTES if quota.unlimited else min(COPY_STEP_BYTES,
                                                                   quota.rate // 10)
                future = logs.futures[(topic, partition)]
                before = future.size_bytes
                if logs.copy_to_future(topic, partition, step):
                    if synced is not future:
                        # Caught up: sync the copy off the loop first (once: appends go
                        # on meanwhile), so the swap, under the log's lock on the loop,
                        # syncs only what came since.
                        await asyncio.get_running_loop().run_in_executor(None, future.sync)
                        synced = future
                        continue
                    moved = logs.finish_move(topic, partition)
                    self.broker.topology.replace_log(topic, partition, moved)
                    return
                now = time.monotonic()
                # (Less than before when the copy started again: nothing spent.)
                quota.record(max(0, future.size_bytes - before), now)
                await asyncio.sleep(quota.wait_s(now))
        except Exception:  # not CancelledError: a stop leaves the future for the next start
            log.exception("%s-%d: moving its log failed; the move is abandoned", topic,
                          partition)
            logs.abort_move(topic, partition)
