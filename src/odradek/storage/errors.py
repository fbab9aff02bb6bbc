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
