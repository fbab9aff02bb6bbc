"""The `odradek` data source's options: names, parsing and checks, before any broker is asked.

The names and meanings are those of Spark's built-in Kafka source and sink
(structured-streaming-kafka-integration), so a job ports by changing the format name. Spark
hands a Python data source its options with lower-cased names; every message here names an
option the way users spell it (`startingOffsets`, not `startingoffsets`).

Unlike Spark's Kafka source, which ignores options it does not know, an unknown option that
does not start with `kafka.` is an error here: a misspelled `startingOffset` would otherwise
silently read from the default position.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, overload

EARLIEST = -2  # Kafka's JSON offsets: -2 is "earliest", -1 is "latest"
LATEST = -1

# Spark's Kafka source reads options by these names (lower-cased when they reach Python).
_READ_NAMES = [
    "assign", "subscribe", "subscribePattern",
    "startingOffsets", "endingOffsets",
    "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "endingTimestamp", "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "minPartitions", "maxRecordsPerPartition",
    "failOnDataLoss", "includeHeaders", "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
    "reader",
]
_WRITE_NAMES = ["topic", "includeHeaders", "exactlyOnce", "transactionalIdPrefix"]
# Options Spark itself may add to a data source's (e.g. `path` from `.load(path)`).
_SPARK_NAMES = ["path", "checkpointLocation"]

# kafka.* settings Spark's Kafka source refuses, with its reasons: the source manages them.
_REFUSED_CONSUMER = {
    "kafka.auto.offset.reset": "set startingOffsets instead",
    "kafka.enable.auto.commit": "the source keeps its offsets in Spark's checkpoint",
    "kafka.key.deserializer": "keys are always read as binary: cast or decode them in Spark",
    "kafka.value.deserializer": "values are always read as binary: cast or decode them in Spark",
    "kafka.interceptor.classes": "Java interceptors do not exist for a Python client",
}
_REFUSED_PRODUCER = {
    "kafka.key.serializer": "keys are written as binary (or UTF-8 strings)",
    "kafka.value.serializer": "values are written as binary (or UTF-8 strings)",
    "kafka.interceptor.classes": "Java interceptors do not exist for a Python client",
}

# The Java clients' name for the bound on a metadata or offsets request; librdkafka has no
# such setting, so it is taken out of the client's configuration and used by the source.
API_TIMEOUT_OPTION = "kafka.default.api.timeout.ms"
DEFAULT_API_TIMEOUT_MS = 30_000  # an unreachable broker fails a query after this long
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs default
DEFAULT_MAX_TRIGGER_DELAY = "15m"  # Spark's default for maxTriggerDelay
# Spark's KafkaOffsetReader: the driver's metadata and offset requests are attempted this
# many times in all (fetchOffset.numRetries), this long apart (fetchOffset.retryIntervalMs);
# Spark's defaults. Each attempt itself rides over a leader change (client.Brokers).
DEFAULT_FETCH_OFFSET_ATTEMPTS = 3
DEFAULT_FETCH_OFFSET_INTERVAL_MS = 10
READERS = ("auto", "native", "librdkafka")  # option `reader`


class OptionError(ValueError):
    """An option of the `odradek` data source is missing, unknown or malformed."""


TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Starting:
    """Where reading starts (or ends): kind is earliest, latest, offsets or timestamps."""

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)  # kind == "offsets"
    timestamp: int | None = None  # kind == "timestamp": one for every partition
    timestamps: dict[TopicPartition, int] = field(default_factory=dict)  # "timestamps"
    option: str = ""  # the option it came from, for messages


@dataclass(frozen=True)
class Topics:
    """Which partitions to read: kind is assign, subscribe or pattern."""

    kind: str
    names: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern
    partitions: tuple[TopicPartition, ...] = ()  # assign

    @property
    def option(self) -> str:
        return {"assign": "assign", "subscribe": "subscribe",
                "pattern": "subscribePattern"}[self.kind]


@dataclass(frozen=True)
class ClientOptions:
    """What every reader and writer needs to reach the brokers."""

    bootstrap: str
    config: dict[str, str]  # librdkafka settings (the kafka.* options without the prefix)
    api_timeout_s: float


@dataclass(frozen=True)
class ReadOptions:
    client: ClientOptions
    topics: Topics
    starting: Starting
    ending: Starting
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_s: float
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    group_id: str
    poll_timeout_s: float
    timestamp_strategy: str  # startingOffsetsByTimestampStrategy: "error" or "latest"
    fetch_offset_attempts: int = DEFAULT_FETCH_OFFSET_ATTEMPTS  # fetchOffset.numRetries
    fetch_offset_interval_s: float = DEFAULT_FETCH_OFFSET_INTERVAL_MS / 1000
    # Not Spark's: which client reads the records on the executors (odradek.spark.fetcher):
    # native (Fetch requests decoded straight into Arrow), librdkafka, or auto (native
    # unless the kafka.* options ask for TLS or SASL, which only librdkafka speaks here).
    reader: str = "auto"


@dataclass(frozen=True)
class WriteOptions:
    client: ClientOptions
    topic: str | None
    # exactlyOnce: every write task is a Kafka transaction (odradek.spark.exactly_once).
    exactly_once: bool = False
    transactional_id_prefix: str | None = None  # transactionalIdPrefix
    # Set by the driver for each batch write (names its transactional ids).
    write_id: str = ""


def _canonical(names: list[str]) -> dict[str, str]:
    return {name.lower(): name for name in names}


def _check_names(options: Mapping[str, str], allowed: list[str], refused: dict[str, str],
                 what: str) -> None:
    known = _canonical(allowed + _SPARK_NAMES)
    for key in options:
        lower = key.lower()
        if lower.startswith("kafka."):
            if lower in refused:
                raise OptionError(f"option '{key}' is not supported by the odradek {what}: "
                                  f"{refused[lower]}")
            continue
        if lower in known:
            continue
        close = difflib.get_close_matches(lower, list(known), n=1, cutoff=0.75)
        hint = f" (did you mean '{known[close[0]]}'?)" if close else ""
        raise OptionError(
            f"unknown option '{key}' for the odradek {what}{hint}; the options are "
            f"{', '.join(sorted(n for n in allowed))} and kafka.* client settings")


def _client_options(options: Mapping[str, str], what: str) -> ClientOptions:
    bootstrap = options.get("kafka.bootstrap.servers")
    if not bootstrap or not str(bootstrap).strip():
        raise OptionError(f"option 'kafka.bootstrap.servers' is required by the odradek {what} "
                          "(host:port of one or more brokers, comma-separated)")
    config = {key.lower()[len("kafka."):]: str(value) for key, value in options.items()
              if key.lower().startswith("kafka.") and key.lower() != API_TIMEOUT_OPTION}
    timeout_ms = _positive_int(options, API_TIMEOUT_OPTION, DEFAULT_API_TIMEOUT_MS)
    return ClientOptions(str(bootstrap).strip(), config, timeout_ms / 1000)


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    return None if value is None else str(value)


def _int_option(options: Mapping[str, str], name: str, default: int | None, least: int,
                what: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = least - 1
    if value < least:
        raise OptionError(f"option '{name}' must be a {what} integer, got {raw!r}")
    return value


@overload
def _positive_int(options: Mapping[str, str], name: str, default: int) -> int: ...
@overload
def _positive_int(options: Mapping[str, str], name: str, default: None) -> int | None: ...
def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    return _int_option(options, name, default, 1, "positive")


def _non_negative_int(options: Mapping[str, str], name: str, default: int) -> int:
    value = _int_option(options, name, default, 0, "non-negative")
    assert value is not None
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return lowered == "true"


_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(text: str, name: str) -> float:
    """Spark's time strings (`15m`, `30s`, `500ms`; a bare number is milliseconds)."""
    match = _DURATION.match(text)
    if not match:
        raise OptionError(f"option '{name}' must be a duration such as 30s, 15m or 500ms, "
                          f"got {text!r}")
    return int(match.group(1)) * _UNIT_S[(match.group(2) or "ms").lower()]


def _json(options: Mapping[str, str], name: str) -> Any:
    raw = _get(options, name)
    try:
        return json.loads(raw or "")
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{name}' is not valid JSON ({exc.msg}): {raw!r}") from None


def _partition_map(value: Any, name: str, example: str) -> dict[TopicPartition, int]:
    """{"topic": {"0": 23, "1": -1}} -> {("topic", 0): 23, ("topic", 1): -1}."""
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise OptionError(f"option '{name}' must be a JSON object like {example}")
    result = {}
    for topic, partitions in value.items():
        for partition, number in partitions.items():
            try:
                key = (str(topic), int(partition))
            except ValueError:
                raise OptionError(f"option '{name}': partition {partition!r} of topic "
                                  f"{topic!r} is not a number") from None
            if not isinstance(number, int) or isinstance(number, bool):
                raise OptionError(f"option '{name}': {topic}-{partition} must map to an "
                                  f"integer, got {number!r}")
            result[key] = number
    return result


def _topics(options: Mapping[str, str]) -> Topics:
    given = [n for n in ("assign", "subscribe", "subscribePattern") if _get(options, n)]
    if not given:
        raise OptionError("one of the options 'subscribe', 'subscribePattern' or 'assign' is "
                          "required: which topics to read")
    if len(given) > 1:
        raise OptionError(f"only one of 'subscribe', 'subscribePattern' and 'assign' may be "
                          f"given, got {', '.join(given)}")
    name = given[0]
    raw = _get(options, name) or ""
    if name == "subscribe":
        names = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not names:
            raise OptionError(f"option 'subscribe' names no topic: {raw!r}")
        return Topics("subscribe", names=names)
    if name == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression "
                              f"({exc}): {raw!r}") from None
        return Topics("pattern", pattern=raw)
    value = _json(options, "assign")
    if not isinstance(value, dict) or not all(
            isinstance(v, list) and all(isinstance(p, int) for p in v) for v in value.values()):
        raise OptionError("option 'assign' must be a JSON object like "
                          '{"topicA": [0, 1], "topicB": [2, 4]}')
    partitions = tuple((str(t), int(p)) for t, ps in value.items() for p in ps)
    if not partitions:
        raise OptionError("option 'assign' names no partition")
    return Topics("assign", partitions=partitions)


def _position(options: Mapping[str, str], prefix: str, default: str) -> Starting:
    """startingOffsets / startingTimestamp / startingOffsetsByTimestamp (or the ending ones);
    Spark's precedence: ByTimestamp, then Timestamp, then Offsets."""
    by_ts = f"{prefix}OffsetsByTimestamp"
    one_ts = f"{prefix}Timestamp"
    offsets = f"{prefix}Offsets"
    if _get(options, by_ts) is not None:
        value = _partition_map(_json(options, by_ts), by_ts, '{"topicA": {"0": 1700000000000}}')
        return Starting("timestamps", timestamps=value, option=by_ts)
    if _get(options, one_ts) is not None:
        raw_ts = _get(options, one_ts) or ""
        try:
            ts = int(raw_ts.strip())
        except ValueError:
            raise OptionError(f"option '{one_ts}' must be milliseconds since the epoch, "
                              f"got {raw_ts!r}") from None
        return Starting("timestamp", timestamp=ts, option=one_ts)
    raw = _get(options, offsets)
    if raw is None:
        return Starting(default, option=offsets)
    lowered = raw.strip().lower()
    if lowered in ("earliest", "latest"):
        return Starting(lowered, option=offsets)
    if not raw.strip().startswith("{"):
        raise OptionError(f"option '{offsets}' must be earliest, latest or JSON like "
                          f'{{"topicA": {{"0": 23, "1": -1}}}}, got {raw!r}')
    value = _partition_map(_json(options, offsets), offsets,
                           '{"topicA": {"0": 23, "1": -2}}')
    return Starting("offsets", offsets=value, option=offsets)


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check and parse a read's options; raises OptionError naming the option at fault."""
    what = "streaming source" if streaming else "batch source"
    _check_names(options, _READ_NAMES, _REFUSED_CONSUMER, what)
    client = _client_options(options, what)
    topics = _topics(options)
    starting = _position(options, "starting", "latest" if streaming else "earliest")
    ending = _position(options, "ending", "latest")
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if _get(options, name) is not None:
                raise OptionError(f"option '{name}' is for batch reads only: a stream has "
                                  "no end (use trigger availableNow to stop at the end)")
    else:
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if _get(options, name) is not None:
                raise OptionError(f"option '{name}' is for streaming reads only")
        if starting.kind == "latest" or LATEST in starting.offsets.values():
            raise OptionError("option 'startingOffsets' cannot be latest (-1) in a batch read: "
                              "the result would always be empty")
        if ending.kind == "earliest" or EARLIEST in ending.offsets.values():
            raise OptionError("option 'endingOffsets' cannot be earliest (-2) in a batch read")
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest, "
                          f"got {strategy!r}")
    delay = parse_duration_s(_get(options, "maxTriggerDelay") or DEFAULT_MAX_TRIGGER_DELAY,
                             "maxTriggerDelay")
    max_rows = _positive_int(options, "maxOffsetsPerTrigger", None)
    min_rows = _positive_int(options, "minOffsetsPerTrigger", None)
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise OptionError(f"option 'minOffsetsPerTrigger' ({min_rows}) is larger than "
                          f"'maxOffsetsPerTrigger' ({max_rows})")
    prefix = _get(options, "groupIdPrefix") or "spark-kafka-source"
    reader = (_get(options, "reader") or "auto").strip().lower()
    if reader not in READERS:
        raise OptionError(f"option 'reader' must be one of {', '.join(READERS)}, got {reader!r}")
    poll_ms = _positive_int(options, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS)
    attempts = _positive_int(options, "fetchOffset.numRetries", DEFAULT_FETCH_OFFSET_ATTEMPTS)
    interval_ms = _non_negative_int(options, "fetchOffset.retryIntervalMs",
                                    DEFAULT_FETCH_OFFSET_INTERVAL_MS)
    return ReadOptions(
        client=client, topics=topics, starting=starting, ending=ending,
        max_offsets_per_trigger=max_rows, min_offsets_per_trigger=min_rows,
        max_trigger_delay_s=delay,
        min_partitions=_positive_int(options, "minPartitions", None),
        max_records_per_partition=_positive_int(options, "maxRecordsPerPartition", None),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        group_id=client.config.get("group.id") or f"{prefix}-odradek",
        poll_timeout_s=(poll_ms or DEFAULT_POLL_TIMEOUT_MS) / 1000,
        timestamp_strategy=strategy,
        fetch_offset_attempts=attempts or DEFAULT_FETCH_OFFSET_ATTEMPTS,
        fetch_offset_interval_s=interval_ms / 1000,
        reader=reader,
    )


def write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    what = "streaming sink" if streaming else "batch sink"
    _check_names(options, _WRITE_NAMES, _REFUSED_PRODUCER, what)
    client = _client_options(options, what)
    topic = _get(options, "topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    exactly_once = _bool(options, "exactlyOnce", False)
    prefix = _get(options, "transactionalIdPrefix")
    if prefix is not None and not (exactly_once and prefix.strip()):
        raise OptionError("option 'transactionalIdPrefix' needs exactlyOnce=true and a "
                          "non-empty value")
    if exactly_once and "transactional.id" in client.config:
        raise OptionError("option 'kafka.transactional.id' is not supported with "
                          "exactlyOnce=true: each write task has its own (set "
                          "transactionalIdPrefix to name them)")
    return WriteOptions(client, topic.strip() if topic else None, exactly_once,
                        prefix.strip() if prefix else None)


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Kafka's JSON form of a stream's position: {"topic": {"0": 42}}, sorted for stable logs."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def offsets_from_json(value: Mapping[str, Any]) -> dict[TopicPartition, int]:
    return {(str(t), int(p)): int(o) for t, ps in value.items() for p, o in ps.items()}
