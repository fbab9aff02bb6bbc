"""Odradek's storage engine: Kafka-style partition logs on local files.

Segments of whole v2 record batches with sparse offset and time indexes, offsets
assigned on append, file regions for ``sendfile`` on read, flush policy, recovery after
an unclean stop, retention, compaction, the leader epochs and high watermark replication
needs, and the data directory that holds it all. Knows files and record batches, not
requests, sockets, topic metadata or other brokers.
"""

from odradek.storage.background import DutyIntervals, LogDuties
from odradek.storage.cleaner import CleanResult, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    InvalidConfigError,
    KafkaStorageError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    StorageError,
)
from odradek.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from odradek.storage.log import AppendInfo, FileRegion, Log, ReadResult
from odradek.storage.manager import LogManager

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "AppendInfo",
    "CleanResult",
    "DutyIntervals",
    "EpochEntry",
    "FileRegion",
    "InvalidConfigError",
    "KafkaStorageError",
    "LeaderEpochCache",
    "Log",
    "LogCleaner",
    "LogConfig",
    "LogDirLockedError",
    "LogDuties",
    "LogManager",
    "OffsetOutOfRangeError",
    "ReadResult",
    "StorageError",
]
