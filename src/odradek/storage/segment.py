"""One log segment: a ``.log`` file of whole record batches plus its two sparse indexes.

A segment is named by the offset of its first batch, zero-padded to 20 digits as Kafka
names them (``00000000000000368769.log``). It only ever grows at the end, except when
recovery cuts a torn tail or replication truncates it. It knows batches by their headers
and never decodes records; reads hand back file positions for ``os.sendfile``.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
from collections.abc import Callable, Iterator, Sequence

from odradek.records import batch as rb
from odradek.records.batch import BatchHeader
from odradek.records.errors import CorruptRecordError
from odradek.storage.errors import KafkaStorageError
from odradek.storage.index import IndexCorruptError, OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

log = logging.getLogger(__name__)

# Recovery reads the log in chunks of this size: large enough that the syscall cost per
# byte vanishes, small enough to bound the memory a recovery needs.
RECOVERY_CHUNK = 8 * 1024 * 1024
# Recent batches a segment remembers the positions of (LogSegment._tail_last): between
# this many and twice as many.
TAIL_KEEP = 256

# writev takes at most IOV_MAX (1024 on Linux) buffers per call.
IOV_MAX = 1024


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_base_offset(filename: str) -> int | None:
    stem = filename.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class LogSegment:
    """A segment file, its indexes and what the log needs to know of it in memory."""

    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int,
                 create: bool, suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = os.path.join(directory, segment_name(base_offset))
        self.log_path = stem + LOG_SUFFIX + suffix
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(self.log_path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.offset_index = OffsetIndex(stem + INDEX_SUFFIX + suffix, base_offset, new=create)
        self.time_index = TimeIndex(stem + TIME_INDEX_SUFFIX + suffix, base_offset, new=create)
        self.next_offset = base_offset  # one past the last offset held here
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.rolling_timestamp: int | None = None  # max timestamp of the first batch
        self._bytes_since_index = 0
        # The last offsets and positions of the batches appended most recently (up to
        # TAIL_KEEP, oldest first): where followers and consumers at the tail read, found
        # here with one header read instead of an index search and a walk of up to
        # index.interval.bytes of headers, one pread each.
        self._tail_last: list[int] = []
        self._tail_pos: list[int] = []
        self.closed = False

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size}, next={self.next_offset})"

    # --- reading headers ---------------------------------------------------------------

    def read_header(self, position: int) -> BatchHeader:
        data = os.pread(self.fd, rb.HEADER_SIZE, position)
        if len(data) < rb.HEADER_SIZE:
            raise CorruptRecordError(f"{self.log_path}: batch header cut short at {position}")
        header = rb.read_header(data)
        if header.magic != rb.MAGIC_V2 or header.batch_length < rb.HEADER_SIZE - 12:
            raise CorruptRecordError(f"{self.log_path}: no batch header at {position}")
        if position + header.size > self.size:
            raise CorruptRecordError(f"{self.log_path}: batch at {position} runs past the end")
        return header

    def headers_from(
        self, position: int, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position`` (a batch start) onwards."""
        end = self.size if end is None else end
        while position < end:
            header = self.read_header(position)
            yield position, header
            position += header.size

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    # --- appending ---------------------------------------------------------------------

    def append(self, buffers: Sequence[bytes | memoryview],
               batches: Sequence[tuple[int, BatchHeader]],
               before_commit: Callable[[], object] | None = None) -> None:
        """Write whole batches at the end. ``batches`` are (new base offset, header) in
        order. On any write error the file is cut back to where it was and
        KafkaStorageError is raised, so a failed append leaves no partial batch; the same
        happens if ``before_commit`` (a check that ran during the write) raises."""
        start = self.size
        try:
            _write_all(self.fd, buffers)
        except OSError as exc:
            self._undo_write(start)
            reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc
            raise KafkaStorageError(f"append to {self.log_path} failed: {reason}") from exc
        if before_commit is not None:
            try:
                before_commit()
            except BaseException:
                self._undo_write(start)
                raise
        position = start
        for base_offset, header in batches:
            self._track(position, base_offset, header)
            position += header.size
        self.size = position

    def _undo_write(self, size: int) -> None:
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:  # the log cannot be trusted any more
            raise KafkaStorageError(
                f"{self.log_path}: could not undo a failed write ({exc}); "
                "the log will be recovered at the next start"
            ) from exc

    def _track(self, position: int, base_offset: int, header: BatchHeader) -> None:
        """Update indexes and in-memory facts for a batch now at ``position``."""
        if self._bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self.rolling_timestamp is None:
            self.rolling_timestamp = header.max_timestamp
        self.next_offset = base_offset + header.last_offset_delta + 1
        tail_last = self._tail_last
        tail_last.append(self.next_offset - 1)
        self._tail_pos.append(position)
        if len(tail_last) > 2 * TAIL_KEEP:
            del tail_last[:TAIL_KEEP]
            del self._tail_pos[:TAIL_KEEP]

    # --- opening an existing segment ---------------------------------------------------

    def load(self) -> None:
        """Trust the file and its indexes (after a clean shutdown, or before the recovery
        point): check the indexes' sanity and read only the tail after the last entry.
        Raises IndexCorruptError or CorruptRecordError when the caller must recover."""
        if self.size > self.index_interval_bytes and not os.path.exists(self.offset_index.path):
            raise IndexCorruptError(f"{self.offset_index.path} is missing")
        self.offset_index.check_against(self.size)
        _, position = self.offset_index.last()
        last_time = self.time_index.last()
        if last_time is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time
        if self.size:
            self.rolling_timestamp = self.read_header(0).max_timestamp
        # Bytes since the last index entry: the batch at the entry and all after it.
        self._bytes_since_index = 0
        for _pos, header in self.headers_from(position):
            self._bytes_since_index += header.size
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset
            self.next_offset = header.next_offset

    def recover(self) -> int:
        """Validate every batch (CRC included), rebuild both indexes, and cut the file at
        the first torn or corrupt batch. Returns the number of bytes cut."""
        self.offset_index.reset()
        self.time_index.reset()
        self._tail_last, self._tail_pos = [], []
        self.next_offset = self.base_offset
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.rolling_timestamp = None
        self._bytes_since_index = 0
        position = 0
        valid_end = 0
        file_size = self.size
        self.size = 0
        while position < file_size:
            want = min(RECOVERY_CHUNK, file_size - position)
            chunk = os.pread(self.fd, want, position)
            pos = 0
            while pos < len(chunk):
                if len(chunk) - pos < rb.LOG_OVERHEAD_SIZE:
                    break
                length = rb.LOG_OVERHEAD.unpack_from(chunk, pos)[1]
                need = length + rb.LOG_OVERHEAD_SIZE
                if length < 0 or position + pos + need > file_size:
                    return self._cut(valid_end, file_size)
                if pos + need > len(chunk):
                    if pos == 0:  # a batch larger than the chunk: read it whole
                        chunk = os.pread(self.fd, need, position)
                        continue
                    break
                try:
                    header = rb.check_batch(chunk, pos, pos + need)
                except CorruptRecordError:
                    return self._cut(valid_end, file_size)
                if header.base_offset < self.next_offset:
                    return self._cut(valid_end, file_size)  # offsets must go forward
                self._track(position + pos, header.base_offset, header)
                pos += need
                valid_end = position + pos
                self.size = valid_end
            if pos == 0:
                return self._cut(valid_end, file_size)
            position += pos
        return 0

    def _cut(self, valid_end: int, file_size: int) -> int:
        os.ftruncate(self.fd, valid_end)
        self.size = valid_end
        return file_size - valid_end

    # --- lookups -----------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Load both indexes (lazily, on first use); one that fails its checks is rebuilt
        from the log rather than trusted."""
        if self.offset_index._loaded and self.time_index._loaded:
            return
        try:
            self.offset_index.ensure_loaded()
            self.time_index.ensure_loaded()
        except IndexCorruptError as exc:
            log.warning("%s; rebuilding the indexes of %s", exc, self.log_path)
            self.recover()
            self.offset_index.flush()
            self.time_index.flush()

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset``, with its position."""
        tail_last = self._tail_last
        if tail_last and offset > tail_last[0]:
            # Past the first recent batch: the one holding it is recent too (or none is).
            i = bisect.bisect_left(tail_last, offset)
            if i == len(tail_last):
                return None
            position = self._tail_pos[i]
            return position, self.read_header(position)
        self.ensure_indexes()
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.headers_from(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def position_of(self, offset: int) -> int:
        """File position of the first batch holding ``offset`` or later; size if none."""
        found = self.find(offset)
        return self.size if found is None else found[0]

    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool,
             found: tuple[int, BatchHeader] | None = None,
             ) -> tuple[int, int, BatchHeader, tuple[int, BatchHeader] | None] | None:
        """(position, length, first header, the batch after them) of whole batches from
        the one holding ``offset``, at most ``max_bytes`` unless ``min_one`` lets the
        first batch exceed it, and none at or past ``max_offset``.

        ``found`` is the (position, header) of the batch holding ``offset`` if the caller
        knows it (the log's read cursor), so the index is not searched. The batch after
        the returned ones is given as (position, header) when its header was read here
        (it did not fit the budget), else None."""
        if found is None:
            found = self.find(offset)
            if found is None:
                return None
        start, first = found
        limit_pos = self.size
        if max_offset is not None and max_offset < self.next_offset:
            if first.base_offset >= max_offset:
                return None
            limit_pos = self.position_of(max_offset)
        budget_end = min(start + max_bytes, limit_pos)
        if start + first.size > budget_end:
            if min_one and start + first.size <= limit_pos:
                return start, first.size, first, None
            return None
        # Jump close to the end with the index (entries sit on batch boundaries), then walk.
        _, pos = self.offset_index.floor_position(budget_end)
        # Every batch before an index position ends at or before it: all fit the budget.
        end = max(start + first.size, pos)
        for p, header in self.headers_from(end, limit_pos):
            if p + header.size > budget_end:
                return start, end - start, first, (p, header)
            end = p + header.size
        return start, end - start, first, None

    # --- changing ----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int | None:
        """Remove every batch whose last offset is >= ``offset`` (whole batches only).
        Returns the base offset of the first batch removed, None if none was."""
        found = self.find(offset)
        if found is None:
            return None
        position, header = found
        os.ftruncate(self.fd, position)
        self.size = position
        self._tail_last, self._tail_pos = [], []
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        # Recompute the in-memory facts from what is left (indexes + a short walk).
        self.next_offset = self.base_offset
        self.max_timestamp = rb.NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.rolling_timestamp = None
        self.load()
        return header.base_offset

    def sync_data(self) -> None:
        """fsync the log file only (safe beside appends on another thread)."""
        try:
            os.fdatasync(self.fd)
        except OSError as exc:
            raise KafkaStorageError(f"fsync of {self.log_path} failed: {exc}") from exc

    def flush(self) -> None:
        """fsync the log, then write and fsync the index entries not yet on disk."""
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise KafkaStorageError(f"fsync of {self.log_path} failed: {exc}") from exc
        try:
            self.offset_index.flush()
            self.time_index.flush()
        except OSError as exc:
            raise KafkaStorageError(
                f"writing the indexes of {self.log_path} failed: {exc}"
            ) from exc

    def close(self, *, flush_indexes: bool = True) -> None:
        """Close the file; a failure to write the indexes is logged, not raised: they
        are derived data, and a short or partial index file is rebuilt or read as is."""
        if self.closed:
            return
        try:
            if flush_indexes:
                self.offset_index.flush(fsync=False)
                self.time_index.flush(fsync=False)
        except OSError as exc:
            log.warning("%s: could not write its indexes at close: %s", self.log_path, exc)
        finally:
            os.close(self.fd)
            self.closed = True

    def paths(self) -> list[str]:
        return [self.log_path, self.offset_index.path, self.time_index.path]

    def rename_files(self, suffix: str) -> None:
        """Add ``suffix`` (".deleted") to every file; the open fd stays valid."""
        if os.path.exists(self.log_path):
            os.replace(self.log_path, self.log_path + suffix)
        self.log_path += suffix
        self.offset_index.rename(self.offset_index.path + suffix)
        self.time_index.rename(self.time_index.path + suffix)

    def delete_files(self) -> None:
        for path in self.paths():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _write_all(fd: int, buffers: Sequence[bytes | memoryview]) -> None:
    """writev every buffer; finish a short write (which regular files give only on
    errors such as a full disk) with plain writes, so that the error surfaces."""
    for start in range(0, len(buffers), IOV_MAX):
        part = buffers[start : start + IOV_MAX]
        want = sum(map(len, part))
        n = os.writev(fd, part)
        if n < want:
            rest = memoryview(b"".join(part))[n:]
            while rest:
                rest = rest[os.write(fd, rest):]
