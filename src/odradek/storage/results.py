"""What the partition log answers with: file regions and in-memory bytes of whole
batches, read results and append results. NamedTuples: the append and read paths make
one per call, and a tuple is several times cheaper to build than a frozen dataclass.
Importable from ``odradek.storage.log`` too, where they were defined before."""

from __future__ import annotations

import os
from typing import NamedTuple

from odradek.records.batch import BatchHeader
from odradek.storage.txn_index import AbortedTxn


class FileRegion(NamedTuple):
    """Bytes of whole batches in a segment file, to hand to ``os.sendfile``.

    The fd stays open at least ``file.delete.delay.ms`` after the segment leaves the log
    (retention, truncation, compaction), so a region can be sent after it was read."""

    fd: int
    position: int
    length: int

    def read(self) -> bytes:
        """Copy the bytes through Python (for tests and tools; the broker uses sendfile)."""
        return os.pread(self.fd, self.length, self.position)


class BytesRegion(NamedTuple):
    """Whole batches already in memory, where a ``FileRegion`` would name them in a file:
    a read of the remote tier (storage/remote/reader.py)."""

    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        return self.data


class ReadResult(NamedTuple):
    region: FileRegion | None  # None: nothing to return from this offset
    first_offset: int  # base offset of the first batch returned (or the requested offset)
    log_start_offset: int
    log_end_offset: int


class CommittedRead(NamedTuple):
    """A read_committed read: batches below the last stable offset, the LSO, and the
    aborted transactions overlapping [first offset returned, LSO)."""

    result: ReadResult
    last_stable_offset: int
    aborted: list[AbortedTxn]


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int  # largest timestamp appended (the broker's time for LogAppendTime)
    log_append_time: int  # -1 for CreateTime logs, as the Produce response wants
    record_count: int
    log_start_offset: int
    batches: tuple[BatchHeader, ...]  # as received
    duplicate: bool = False  # a producer's retry: nothing written, first offsets returned
