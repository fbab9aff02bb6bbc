"""Typed storage errors; the wire layer maps each to one Kafka error code."""

from __future__ import annotations


class StorageError(Exception):
    """Base of the errors the log raises about its own state."""

    kafka_error = "KAFKA_STORAGE_ERROR"


class OffsetOutOfRangeError(StorageError):
    """A read below the log start offset or past the log end (OFFSET_OUT_OF_RANGE, 1)."""

    kafka_error = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log's range "
            f"[{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class OffsetMovedToTieredStorageError(OffsetOutOfRangeError):
    """A read of a tiered log below its local log start: the offset is only in the
    remote tier (OFFSET_MOVED_TO_TIERED_STORAGE, 109, as a follower is answered;
    a consumer's fetch is served from the remote tier instead)."""

    kafka_error = "OFFSET_MOVED_TO_TIERED_STORAGE"

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int,
                 local_log_start_offset: int) -> None:
        super().__init__(offset, log_start_offset, log_end_offset)
        self.local_log_start_offset = local_log_start_offset


class RemoteStorageError(StorageError):
    """The remote tier failed a read or write: unreachable, refusing, or holding a
    missing or corrupt object. Answered KAFKA_STORAGE_ERROR (56), which every client
    retries (Kafka answers UNKNOWN_SERVER_ERROR, which clients do not retry alike)."""

    kafka_error = "KAFKA_STORAGE_ERROR"


class KafkaStorageError(StorageError):
    """A write or sync failed (disk full, I/O error): nothing of the append was kept
    (KAFKA_STORAGE_ERROR, 56)."""

    kafka_error = "KAFKA_STORAGE_ERROR"


class LogDirLockedError(StorageError):
    """Another process holds the data directory's lock file."""


class InvalidOffsetError(StorageError):
    """A follower append whose offsets do not continue the log (OFFSET_OUT_OF_RANGE)."""

    kafka_error = "OFFSET_OUT_OF_RANGE"


class InvalidConfigError(StorageError, ValueError):
    """A log config with an unknown key or an ill-typed value (INVALID_CONFIG, 40)."""

    kafka_error = "INVALID_CONFIG"


class LogDirNotFoundError(StorageError):
    """A path that is not one of the broker's log directories (LOG_DIR_NOT_FOUND, 57)."""

    kafka_error = "LOG_DIR_NOT_FOUND"
