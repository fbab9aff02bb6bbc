"""Typed errors for record data; the wire layer maps each to one Kafka error code."""

from __future__ import annotations


class RecordError(Exception):
    """Base of the errors about the content of record batches."""

    #: The Kafka error name the handler boundary answers with.
    kafka_error = "CORRUPT_MESSAGE"


class CorruptRecordError(RecordError):
    """Bytes that cannot be a valid batch: bad magic, size or CRC (CORRUPT_MESSAGE, 2)."""

    kafka_error = "CORRUPT_MESSAGE"


class InvalidRecordError(RecordError):
    """A well-formed batch that breaks the format's rules (INVALID_RECORD, 87)."""

    kafka_error = "INVALID_RECORD"


class RecordValidationError(InvalidRecordError):
    """Records of a batch refused one by one (Kafka's RecordValidationException, KIP-467):
    INVALID_RECORD for the whole batch, with ``record_errors``, each (index of the record
    in its batch, message), for the produce response's ``record_errors``."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class RecordTooLargeError(RecordError):
    """A batch larger than max.message.bytes (MESSAGE_TOO_LARGE, 10)."""

    kafka_error = "MESSAGE_TOO_LARGE"


class UnsupportedCompressionError(RecordError):
    """A codec id outside 0..4 (UNSUPPORTED_COMPRESSION_TYPE, 76)."""

    kafka_error = "UNSUPPORTED_COMPRESSION_TYPE"
