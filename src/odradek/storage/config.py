"""Per-log configuration under Kafka's topic-level config names and defaults.

Every setting the log honours is listed once in ``_SPECS`` with its Kafka name, type and
default (Kafka's ``LogConfig``/``TopicConfig``), so tools and users can use the names they
know (``segment.bytes``, ``retention.ms``, ``cleanup.policy``, ...). Unknown keys and
ill-typed values are refused with a message naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
WEEK_MS = 7 * 24 * 3600 * 1000
DAY_MS = 24 * 3600 * 1000

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")


def _long(minimum: int) -> Callable[[str, Any], int]:
    def parse(name: str, raw: Any) -> int:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{name} must be an integer, got {raw!r}") from None
        if isinstance(raw, float) and raw != value:
            raise InvalidConfigError(f"{name} must be an integer, got {raw!r}")
        if not minimum <= value <= LONG_MAX:
            raise InvalidConfigError(f"{name} must be at least {minimum}, got {value}")
        return value

    return parse


def _bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfigError(f"{name} must be true or false, got {raw!r}")


def _ratio(name: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{name} must be a number, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise InvalidConfigError(f"{name} must be between 0 and 1, got {value}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(name: str, raw: Any) -> str:
        value = str(raw).replace(" ", "")
        if value == "delete,compact":
            value = "compact,delete"
        if value not in options:
            raise InvalidConfigError(f"{name} must be one of {', '.join(options)}, got {raw!r}")
        return value

    return parse


def _throttled_replicas(name: str, raw: Any) -> str:
    """Kafka's ``*.replication.throttled.replicas``: "" (none), "*" (every replica) or
    "partition:broker,..." pairs. Normalised: spaces gone."""
    text = str(raw).replace(" ", "")
    if text in ("", "*"):
        return text
    for item in text.split(","):
        partition, sep, broker = item.partition(":")
        if not (sep and partition.isdigit() and broker.isdigit()):
            raise InvalidConfigError(f"{name} must be '*' or a list of partition:broker "
                                     f"pairs, got {raw!r}")
    return text


# Kafka name -> (attribute, parser). Defaults live on the dataclass below.
_SPECS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "segment.bytes": ("segment_bytes", _long(14)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.index.bytes": ("segment_index_bytes", _long(8)),
    "index.interval.bytes": ("index_interval_bytes", _long(0)),
    "flush.messages": ("flush_messages", _long(1)),
    "flush.ms": ("flush_ms", _long(0)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", _long(-1)),
    "cleanup.policy": ("cleanup_policy", _choice(CLEANUP_POLICIES)),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1)),
    "max.message.bytes": ("max_message_bytes", _long(0)),
    "message.timestamp.type": ("message_timestamp_type", _choice(TIMESTAMP_TYPES)),
    "compression.type": ("compression_type", _choice(COMPRESSION_TYPES)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long(0)),
    # Replication's topic-level settings: the log itself ignores them; the replica
    # manager and the controller read them from the topic's LogConfig (as Kafka's
    # LogConfig carries them too).
    "min.insync.replicas": ("min_insync_replicas", _long(1)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    # Which replicas a reassignment's replication throttle applies to (KIP-73), on the
    # leader's side and on the follower's: read by the replica manager.
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas",
                                              _throttled_replicas),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas",
                                                _throttled_replicas),
    # Tiered storage (KIP-405): whether rolled segments go to the remote tier, how much
    # stays on the local disk (-2: as much as retention.ms/bytes keeps), and the 4.x
    # switches that stop uploads or, with remote.storage.enable turned off, delete the
    # remote copy (KIP-950). Read by the remote log manager and the local retention.
    "remote.storage.enable": ("remote_storage_enable", _bool),
    "local.retention.ms": ("local_retention_ms", _long(-2)),
    "local.retention.bytes": ("local_retention_bytes", _long(-2)),
    "remote.log.copy.disable": ("remote_log_copy_disable", _bool),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", _bool),
}


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings one partition log honours; defaults are Kafka's."""

    segment_bytes: int = 1024 * 1024 * 1024  # roll a new segment file at 1 GiB
    segment_ms: int = WEEK_MS  # ... or when the first batch is a week old
    segment_index_bytes: int = 10 * 1024 * 1024  # ... or when the offset index is full
    index_interval_bytes: int = 4096  # one sparse index entry per 4 KiB of log
    flush_messages: int = LONG_MAX  # fsync after N messages: never, the page cache
    flush_ms: int = LONG_MAX  # fsync after T ms: never (see docs/operations.md)
    retention_ms: int = WEEK_MS  # delete segments older than 7 days; -1 = forever
    retention_bytes: int = -1  # size cap per partition; -1 = none
    cleanup_policy: str = "delete"
    delete_retention_ms: int = DAY_MS  # tombstones stay a day after compaction
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588  # Kafka's default: 1 MiB + record batch overhead
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60_000  # deleted files stay open this long for readers
    min_insync_replicas: int = 1  # acks=all needs this many in-sync replicas
    unclean_leader_election_enable: bool = False  # never elect outside the ISR
    leader_replication_throttled_replicas: str = ""  # none throttled
    follower_replication_throttled_replicas: str = ""
    remote_storage_enable: bool = False  # copy rolled segments to the remote tier
    local_retention_ms: int = -2  # local tier's time retention; -2 = retention.ms
    local_retention_bytes: int = -2  # local tier's size retention; -2 = retention.bytes
    remote_log_copy_disable: bool = False  # stop uploading; remote reads go on
    remote_log_delete_on_disable: bool = False  # needed to turn remote.storage.enable off

    @classmethod
    def from_kafka(cls, settings: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka-named settings over ``base`` (or the defaults)."""
        changes = {}
        for name, raw in settings.items():
            spec = _SPECS.get(name)
            if spec is None:
                raise InvalidConfigError(f"unknown topic config {name!r}")
            attr, parse = spec
            changes[attr] = parse(name, raw)
        config = dataclasses.replace(base or cls(), **changes)
        if config.remote_storage_enable:
            config._check_tiered()
        return config

    def _check_tiered(self) -> None:
        """Kafka's rules for a tiered topic (LogConfig.validateRemoteStorage*)."""
        if self.compacts:
            raise InvalidConfigError(
                "remote.storage.enable cannot be true for a compacted topic "
                f"(cleanup.policy={self.cleanup_policy})")
        for local, total, what in ((self.local_retention_ms, self.retention_ms, "ms"),
                                   (self.local_retention_bytes, self.retention_bytes,
                                    "bytes")):
            if local == -1 and total != -1:
                raise InvalidConfigError(
                    f"local.retention.{what}=-1 keeps everything locally, but "
                    f"retention.{what}={total} deletes: set it to at most {total}")
            if local >= 0 and total >= 0 and local > total:
                raise InvalidConfigError(
                    f"local.retention.{what} ({local}) must not exceed "
                    f"retention.{what} ({total})")

    def to_kafka(self) -> dict[str, str]:
        """Every setting under its Kafka name, as strings (DescribeConfigs' form)."""
        return {name: _text(getattr(self, attr)) for name, (attr, _) in _SPECS.items()}

    @staticmethod
    def names() -> list[str]:
        return list(_SPECS)

    @property
    def deletes(self) -> bool:
        """Whether retention by time/size applies (``delete`` in the cleanup policy)."""
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def local_retention(self) -> tuple[int, int]:
        """(ms, bytes) the local tier keeps of a tiered log: local.retention.*, where
        -2 stands for the total retention.ms/bytes (Kafka's rule)."""
        ms = self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms
        size = (self.retention_bytes if self.local_retention_bytes == -2
                else self.local_retention_bytes)
        return ms, size
