"""What the broker's log lines look like and which loggers speak (issue 19).

- ``log.format``: ``text`` (the default: ``LEVEL logger: message``) or ``json``, one JSON
  object a line with ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``,
  ``message``, the context fields the call passed with ``extra=`` (``topic``,
  ``partition``, ``peer``, ``listener``, ``client_id``, ``leader_epoch``, ``isr``, ...),
  and ``exception`` (the formatted traceback) when there is one. For log shippers that
  parse JSON lines (Loki, Elasticsearch, Cloud Logging) without a grok pattern.
- ``log.level``: the level of the broker's own loggers (``odradek.*``; INFO by default;
  other libraries' stay at WARNING).
- ``log.level.<logger>``: one logger's level by its name, whatever its library's
  (``log.level.odradek.server.replication.fetcher=DEBUG``, ``log.level.kazoo=INFO``).

Level names are log4j's (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF, as Kafka's
log4j.properties take them) or Python's (WARNING, CRITICAL); TRACE is DEBUG here.
``server/settings.py`` refuses any other name at start-up, naming the setting.

Standard library ``logging`` only: a Formatter subclass and ``json.dumps``; no logging
library is worth a dependency for one line format.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.server.config import BrokerConfig

# Level names the settings take -> logging's levels. OFF: above anything logged.
LEVELS: dict[str, int] = {
    "TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
    "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL, "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10,
}
FORMATS = ("text", "json")
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"

# A LogRecord's own attributes: whatever else a record has came from ``extra=``.
_RECORD_FIELDS = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the ``extra=`` context
    fields, and the traceback as ``exception``. Values JSON cannot hold are written as
    their ``str`` (a frozenset ISR as a list would be nicer; callers pass lists)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and not key.startswith("_") and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure_logging(config: BrokerConfig) -> None:
    """Apply ``log.format``, ``log.level`` and ``log.level.<logger>`` to the process's
    logging (``odradek serve``: the root logger's stderr handler is set up already)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.WARNING, format=TEXT_FORMAT)
    if config["log.format"] == "json":
        formatter = JsonFormatter()
        for handler in root.handlers:
            handler.setFormatter(formatter)
        # What would otherwise reach stderr as bare text goes through logging too, so
        # every line stays one JSON object: warnings, and uncaught exceptions (a thread's
        # or the main one's) as one record with its traceback.
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread
    logging.getLogger("odradek").setLevel(LEVELS[config["log.level"]])
    for name, level in config.logger_levels.items():
        logging.getLogger(name).setLevel(LEVELS[level])


def _log_uncaught(kind: type[BaseException], exc: BaseException,
                  tb: TracebackType | None) -> None:
    logging.getLogger("odradek").critical("uncaught exception", exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or args.exc_type is SystemExit:
        return
    logging.getLogger("odradek").error(
        "uncaught exception in thread %s", args.thread.name if args.thread else "?",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
