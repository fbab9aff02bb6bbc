"""The log directories: their locks, their checkpoints, every partition log in them,
and moving a log from one directory to another.

A broker has one log directory or several (Kafka's ``log.dirs``, JBOD): each partition's
log lives in exactly one of them, new logs going to the directory with the fewest (or
the one ``prefer_dir`` named for it). Each directory is laid out as Kafka lays one out,
with its own lock, clean-shutdown marker and checkpoints, so operators find what they
know::

    LOG_DIR/
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
      <topic>-<partition>.<id>-future/    a log being moved into this directory (below)

Replicated logs: the replication layer marks a log replicated (``set_replicated``) and
moves its high watermark (``Log.set_high_watermark``); ``write_checkpoints`` saves the
high watermark of every replicated log, and the next start opens each log found there
replicated, from that high watermark (clamped to what recovery kept). A log marked
replicated without one starts from its log start, as a Kafka follower restarting
without a checkpoint does.

Moving a log between directories (Kafka's AlterReplicaLogDirs, KIP-113): the *future*
log is made in the destination (``start_future``), copied into from the current one
batch by batch as a follower copies from its leader (``copy_to_future``: offsets, leader
epochs and producer state as written; a truncation of the current log starts the copy
again), and once it has caught up it replaces the current log (``finish_move``, under
the current log's lock: the rest copied, the future closed and synced, the current
directory renamed ``-delete``, the future renamed to the partition's name and opened).
A stop during the copy leaves the future behind: the next start deletes it and names
the move in ``pending_moves``, to be started again. A stop inside the swap, after the
current directory was renamed, leaves a complete future and no current log: the next
start makes it the log (renamed). So a partition is never in two directories, and never
in none. Kafka resumes an interrupted copy where it stopped; this starts it again.

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
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from odradek.storage import checkpoint, log_moves, partition_metadata
from odradek.storage.cleaner import DEFAULT_MAX_MAP_ENTRIES, CleanResult, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import LogDirLockedError, LogDirNotFoundError, StorageError
from odradek.storage.layout import (
    CLEAN_SHUTDOWN_FILE,
    DELETE_DIR_SUFFIX,
    LOCK_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    REPLICATION_OFFSET_FILE,
    log_dir_name,
    parse_future_dir_name,
    parse_log_dir_name,
)
from odradek.storage.log import Clock, Log, wall_clock_ms

log = logging.getLogger(__name__)


TopicPartition = tuple[str, int]
_T = TypeVar("_T")
_R = TypeVar("_R")

# Threads that flush and close the logs at stop. The work is mostly fsync, which releases
# the GIL and which the file system can batch into shared journal commits when several
# are in flight.
DEFAULT_RECOVERY_THREADS = 8


class LogManager:
    """Every partition log of one broker's log directories."""

    def __init__(
        self,
        log_dirs: str | Sequence[str],
        *,
        default_config: LogConfig | None = None,
        topic_config: Callable[[str], LogConfig] | None = None,
        clock: Clock = wall_clock_ms,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
        recovery_threads: int = DEFAULT_RECOVERY_THREADS,
        flush_timer: Callable[[float], None] | None = None,
    ) -> None:
        given = [log_dirs] if isinstance(log_dirs, str) else list(log_dirs)
        if not given:
            raise ValueError("a log manager needs at least one log directory")
        # Absolute, in the order given, each once: AlterReplicaLogDirs names them so.
        self.log_dirs: list[str] = list(dict.fromkeys(os.path.abspath(d) for d in given))
        self.data_dir = self.log_dirs[0]  # the first: where a single directory's logs are
        # Given to every log (Log.flush_timer): the seconds each flush's fsyncs took.
        self.flush_timer = flush_timer
        self.default_config = default_config or LogConfig()
        self._topic_config = topic_config
        self.clock = clock
        self.logs: dict[TopicPartition, Log] = {}
        # Which directory each log (and each future log) is in, and how many are in each.
        self._dir_of: dict[TopicPartition, str] = {}
        self._counts: Counter[str] = Counter()
        # Logs being moved (start_future ... finish_move): the copy, and the current
        # log's truncation count it was copied at (another means: start again).
        self.futures: dict[TopicPartition, Log] = {}
        self._future_dir_of: dict[TopicPartition, str] = {}
        self._copied_at: dict[TopicPartition, int] = {}
        # Where a partition's log goes when it is created (AlterReplicaLogDirs named a
        # directory before this broker had the replica).
        self._preferred: dict[TopicPartition, str] = {}
        # Moves a stop interrupted (their futures deleted at open): start them again.
        self.pending_moves: dict[TopicPartition, str] = {}
        # Each log's topic id (partition.metadata) once read or written.
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}
        self._lock_fds: dict[str, int] = {}
        self._max_map_entries = max_map_entries
        self.cleaners: dict[str, LogCleaner] = {}
        self.had_clean_shutdown = False  # every directory had one
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
        # The checkpoint writers (the duty thread, and a finished move on the caller's)
        # take turns: both write the same files.
        self._checkpoint_lock = threading.Lock()
        # The directories whose replication-offset-checkpoint holds entries: one without
        # replicated logs never gets the file (no extra fsyncs per checkpoint pass), and
        # one whose logs stopped being replicated gets it emptied once.
        self._hw_files_with_entries: set[str] = set()

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config else self.default_config

    # --- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(cls, log_dirs: str | Sequence[str], **kwargs: object) -> LogManager:
        """Lock the directories, then open and (where needed) recover every log in them."""
        self = cls(log_dirs, **kwargs)  # type: ignore[arg-type]
        try:
            for directory in self.log_dirs:
                os.makedirs(directory, exist_ok=True)
                self._acquire_lock(directory)
            self._open_logs()
        except BaseException:
            self._release_locks()
            raise
        return self

    def _acquire_lock(self, directory: str) -> None:
        path = os.path.join(directory, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LogDirLockedError(
                f"{directory} is in use by another process (pid {holder}); "
                "two brokers on one data directory would corrupt it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fds[directory] = fd

    def _release_locks(self) -> None:
        for fd in self._lock_fds.values():
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._lock_fds.clear()

    def _scan(self) -> dict[TopicPartition, tuple[str, str]]:
        """(log directory, path) of every partition log in the directories, after
        finishing what a stop interrupted: deletions (``-delete``: removed) and moves
        (``-future``: see the module's docstring)."""
        found: dict[TopicPartition, tuple[str, str]] = {}
        futures: dict[TopicPartition, tuple[str, str]] = {}
        for directory in self.log_dirs:
            for entry in sorted(os.scandir(directory), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(entry.path)  # a deletion a stop interrupted
                    continue
                future = parse_future_dir_name(entry.name)
                if future is not None:
                    if future in futures:  # two interrupted moves: the later is kept
                        shutil.rmtree(futures[future][1])
                    futures[future] = directory, entry.path
                    continue
                tp = parse_log_dir_name(entry.name)
                if tp is None:
                    continue
                if tp in found:
                    raise StorageError(
                        f"{entry.path} and {found[tp][1]} are both the log of {tp[0]}-"
                        f"{tp[1]}: remove the one that is not (another broker's directory "
                        "in log.dirs?)")
                found[tp] = directory, entry.path
        for tp, (directory, path) in futures.items():
            if tp in found:
                log.info("%s-%d: the move into %s was interrupted: it starts again", *tp,
                         directory)
                shutil.rmtree(path)
                self.pending_moves[tp] = directory
            else:
                # Interrupted inside the swap, after the current log was retired: the
                # future was complete and synced before that.
                final = os.path.join(directory, log_dir_name(*tp))
                os.replace(path, final)
                checkpoint.fsync_dir(directory)
                log.info("%s-%d: finished the move into %s a stop interrupted", *tp,
                         directory)
                found[tp] = directory, final
        return found

    def _open_logs(self) -> None:
        markers = {d: os.path.join(d, CLEAN_SHUTDOWN_FILE) for d in self.log_dirs}
        clean = {d: os.path.exists(m) for d, m in markers.items()}
        self.had_clean_shutdown = all(clean.values())
        # Never opened before: no marker, and no checkpoint (every open writes one).
        new = not any(clean.values()) and not any(
            os.path.exists(os.path.join(d, RECOVERY_POINT_FILE)) for d in self.log_dirs)
        found = self._scan()
        recovery: dict[str, dict[TopicPartition, int]] = {}
        starts: dict[str, dict[TopicPartition, int]] = {}
        hws: dict[str, dict[TopicPartition, int]] = {}
        for d in self.log_dirs:
            recovery[d] = checkpoint.read_checkpoint(os.path.join(d, RECOVERY_POINT_FILE))
            starts[d] = checkpoint.read_checkpoint(os.path.join(d, LOG_START_FILE))
            hws[d] = checkpoint.read_checkpoint(os.path.join(d, REPLICATION_OFFSET_FILE))
            if hws[d]:
                self._hw_files_with_entries.add(d)
        configs: dict[str, LogConfig] = {}  # one per topic, not one per partition
        for tp in found:
            if tp[0] not in configs:
                configs[tp[0]] = self.config_for(tp[0])
        items = sorted(found.items())

        def open_one(item: tuple[TopicPartition, tuple[str, str]]) -> Log:
            tp, (d, path) = item
            return Log.open(
                path,
                configs[tp[0]],
                log_start_offset=starts[d].get(tp, 0),
                recovery_point=recovery[d].get(tp, 0),
                clean_shutdown=clean[d],
                clock=self.clock,
                high_watermark=hws[d].get(tp),  # None: not replicated when last checkpointed
            )

        # One thread, clean stop or not. Recovery validates without syncing (see
        # Log.open), so opening is Python work on data the page cache holds after a
        # process crash, and threads only contend for the GIL: 10,000 recovering logs
        # opened in 2.5-2.9 s on one thread, 5.5-6.8 s on two and 6.9 s on eight
        # (in-process, same minutes; the pool paid when recovery made 3 fsyncs per log).
        # A cold cache after a machine crash would make it wait on reads, where threads
        # could help again: not measured. Kafka's num.recovery.threads.per.data.dir
        # defaults to 1 as well.
        opened = self._in_pool(open_one, items, threads=1)
        for (tp, (d, _)), result in zip(items, opened, strict=True):
            if isinstance(result, Exception):
                raise result
            self.logs[tp] = result
            self._place(tp, d)
        for lg in self.logs.values():
            self._watch(lg)  # e.g. recovered segments to sync, or flush.ms to apply
        for d in self.log_dirs:
            self.cleaners[d] = LogCleaner(d, clock=self.clock,
                                          max_map_entries=self._max_map_entries)
            # From here on a crash is unclean until close() writes the marker again.
            if clean[d]:
                os.unlink(markers[d])
                checkpoint.fsync_dir(d)
        self.write_checkpoints()
        log.info("opened %d logs in %s (%s)", len(self.logs), ", ".join(self.log_dirs),
                 "a new data directory" if new and not self.logs else
                 "clean shutdown before" if self.had_clean_shutdown else
                 "unclean shutdown before: logs recovered")

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown
        markers, release the locks. A future log is closed as it is (the next start
        deletes it and starts its move again)."""
        if not self._lock_fds:
            return
        try:
            self._close_deleted(everything=True)
            for future in self.futures.values():
                future.close()
            closed = self._in_pool(Log.close, list(self.logs.values()))
            for result in closed:
                if isinstance(result, Exception):
                    raise result
            if all(closed):
                self.write_checkpoints()
                for d in self.log_dirs:
                    fd = os.open(os.path.join(d, CLEAN_SHUTDOWN_FILE),
                                 os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
                    os.fsync(fd)
                    os.close(fd)
                    checkpoint.fsync_dir(d)
            else:
                log.error("%s: not every log flushed; the next start recovers them",
                          ", ".join(self.log_dirs))
        except OSError as exc:
            log.error("%s: could not record a clean shutdown: %s", ", ".join(self.log_dirs),
                      exc)
        finally:
            self._release_locks()

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

    def dir_of(self, topic: str, partition: int) -> str | None:
        """The log directory the partition's log is in (None: no log here)."""
        return self._dir_of.get((topic, partition))

    def _place(self, tp: TopicPartition, directory: str) -> None:
        self._dir_of[tp] = directory
        self._counts[directory] += 1

    def _unplace(self, tp: TopicPartition) -> str | None:
        directory = self._dir_of.pop(tp, None)
        if directory is not None:
            self._counts[directory] -= 1
        return directory

    def check_dir(self, directory: str) -> str:
        """``directory`` as one of the log directories (absolute), or LogDirNotFoundError
        (Kafka's LOG_DIR_NOT_FOUND: the path must be one of log.dirs)."""
        if directory not in self.log_dirs:
            raise LogDirNotFoundError(f"Log dir {directory} is not found in the config.")
        return directory

    def prefer_dir(self, topic: str, partition: int, directory: str) -> None:
        """Create the partition's log in ``directory`` when it is created here (Kafka's
        preferred log dir: AlterReplicaLogDirs before this broker has the replica)."""
        self._preferred[(topic, partition)] = self.check_dir(directory)

    def _dir_for_new_log(self, tp: TopicPartition) -> str:
        """Kafka's choice: the preferred directory, else the one with the fewest
        partition logs (and logs being moved in), the first listed on a tie."""
        preferred = self._preferred.pop(tp, None)
        if preferred is not None:
            return preferred
        if len(self.log_dirs) == 1:
            return self.data_dir
        return min(self.log_dirs, key=lambda d: self._counts[d])

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
            directory = self._dir_for_new_log(tp)
            path = os.path.join(directory, log_dir_name(topic, partition))
            # A directory made just now holds nothing to recover: opening it as after a
            # clean stop skips validating (and fsyncing) its empty first segment, which
            # made creating 10,000 partitions cost 10,000 extra fsyncs.
            new = not os.path.exists(path)
            lg = Log.open(path, config or self.config_for(topic), clock=self.clock,
                          clean_shutdown=new)
            if topic_id is not None:
                partition_metadata.write(path, topic_id)
                self._topic_ids[tp] = topic_id
            checkpoint.fsync_dir(directory)
            self.logs[tp] = lg
            self._place(tp, directory)
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
        """Remove a partition's log (and a move of it under way): renamed
        ``<dir>.<id>-delete`` first (atomic, so a crash cannot resurrect half of it),
        then removed."""
        tp = (topic, partition)
        self.abort_move(topic, partition)
        self._preferred.pop(tp, None)
        lg = self.logs.pop(tp, None)
        self._topic_ids.pop(tp, None)
        directory = self._unplace(tp)
        if lg is None or directory is None:
            return False
        self._retire(lg, directory)
        if directory in self.cleaners:
            self.cleaners[directory].forget(tp)
        return True

    def _retire(self, lg: Log, directory: str) -> None:
        """Take ``lg`` out of service and remove its directory, keeping its descriptors
        open for ``file.delete.delay.ms``: a fetch may hold a region of them, and a
        closed descriptor's number could be reused by another file before its sendfile
        runs."""
        target = f"{lg.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        with lg.lock:
            lg.closed = True
            lg.flush_watcher = None
            lg.leader_epochs.close()  # its directory is about to move and go
            os.replace(lg.directory, target)
        with self._flush_lock:
            self._flush_entry.pop(lg, None)  # its heap entry, if any, is skipped
        checkpoint.fsync_dir(directory)
        shutil.rmtree(target)
        self._deleted.append((self.clock() + lg.config.file_delete_delay_ms, lg))

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

    # --- moving a log to another directory (log_moves.py) ----------------------------------

    future_dir_of = log_moves.future_dir_of
    start_future = log_moves.start_future
    copy_to_future = log_moves.copy_to_future
    finish_move = log_moves.finish_move
    abort_move = log_moves.abort_move

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
        """One compaction pass over the logs whose dirty ratio calls for it, each
        directory's by its own cleaner (its progress is in that directory)."""
        assert self.cleaners, "the manager is not open"
        by_dir: dict[str, list[tuple[TopicPartition, Log]]] = {d: [] for d in self.log_dirs}
        for tp, lg in list(self.logs.items()):
            directory = self._dir_of.get(tp)
            if directory is not None and not lg.closed:
                by_dir[directory].append((tp, lg))
        results: list[tuple[TopicPartition, CleanResult]] = []
        for directory, logs in by_dir.items():
            if logs:
                results += self.cleaners[directory].clean_once(logs, now)
        return results

    def write_checkpoints(self) -> None:
        """Write the recovery points and log starts of every log, and the high
        watermarks of the replicated ones, in each log directory for its logs."""
        with self._checkpoint_lock:
            by_dir: dict[str, list[tuple[TopicPartition, Log]]] = {
                d: [] for d in self.log_dirs}
            # A snapshot: the request path may add logs meanwhile.
            for tp, lg in list(self.logs.items()):
                directory = self._dir_of.get(tp)
                if directory is not None:
                    by_dir[directory].append((tp, lg))
            for directory, logs in by_dir.items():
                self._write_checkpoints(directory, logs)

    def _write_checkpoints(self, directory: str,
                           logs: list[tuple[TopicPartition, Log]]) -> None:
        checkpoint.write_checkpoint(
            os.path.join(directory, RECOVERY_POINT_FILE),
            {tp: lg.recovery_point for tp, lg in logs},
        )
        checkpoint.write_checkpoint(
            os.path.join(directory, LOG_START_FILE),
            {tp: lg.log_start_offset for tp, lg in logs},
        )
        hws = {tp: lg.high_watermark for tp, lg in logs if lg.replicated}
        if hws or directory in self._hw_files_with_entries:
            checkpoint.write_checkpoint(
                os.path.join(directory, REPLICATION_OFFSET_FILE), hws)
            if hws:
                self._hw_files_with_entries.add(directory)
            else:
                self._hw_files_with_entries.discard(directory)
