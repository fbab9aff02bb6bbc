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


class RecordTooLargeError(RecordError):
    """A batch larger than max.message.bytes (MESSAGE_TOO_LARGE, 10)."""

    kafka_error = "MESSAGE_TOO_LARGE"


class UnsupportedCompressionError(RecordError):
    """A codec id outside 0..4 (UNSUPPORTED_COMPRESSION_TYPE, 76)."""

    kafka_error = "UNSUPPORTED_COMPRESSION_TYPE"
