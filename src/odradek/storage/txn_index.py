"""The aborted-transaction index of one segment (Kafka's ``TransactionIndex``, KIP-98).

One entry per transaction aborted by an ABORT marker written in the segment, in marker
order, in the file ``<base offset>.txnindex``; each entry is 34 bytes, big-endian::

    version int16 (0) | producer id int64 | first offset int64 | last offset int64
    | last stable offset int64

``first offset`` is the transaction's first batch, ``last offset`` the marker's offset and
``last stable offset`` the partition's LSO once the abort was written. A read_committed
fetch returns (producer id, first offset) of every aborted transaction that overlaps the
fetched range, so the client can drop their records.

The file is created with the first entry and is derived data: the log rebuilds missing
entries from the markers after its producer-state snapshot, and cuts entries past its end.
Entries are few, so they are kept in memory too; the file is only appended to, or
rewritten whole when a truncation removes entries.
"""

from __future__ import annotations

import contextlib
import os
import struct
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class TxnIndexCorruptError(Exception):
    pass


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(VERSION, *self)


class TransactionIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        if os.path.exists(path):
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            data = f.read()
        usable = len(data) - len(data) % ENTRY_SIZE  # a torn last entry is dropped
        entries = []
        for pos in range(0, usable, ENTRY_SIZE):
            version, *fields = _ENTRY.unpack_from(data, pos)
            if version != VERSION:
                raise TxnIndexCorruptError(f"{self.path}: entry version {version} at {pos}")
            entries.append(AbortedTxn(*fields))
        self.entries = entries
        if usable != len(data):
            self._rewrite()

    @property
    def last_offset(self) -> int:
        """The last marker offset indexed (-1 when empty)."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, entry: AbortedTxn) -> None:
        if entry.last_offset <= self.last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction at {entry.last_offset} is not after "
                f"{self.last_offset}"
            )
        with open(self.path, "ab") as f:
            f.write(entry.pack())
        self.entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._rewrite()

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Entries whose transaction overlaps offsets [start, end)."""
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]

    def flush(self) -> None:
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _rewrite(self) -> None:
        if not self.entries:
            self.delete()
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(e.pack() for e in self.entries))
        os.replace(tmp, self.path)

    def delete(self) -> None:
        self.entries = []
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
