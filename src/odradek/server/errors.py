"""Errors are typed where they arise and mapped to Kafka error codes once, here."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

log = logging.getLogger(__name__)


class InternalTopicAppendError(Exception):
    """Clients may read the internal topics but never write them (Kafka's
    ReplicaManager: "Cannot append to internal topic")."""

    kafka_error = "INVALID_TOPIC_EXCEPTION"


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an exception raised below the handler boundary.

    Storage, record and producer-state errors carry the Kafka name of their error in
    ``kafka_error``; anything else is a bug or an I/O failure: UNKNOWN_SERVER_ERROR,
    logged with its traceback.
    """
    name = getattr(exc, "kafka_error", None)
    if name is not None:
        try:
            return ErrorCode[name.lower()]
        except KeyError:
            pass
    log.error("unexpected error in a request handler", exc_info=exc)
    return ErrorCode.unknown_server_error


def message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
