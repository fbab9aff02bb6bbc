"""Sparse offset and time indexes of one segment, in Kafka's file formats.

- ``.index``: 8-byte entries (relative offset int32, file position int32), big-endian.
- ``.timeindex``: 12-byte entries (timestamp int64, relative offset int32), big-endian.

An entry is added every ``index.interval.bytes`` of log (KIP/Kafka default 4096). Unlike
Kafka, which indexes a batch's last offset, an offset entry here names the *base* offset
of the batch that starts at its position: a lookup then lands on the batch holding the
target instead of the one before it. Time entries hold (largest timestamp so far, base
offset of the batch that reached it).

Entries live in two ``array`` columns and are searched with ``bisect`` (O(log n)).
Indexes are derived data: the active segment's entries are written to disk at flush,
roll and close (where Kafka would sync its memory map); after an unclean stop they are
rebuilt from the log from the recovery point on. Inactive segments load theirs lazily,
on the first lookup, so opening thousands of partitions reads no index files.
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
from abc import ABC, abstractmethod
from array import array

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_SWAP = sys.byteorder == "little"


class IndexCorruptError(Exception):
    """An index file failed its sanity check; the caller rebuilds it from the log."""


class _SparseIndex(ABC):
    """Shared bookkeeping: lazy load, pending entries, flush and truncation."""

    entry_size: int

    def __init__(self, path: str, base_offset: int, *, new: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self._loaded = new
        self._persisted = 0  # entries already in the file
        self._dirty_file = False  # the file holds entries that are no longer valid
        if new:
            self._reset_columns()
            self._truncate_file(0)

    @classmethod
    def from_bytes(cls, name: str, base_offset: int, data: bytes) -> _SparseIndex:
        """An index read from bytes held elsewhere (a remote segment's, in the remote
        tier), with no file: for lookups only. ``name`` names it in errors."""
        index = cls.__new__(cls)
        index.path = name
        index.base_offset = base_offset
        index._loaded = True
        index._persisted = 0
        index._dirty_file = False
        index._reset_columns()
        index._load_bytes(data)
        return index

    # Subclasses own their columns.
    @abstractmethod
    def _reset_columns(self) -> None:
        """Start with no entries."""

    @abstractmethod
    def _load_bytes(self, data: bytes) -> None:
        """Fill the columns from the file's bytes."""

    @abstractmethod
    def _entry_bytes(self, start: int) -> bytes:
        """The file bytes of entries ``start`` onwards."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of entries."""

    @abstractmethod
    def _truncate_columns(self, keep: int) -> None:
        """Keep the first ``keep`` entries."""

    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        if len(data) % self.entry_size:
            raise IndexCorruptError(
                f"{self.path} is {len(data)} bytes, not a multiple of {self.entry_size}"
            )
        self._reset_columns()
        self._load_bytes(data)
        self._persisted = len(self)
        self._loaded = True

    def _last_on_disk(self) -> bytes | None:
        """The last entry's bytes, read from the file without loading the rest."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            if size % self.entry_size:
                raise IndexCorruptError(
                    f"{self.path} is {size} bytes, not a multiple of {self.entry_size}"
                )
            if not size:
                return None
            return os.pread(fd, self.entry_size, size - self.entry_size)
        finally:
            os.close(fd)

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self._reset_columns()
        self._loaded = True
        self._persisted = 0
        self._truncate_file(0)

    def flush(self, fsync: bool = True) -> None:
        """Write entries not yet on disk; optionally fsync them."""
        if not self._loaded:
            return
        if self._persisted == len(self) and not self._dirty_file:
            return
        if self._dirty_file:
            self._truncate_file(self._persisted)
            self._dirty_file = False
        data = self._entry_bytes(self._persisted)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            if data:
                os.write(fd, data)
            if fsync:
                os.fsync(fd)
        except OSError:
            self._dirty_file = True  # part may be written: cut back before the next try
            raise
        finally:
            os.close(fd)
        self._persisted = len(self)

    def _truncate_entries(self, keep: int) -> None:
        self._truncate_columns(keep)
        if self._persisted > keep:
            self._persisted = keep
            self._dirty_file = True

    def _truncate_file(self, entries: int) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, entries * self.entry_size)
        finally:
            os.close(fd)

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path


class OffsetIndex(_SparseIndex):
    """Maps batch base offsets to file positions."""

    entry_size = _OFFSET_ENTRY.size

    def _reset_columns(self) -> None:
        self.offsets = array("i")  # relative to base_offset
        self.positions = array("i")

    def _load_bytes(self, data: bytes) -> None:
        flat = array("i", data)
        if _SWAP:
            flat.byteswap()
        self.offsets = flat[0::2]
        self.positions = flat[1::2]
        n = len(self.offsets)
        if n and (self.offsets[0] < 0 or any(
            self.offsets[i] >= self.offsets[i + 1] for i in range(max(0, n - 2), n - 1)
        )):
            raise IndexCorruptError(f"{self.path} has entries out of order")

    def _entry_bytes(self, start: int) -> bytes:
        flat = array("i", bytes(8 * (len(self.offsets) - start)))
        flat[0::2] = self.offsets[start:]
        flat[1::2] = self.positions[start:]
        if _SWAP:
            flat.byteswap()
        return flat.tobytes()

    def __len__(self) -> int:
        return len(self.offsets)

    def _truncate_columns(self, keep: int) -> None:
        del self.offsets[keep:]
        del self.positions[keep:]

    def append(self, offset: int, position: int) -> None:
        self.ensure_loaded()
        self.offsets.append(offset - self.base_offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``offset``, else (base, 0)."""
        self.ensure_loaded()
        i = bisect.bisect_right(self.offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def floor_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before file ``position``."""
        self.ensure_loaded()
        i = bisect.bisect_right(self.positions, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def last(self) -> tuple[int, int]:
        """(offset, position) of the last entry, else (base, 0); reads only that entry
        when the index is not loaded yet."""
        if not self._loaded:
            raw = self._last_on_disk()
            if raw is None:
                return self.base_offset, 0
            rel, position = _OFFSET_ENTRY.unpack(raw)
            return self.base_offset + rel, position
        if not self.offsets:
            return self.base_offset, 0
        return self.base_offset + self.offsets[-1], self.positions[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        self.ensure_loaded()
        self._truncate_entries(bisect.bisect_left(self.offsets, offset - self.base_offset))

    def check_against(self, log_size: int) -> None:
        """Kafka's sanity check: the last entry must lie inside the log file."""
        offset, position = self.last()
        if position and (position >= log_size or position < 0 or offset < self.base_offset):
            raise IndexCorruptError(f"{self.path} points past the end of its log")


class TimeIndex(_SparseIndex):
    """Maps the largest timestamp seen so far to the base offset of the batch that had it."""

    entry_size = _TIME_ENTRY.size

    def _reset_columns(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("i")

    def _load_bytes(self, data: bytes) -> None:
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            self.timestamps.append(ts)
            self.offsets.append(rel)

    def _entry_bytes(self, start: int) -> bytes:
        return b"".join(
            _TIME_ENTRY.pack(self.timestamps[i], self.offsets[i])
            for i in range(start, len(self.timestamps))
        )

    def __len__(self) -> int:
        return len(self.timestamps)

    def _truncate_columns(self, keep: int) -> None:
        del self.timestamps[keep:]
        del self.offsets[keep:]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only when the timestamp moves forward (entries stay sorted)."""
        self.ensure_loaded()
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset - self.base_offset)

    def start_offset_for(self, timestamp: int) -> int:
        """An offset from which to scan for the first batch with max timestamp >= target:
        every batch before the returned offset is known to be older than ``timestamp``."""
        self.ensure_loaded()
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self.offsets[i]

    def last(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, if any."""
        if not self._loaded:
            raw = self._last_on_disk()
            if raw is None:
                return None
            ts, rel = _TIME_ENTRY.unpack(raw)
            return ts, self.base_offset + rel
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.base_offset + self.offsets[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        self.ensure_loaded()
        rel = offset - self.base_offset
        keep = len(self.offsets)
        while keep and self.offsets[keep - 1] >= rel:
            keep -= 1
        self._truncate_entries(keep)
