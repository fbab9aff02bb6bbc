"""The data directory: its lock, its checkpoints, and every partition log in it.

Layout (Kafka's, so operators find what they know)::

    DATA_DIR/
      .lock                               held (flock) while a process uses the directory
      .kafka_cleanshutdown                present only between a clean stop and the next start
      recovery-point-offset-checkpoint    per partition: every offset below is on disk
      log-start-offset-checkpoint         per partition: the first offset still readable
      replication-offset-checkpoint       per replicated partition: its high watermark
                                          (written once some log is replicated)
      cleaner-offset-checkpoint           per partition: where compaction stopped
      <topic>-<partition>/                one directory per partition log: segments
                                          (.log, .index, .timeindex, .txnindex),
                                          producer-state .snapshot files,
                                          leader-epoch-checkpoint (see Log) and
                                          partition.metadata (its topic's id)

Replicated logs: the replication layer marks a log replicated (``set_replicated``) and
moves its high watermark (``Log.set_high_watermark``); ``write_checkpoints`` saves the
high watermark of every replicated log, and the next start opens each log found there
replicated, from that high watermark (clamped to what recovery kept). A log marked
replicated without one starts from its log start, as a Kafka follower restarting
without a checkpoint does.

The manager opens every log at start (recovering those that need it), runs the periodic
duties when asked (flush by ``flush.ms``, retention, closing retired files, writing
checkpoints, compaction) and closes everything cleanly. It owns no long-lived threads or
tasks: the server decides when and where each duty runs. Closing uses a short-lived
pool of ``recovery_threads`` threads: with thousands of partitions it is a few fsyncs
per changed log, which a single thread would wait for one after another. Opening, even
with recovery, syncs nothing and runs on one thread (see ``_open_logs``).
"""

from __future__ import annotations

import fcntl
import heapq
import itertools
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from odradek.storage import checkpoint, partition_metadata
from odradek.storage.cleaner import DEFAULT_MAX_MAP_ENTRIES, CleanResult, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import LogDirLockedError
from odradek.storage.log import Clock, Log, wall_clock_ms

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_FILE = "replication-offset-checkpoint"  # high watermarks
DELETE_DIR_SUFFIX = "-delete"

TopicPartition = tuple[str, int]
_T = TypeVar("_T")
_R = TypeVar("_R")

# Threads that flush and close the logs at stop. The work is mostly fsync, which releases
# the GIL and which the file system can batch into shared journal commits when several
# are in flight.
DEFAULT_RECOVERY_THREADS = 8


def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """``my-topic-3`` -> ("my-topic", 3); None for anything else."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or name.startswith("."):
        return None
    return topic, int(partition)


class LogManager:
    """Every partition log of one data directory."""

    def __init__(
        self,
        data_dir: str,
        *,
        default_config: LogConfig | None = None,
        topic_config: Callable[[str], LogConfig] | None = None,
        clock: Clock = wall_clock_ms,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
        recovery_threads: int = DEFAULT_RECOVERY_THREADS,
        flush_timer: Callable[[float], None] | None = None,
    ) -> None:
        self.data_dir = os.path.abspath(data_dir)
        # Given to every log (Log.flush_timer): the seconds each flush's fsyncs took.
        self.flush_timer = flush_timer
        self.default_config = default_config or LogConfig()
        self._topic_config = topic_config
        self.clock = clock
        self.logs: dict[TopicPartition, Log] = {}
        # Each log's topic id (partition.metadata) once read or written.
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}
        self._lock_fd: int | None = None
        self._max_map_entries = max_map_entries
        self.cleaner: LogCleaner | None = None
        self.had_clean_shutdown = False
        self._deleted: list[tuple[int, Log]] = []  # (close deadline, deleted log)
        self.recovery_threads = max(1, recovery_threads)
        # The flush duty's agenda: (due time, sequence, log) of logs with work for
        # Log.maybe_flush, earliest first; logs add themselves through their
        # flush_watcher (on the appending thread), the duty pops what is due (on its
        # own), so an idle pass costs the same with 10 logs or 10,000. _flush_entry
        # holds each log's live entry; others in the heap are stale and skipped.
        self._flush_lock = threading.Lock()
        self._flush_heap: list[tuple[int, int, Log]] = []
        self._flush_entry: dict[Log, tuple[int, int, Log]] = {}
        self._flush_seq = itertools.count()
        # Whether replication-offset-checkpoint holds entries: a data directory without
        # replicated logs never gets the file (no extra fsyncs per checkpoint pass), and
        # one whose logs stopped being replicated gets it emptied once.
        self._hw_file_has_entries = False

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config else self.default_config

    # --- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(cls, data_dir: str, **kwargs: object) -> LogManager:
        """Lock the directory, then open and (where needed) recover every log in it."""
        self = cls(data_dir, **kwargs)  # type: ignore[arg-type]
        os.makedirs(self.data_dir, exist_ok=True)
        self._acquire_lock()
        try:
            self._open_logs()
        except BaseException:
            self._release_lock()
            raise
        return self

    def _acquire_lock(self) -> None:
        path = os.path.join(self.data_dir, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LogDirLockedError(
                f"{self.data_dir} is in use by another process (pid {holder}); "
                "two brokers on one data directory would corrupt it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _open_logs(self) -> None:
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = os.path.exists(marker)
        recovery_file = os.path.join(self.data_dir, RECOVERY_POINT_FILE)
        # Never opened before: no marker, and no checkpoint (every open writes one).
        new = not self.had_clean_shutdown and not os.path.exists(recovery_file)
        recovery = checkpoint.read_checkpoint(recovery_file)
        starts = checkpoint.read_checkpoint(os.path.join(self.data_dir, LOG_START_FILE))
        hws = checkpoint.read_checkpoint(os.path.join(self.data_dir, REPLICATION_OFFSET_FILE))
        self._hw_file_has_entries = bool(hws)
        configs: dict[str, LogConfig] = {}  # one per topic, not one per partition
        found: list[tuple[TopicPartition, str]] = []
        for entry in sorted(os.scandir(self.data_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path)  # a deletion a stop interrupted
                continue
            tp = parse_log_dir_name(entry.name)
            if tp is None:
                continue
            if tp[0] not in configs:
                configs[tp[0]] = self.config_for(tp[0])
            found.append((tp, entry.path))

        def open_one(item: tuple[TopicPartition, str]) -> Log:
            tp, path = item
            return Log.open(
                path,
                configs[tp[0]],
                log_start_offset=starts.get(tp, 0),
                recovery_point=recovery.get(tp, 0),
                clean_shutdown=self.had_clean_shutdown,
                clock=self.clock,
                high_watermark=hws.get(tp),  # None: not replicated when last checkpointed
            )

        # One thread, clean stop or not. Recovery validates without syncing (see
        # Log.open), so opening is Python work on data the page cache holds after a
        # process crash, and threads only contend for the GIL: 10,000 recovering logs
        # opened in 2.5-2.9 s on one thread, 5.5-6.8 s on two and 6.9 s on eight
        # (in-process, same minutes; the pool paid when recovery made 3 fsyncs per log).
        # A cold cache after a machine crash would make it wait on reads, where threads
        # could help again: not measured. Kafka's num.recovery.threads.per.data.dir
        # defaults to 1 as well.
        opened = self._in_pool(open_one, found, threads=1)
        for (tp, _), result in zip(found, opened, strict=True):
            if isinstance(result, Exception):
                raise result
            self.logs[tp] = result
        for lg in self.logs.values():
            self._watch(lg)  # e.g. recovered segments to sync, or flush.ms to apply
        self.cleaner = LogCleaner(self.data_dir, clock=self.clock,
                                  max_map_entries=self._max_map_entries)
        # From here on a crash is unclean until close() writes the marker again.
        if self.had_clean_shutdown:
            os.unlink(marker)
            checkpoint.fsync_dir(self.data_dir)
        self.write_checkpoints()
        log.info("opened %d logs in %s (%s)", len(self.logs), self.data_dir,
                 "a new data directory" if new and not self.logs else
                 "clean shutdown before" if self.had_clean_shutdown else
                 "unclean shutdown before: logs recovered")

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown
        marker, release the lock."""
        if self._lock_fd is None:
            return
        try:
            self._close_deleted(everything=True)
            closed = self._in_pool(Log.close, list(self.logs.values()))
            for result in closed:
                if isinstance(result, Exception):
                    raise result
            clean = all(closed)
            if clean:
                self.write_checkpoints()
                fd = os.open(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE),
                             os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
                os.fsync(fd)
                os.close(fd)
                checkpoint.fsync_dir(self.data_dir)
            else:
                log.error("%s: not every log flushed; the next start recovers them",
                          self.data_dir)
        except OSError as exc:
            log.error("%s: could not record a clean shutdown: %s", self.data_dir, exc)
        finally:
            self._release_lock()

    def _in_pool(self, fn: Callable[[_T], _R], items: list[_T], *,
                 threads: int | None = None) -> list[_R | Exception]:
        """``fn`` of every item on up to ``threads`` (default ``recovery_threads``)
        threads; results in the order of ``items``. With several threads every item is
        done before this returns, and an exception is handed back in its item's place."""
        threads = self.recovery_threads if threads is None else threads
        if threads <= 1 or len(items) < 2:
            return [fn(item) for item in items]  # the first failure stops the rest

        def call(item: _T) -> _R | Exception:
            try:
                return fn(item)
            except Exception as exc:  # handed back, raised by the caller
                return exc

        workers = min(threads, len(items))
        with ThreadPoolExecutor(workers, thread_name_prefix="odradek-recovery") as pool:
            return list(pool.map(call, items))

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- logs --------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int,
                          config: LogConfig | None = None,
                          topic_id: uuid.UUID | None = None) -> Log:
        """The partition's log, created if there is none. With ``topic_id``, a log on
        disk that ``partition.metadata`` says belongs to another topic id (an earlier
        topic of the same name, deleted while this broker was away) is deleted and a new
        one created: it must never be served as this topic's."""
        tp = (topic, partition)
        lg = self.logs.get(tp)
        if lg is not None and topic_id is not None and not self._belongs(lg, tp, topic_id):
            self.delete_log(topic, partition)
            lg = None
        if lg is None:
            path = os.path.join(self.data_dir, log_dir_name(topic, partition))
            # A directory made just now holds nothing to recover: opening it as after a
            # clean stop skips validating (and fsyncing) its empty first segment, which
            # made creating 10,000 partitions cost 10,000 extra fsyncs.
            new = not os.path.exists(path)
            lg = Log.open(path, config or self.config_for(topic), clock=self.clock,
                          clean_shutdown=new)
            if topic_id is not None:
                partition_metadata.write(path, topic_id)
                self._topic_ids[tp] = topic_id
            checkpoint.fsync_dir(self.data_dir)
            self.logs[tp] = lg
            self._watch(lg)
        return lg

    def _belongs(self, lg: Log, tp: TopicPartition, topic_id: uuid.UUID) -> bool:
        """Whether ``lg`` is the log of topic ``topic_id``: its partition.metadata says
        so, or it has none yet (a log from before topic ids: it is adopted, and the id
        written) or one that does not parse (adopted too, with a warning: its data is
        not thrown away on a doubt)."""
        known = self._topic_ids.get(tp)
        if known is None:
            try:
                known = partition_metadata.read(lg.directory)
            except partition_metadata.PartitionMetadataError as exc:
                log.warning("%s-%d: %s does not parse (%s); rewriting it for topic id %s",
                            *tp, partition_metadata.FILE_NAME, exc, topic_id)
            if known is None:
                partition_metadata.write(lg.directory, topic_id)
                known = topic_id
            self._topic_ids[tp] = known
        if known == topic_id:
            return True
        log.info("%s-%d: the log here is of topic id %s, an earlier topic of this name "
                 "(deleted while this broker was away): deleting it for topic id %s",
                 *tp, known, topic_id)
        return False

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a partition's log: renamed ``<dir>.<id>-delete`` first (atomic, so a
        crash cannot resurrect half of it), then removed."""
        lg = self.logs.pop((topic, partition), None)
        self._topic_ids.pop((topic, partition), None)
        if lg is None:
            return False
        target = f"{lg.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        with lg.lock:
            lg.closed = True
            lg.flush_watcher = None
            lg.leader_epochs.close()  # its directory is about to move and go
            os.replace(lg.directory, target)
        with self._flush_lock:
            self._flush_entry.pop(lg, None)  # its heap entry, if any, is skipped
        checkpoint.fsync_dir(self.data_dir)
        shutil.rmtree(target)
        # The files are gone, but their descriptors stay open for file.delete.delay.ms:
        # a fetch may hold a region of them, and a closed descriptor's number could be
        # reused by another file before its sendfile runs.
        self._deleted.append((self.clock() + lg.config.file_delete_delay_ms, lg))
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition))
        return True

    def _close_deleted(self, now: int | None = None, *, everything: bool = False) -> None:
        now = self.clock() if now is None else now
        keep = []
        for deadline, lg in self._deleted:
            if everything or deadline <= now:
                with lg.lock:
                    lg.close_retired(everything=True)
                    for segment in lg.segments:
                        segment.close(flush_indexes=False)
            else:
                keep.append((deadline, lg))
        self._deleted = keep

    def set_replicated(self, topic: str, partition: int, replicated: bool = True) -> bool:
        """Mark a partition's log replicated (its high watermark then waits for the
        followers: from the checkpointed one it was opened with, else from its log
        start) or a single copy again (high watermark = log end; it leaves the
        replication-offset-checkpoint at the next ``write_checkpoints``). Returns False
        when there is no such log."""
        lg = self.logs.get((topic, partition))
        if lg is None:
            return False
        lg.set_replicated(replicated)
        return True

    def update_config(self, topic: str, config: LogConfig) -> None:
        """New topic-level settings take effect on the next append/retention/clean."""
        for (t, _), lg in self.logs.items():
            if t == topic:
                lg.config = config
                self._watch(lg)  # a shorter flush.ms may make it due sooner

    # --- periodic duties ---------------------------------------------------------------

    def _watch(self, lg: Log) -> None:
        """Put ``lg`` on the flush agenda at its next deadline (sooner than one it has
        there already), and have it report new work itself from now on."""
        lg.flush_watcher = self._on_flush_work
        lg.flush_timer = self.flush_timer
        self._on_flush_work(lg)

    def _on_flush_work(self, lg: Log) -> None:
        due = lg.flush_deadline()
        if due is None:
            return
        with self._flush_lock:
            entry = self._flush_entry.get(lg)
            if entry is not None and entry[0] <= due:
                return
            entry = self._flush_entry[lg] = (due, next(self._flush_seq), lg)
            heapq.heappush(self._flush_heap, entry)

    def flush_due(self, now: int | None = None) -> int:
        """Apply ``flush.ms`` and sync rolled segments, on the logs whose deadline has
        come (not a walk over every log); returns how many logs were synced. A log whose
        flush fails is retried at the next call; the first error is raised once every
        due log has had its turn."""
        now = self.clock() if now is None else now
        due: list[Log] = []
        with self._flush_lock:
            heap = self._flush_heap
            while heap and heap[0][0] <= now:
                entry = heapq.heappop(heap)
                if self._flush_entry.get(entry[2]) is entry:
                    del self._flush_entry[entry[2]]
                    due.append(entry[2])
        synced = 0
        error: Exception | None = None
        for lg in due:
            if lg.closed:
                continue
            try:
                synced += lg.maybe_flush(now)
            except Exception as exc:
                error = error or exc
                self._retry_flush(lg, now)
            else:
                self._on_flush_work(lg)  # more to do later (flush.ms of newer records)
        if error is not None:
            raise error
        return synced

    def _retry_flush(self, lg: Log, now: int) -> None:
        with self._flush_lock:
            if lg not in self._flush_entry:
                entry = self._flush_entry[lg] = (now, next(self._flush_seq), lg)
                heapq.heappush(self._flush_heap, entry)

    def apply_retention(self, now: int | None = None) -> int:
        """Time and size retention on every log, then close retired files that are due."""
        deleted = 0
        for lg in list(self.logs.values()):
            deleted += lg.apply_retention(now)
            lg.close_retired(now)
        self._close_deleted(now)
        if deleted:
            self.write_checkpoints()
        return deleted

    def clean(self, now: int | None = None) -> list[tuple[TopicPartition, CleanResult]]:
        """One compaction pass over the logs whose dirty ratio calls for it."""
        assert self.cleaner is not None, "the manager is not open"
        return self.cleaner.clean_once(list(self.logs.items()), now)

    def write_checkpoints(self) -> None:
        """Write the recovery points and log starts of every log, and the high
        watermarks of the replicated ones."""
        logs = list(self.logs.items())  # the request path may add logs meanwhile
        checkpoint.write_checkpoint(
            os.path.join(self.data_dir, RECOVERY_POINT_FILE),
            {tp: lg.recovery_point for tp, lg in logs},
        )
        checkpoint.write_checkpoint(
            os.path.join(self.data_dir, LOG_START_FILE),
            {tp: lg.log_start_offset for tp, lg in logs},
        )
        hws = {tp: lg.high_watermark for tp, lg in logs if lg.replicated}
        if hws or self._hw_file_has_entries:
            checkpoint.write_checkpoint(
                os.path.join(self.data_dir, REPLICATION_OFFSET_FILE), hws)
            self._hw_file_has_entries = bool(hws)
