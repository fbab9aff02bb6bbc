"""Dynamic broker configs and group configs: what AlterConfigs and
IncrementalAlterConfigs set on a BROKER resource (a broker id, or "" for the
cluster-wide default) or a GROUP resource (KIP-848 group configs), kept durably.

Broker configs. Kafka lets some broker settings change at run time
(DynamicBrokerConfig.AllDynamicConfigs, plus the replication throttle rates of
DynamicConfig.Broker). Of those, Odradek acts on the ones it has
(``settings.DYNAMIC_BROKER_SETTINGS``: the throttle rates and the broker-wide defaults of
topic configs, ``log.retention.ms`` & co., which reach open logs at once). Kafka's
dynamic configs Odradek has no machinery for (``STORED_ONLY``: thread pool sizes, SASL
Kerberos and login-refresh settings, connection limits, ...) are accepted, validated by
type, stored and described, and have no effect. Any other broker setting is refused as
Kafka refuses it: INVALID_REQUEST, "Cannot update these configs dynamically: Set(name)".
Precedence, highest first: this broker's dynamic value, the cluster default's, the
static one (file, environment, command line), the default.

Where they are kept: on a single node, the document ``broker_configs`` of the data
directory (server.security.documents), ``{"<broker id>" or "<default>": {name: value}}``; in a
cluster, ZooKeeper's ``/config/brokers/<id>`` and ``/config/brokers/<default>`` as
Kafka lays them out (server.cluster.broker_configs), watched by every broker.

Group configs (Kafka's GroupConfig): ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``, which the KIP-848 coordinator applies to that group's
members (the interval in each heartbeat response, the session on each heartbeat), and
the share-group ones (``share.*``), which the share-group coordinator and the share
partitions apply (server/share/). Values are checked as Kafka's GroupConfig.validate
checks them, against the broker's group.consumer.min/max.* and group.share.min/max.*
bounds, with its messages (INVALID_CONFIG). They are kept in
the document ``group_configs`` (a file on a single node, a znode in a cluster).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.server.security.documents import Document, DocumentError
from odradek.server.settings import DYNAMIC_BROKER_SETTINGS, SETTINGS, ConfigError

BROKER_DOCUMENT = "broker_configs"
GROUP_DOCUMENT = "group_configs"
DEFAULT_KEY = "<default>"  # the cluster-wide default's key, as Kafka's znode name

# ConfigDef.Type as DescribeConfigs v3+ reports it (KIP-569)
UNKNOWN_TYPE, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)


class DynamicConfigError(Exception):
    """An alteration that cannot be done; ``kafka_error`` names the Kafka error."""

    def __init__(self, kafka_error: str, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


@dataclass(frozen=True, slots=True)
class StoredOnly:
    """A Kafka dynamic broker config Odradek accepts and stores without acting on it."""

    type: int
    default: str | None
    per_broker: bool = False  # Kafka's PerBrokerConfigs: not at the cluster default


_NOT_ACTED = " (accepted and stored; Odradek does not act on it)"

# Kafka's dynamic broker configs (DynamicBrokerConfig.AllDynamicConfigs) that Odradek has
# no setting of, with Kafka's types and defaults.
STORED_ONLY: dict[str, StoredOnly] = {
    # DynamicThreadPool
    "num.io.threads": StoredOnly(INT, "8"),
    "num.recovery.threads.per.data.dir": StoredOnly(INT, "2"),
    "background.threads": StoredOnly(INT, "10"),
    # SocketServer / cluster-level listener configs
    "num.network.threads": StoredOnly(INT, "3"),
    "max.connections": StoredOnly(INT, "2147483647"),
    "max.connections.per.ip": StoredOnly(INT, "2147483647"),
    "max.connections.per.ip.overrides": StoredOnly(STRING, ""),
    "max.connection.creation.rate": StoredOnly(INT, "2147483647"),
    "metric.reporters": StoredOnly(LIST, ""),
    "producer.id.expiration.ms": StoredOnly(INT, "86400000"),
    # LogCleaner
    "log.cleaner.threads": StoredOnly(INT, "1"),
    "log.cleaner.io.max.bytes.per.second": StoredOnly(DOUBLE, "1.7976931348623157E308"),
    "log.cleaner.dedupe.buffer.size": StoredOnly(LONG, "134217728"),
    "log.cleaner.io.buffer.size": StoredOnly(INT, "524288"),
    "log.cleaner.io.buffer.load.factor": StoredOnly(DOUBLE, "0.9"),
    "log.cleaner.max.compaction.lag.ms": StoredOnly(LONG, "9223372036854775807"),
    # DynamicListenerConfig: SASL (per broker in Kafka)
    "sasl.kerberos.service.name": StoredOnly(STRING, None, True),
    "sasl.kerberos.kinit.cmd": StoredOnly(STRING, "/usr/bin/kinit", True),
    "sasl.kerberos.ticket.renew.window.factor": StoredOnly(DOUBLE, "0.8", True),
    "sasl.kerberos.ticket.renew.jitter": StoredOnly(DOUBLE, "0.05", True),
    "sasl.kerberos.min.time.before.relogin": StoredOnly(LONG, "60000", True),
    "sasl.kerberos.principal.to.local.rules": StoredOnly(LIST, "DEFAULT", True),
    "sasl.login.refresh.window.factor": StoredOnly(DOUBLE, "0.8", True),
    "sasl.login.refresh.window.jitter": StoredOnly(DOUBLE, "0.05", True),
    "sasl.login.refresh.min.period.seconds": StoredOnly(SHORT, "60", True),
    "sasl.login.refresh.buffer.seconds": StoredOnly(SHORT, "300", True),
}
STORED_ONLY_DOC = "a Kafka dynamic broker config" + _NOT_ACTED

_TYPE_NAMES = {INT: "INT", LONG: "LONG", SHORT: "SHORT", DOUBLE: "DOUBLE",
               BOOLEAN: "BOOLEAN"}
_INT_BOUNDS = {INT: 2**31, SHORT: 2**15, LONG: 2**63}


def _check_typed(name: str, value: str, config_type: int) -> None:
    """Kafka's ConfigDef.parseType: refuse a value that is not of the config's type."""
    text = value.strip()
    try:
        if config_type in _INT_BOUNDS:
            number = int(text)
            if not -_INT_BOUNDS[config_type] <= number < _INT_BOUNDS[config_type]:
                raise ValueError
        elif config_type == DOUBLE:
            float(text)
        elif config_type == BOOLEAN and text.lower() not in ("true", "false"):
            raise ValueError
    except ValueError:
        raise ConfigError(f"Invalid value {value} for configuration {name}: Not a number "
                          f"of type {_TYPE_NAMES[config_type]}" if config_type != BOOLEAN
                          else f"Invalid value {value} for configuration {name}: "
                          "Expected value to be either true or false") from None


def is_dynamic(name: str) -> bool:
    return name in DYNAMIC_BROKER_SETTINGS or name in STORED_ONLY


def validate_broker_configs(resource: str, configs: Mapping[str, str]) -> None:
    """Kafka's DynamicBrokerConfig.validate: every name dynamic (else INVALID_REQUEST,
    Kafka's message), per-broker ones not at the default, values of the right type."""
    fixed = sorted(n for n in configs if not is_dynamic(n))
    if fixed:
        raise DynamicConfigError(
            "INVALID_REQUEST",
            f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    if resource == "":
        per_broker = sorted(n for n in configs if n in STORED_ONLY
                            and STORED_ONLY[n].per_broker)
        if per_broker:
            raise DynamicConfigError(
                "INVALID_REQUEST", "Cannot update these configs at default cluster level, "
                f"broker id must be specified: Set({', '.join(per_broker)})")
    for name, value in configs.items():
        try:
            if name in STORED_ONLY:
                _check_typed(name, value, STORED_ONLY[name].type)
            else:
                SETTINGS[name].parse(name, value)
        except ConfigError as exc:
            # Kafka answers a dynamic value that fails validation with INVALID_REQUEST
            # (KAFKA-13609, ConfigAdminManager.validateBrokerConfigChange).
            raise DynamicConfigError("INVALID_REQUEST", str(exc)) from None


class BrokerConfigStore:
    """A single node's dynamic broker configs, in a document (see the module docstring);
    a cluster keeps them in ZooKeeper (``server.cluster.broker_configs``)."""

    def __init__(self, document: Document) -> None:
        self.document = document

    def get(self, resource: str) -> dict[str, str]:
        return dict(self.document.value.get(resource or DEFAULT_KEY, {}))

    async def set(self, resource: str, configs: Mapping[str, str]) -> None:
        key = resource or DEFAULT_KEY

        def change(content: dict[str, Any]) -> dict[str, Any]:
            if configs:
                content[key] = dict(configs)
            else:
                content.pop(key, None)
            return content

        try:
            await self.document.update(change)
        except DocumentError as exc:
            raise DynamicConfigError("UNKNOWN_SERVER_ERROR", str(exc)) from None


# --- group configs --------------------------------------------------------------------

CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
SHARE_RENEW_ACKNOWLEDGE_ENABLE = "share.renew.acknowledge.enable"
STREAMS_SESSION_TIMEOUT = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """One of Kafka's GroupConfig entries: its default (the broker setting that gives it,
    or a fixed value), its type, and the broker settings bounding it (``bounds``: the
    least and most a group may set), as GroupConfig.validate checks them."""

    default: str  # a broker setting's name, or the value itself when ``fixed``
    type: int
    doc: str
    bounds: tuple[str | None, str] | None = None  # None: no least but 0
    fixed: bool = False


GROUP_CONFIGS: dict[str, GroupConfigDef] = {
    CONSUMER_SESSION_TIMEOUT: GroupConfigDef(
        "group.consumer.session.timeout.ms", INT,
        "KIP-848: a member of this group silent this long is removed",
        ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms")),
    CONSUMER_HEARTBEAT_INTERVAL: GroupConfigDef(
        "group.consumer.heartbeat.interval.ms", INT,
        "KIP-848: how often this group's members heartbeat",
        ("group.consumer.min.heartbeat.interval.ms",
         "group.consumer.max.heartbeat.interval.ms")),
    SHARE_SESSION_TIMEOUT: GroupConfigDef(
        "group.share.session.timeout.ms", INT,
        "share groups: a member of this group silent this long is removed",
        ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms")),
    SHARE_HEARTBEAT_INTERVAL: GroupConfigDef(
        "group.share.heartbeat.interval.ms", INT,
        "share groups: how often this group's members heartbeat",
        ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms")),
    SHARE_RECORD_LOCK_DURATION: GroupConfigDef(
        "group.share.record.lock.duration.ms", INT,
        "share groups: how long a consumer holds the records it acquired",
        ("group.share.min.record.lock.duration.ms",
         "group.share.max.record.lock.duration.ms")),
    SHARE_DELIVERY_COUNT_LIMIT: GroupConfigDef(
        "group.share.delivery.count.limit", INT,
        "share groups: deliveries of a record before it is archived",
        ("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit")),
    SHARE_PARTITION_MAX_RECORD_LOCKS: GroupConfigDef(
        "group.share.partition.max.record.locks", INT,
        "share groups: records in flight per share partition",
        ("group.share.min.partition.max.record.locks",
         "group.share.max.partition.max.record.locks")),
    SHARE_AUTO_OFFSET_RESET: GroupConfigDef(
        "latest", STRING, "share groups: where a share partition with no state starts: "
        "latest, earliest or by_duration:<ISO-8601 duration>", fixed=True),
    SHARE_ISOLATION_LEVEL: GroupConfigDef(
        "read_uncommitted", STRING,
        "share groups: read_uncommitted, or read_committed (up to the last stable "
        "offset, aborted transactions' records archived)", fixed=True),
    SHARE_RENEW_ACKNOWLEDGE_ENABLE: GroupConfigDef(
        "true", BOOLEAN, "share groups: whether RENEW acknowledgements are taken",
        fixed=True),
    STREAMS_SESSION_TIMEOUT: GroupConfigDef(
        "group.streams.session.timeout.ms", INT,
        "streams groups: a member of this group silent this long is removed",
        ("group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms")),
    STREAMS_HEARTBEAT_INTERVAL: GroupConfigDef(
        "group.streams.heartbeat.interval.ms", INT,
        "streams groups: how often this group's members heartbeat",
        ("group.streams.min.heartbeat.interval.ms",
         "group.streams.max.heartbeat.interval.ms")),
    STREAMS_NUM_STANDBY_REPLICAS: GroupConfigDef(
        "group.streams.num.standby.replicas", INT,
        "streams groups: standby copies of each task on other instances",
        (None, "group.streams.max.standby.replicas")),
}
GROUP_CONFIG_TYPES = {name: d.type for name, d in GROUP_CONFIGS.items()}
_ISO_DURATION = re.compile(
    r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (Java's Duration.parse: ``PnDTnHnMn.nS``) in ms, else None."""
    m = _ISO_DURATION.fullmatch(text.strip())
    if m is None or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def group_config_defaults(settings: Mapping[str, Any]) -> dict[str, str]:
    """Every group config's default on this broker, as text."""
    return {name: (d.default if d.fixed else str(settings[d.default]))
            for name, d in GROUP_CONFIGS.items()}


def group_config(settings: Mapping[str, Any], overrides: Mapping[str, str], name: str
                 ) -> str:
    """A group config's value for a group: its own, else the broker's default."""
    value = overrides.get(name)
    if value is not None:
        return value
    d = GROUP_CONFIGS[name]
    return d.default if d.fixed else str(settings[d.default])


def validate_group_configs(settings: Mapping[str, Any], overrides: Mapping[str, str]
                           ) -> None:
    """Kafka's GroupConfig.validate: known names, values of their types, the bounds from
    the broker's group.consumer.* and group.share.* settings, a session longer than the
    heartbeat interval."""

    def fail(message: str) -> DynamicConfigError:
        return DynamicConfigError("INVALID_CONFIG", message)

    for name in overrides:
        if name not in GROUP_CONFIGS:
            raise fail(f"Unknown group config name: {name}")
    values = group_config_defaults(settings)
    for name, raw in overrides.items():
        d = GROUP_CONFIGS[name]
        if d.type == STRING:
            value = raw.strip()
        else:
            try:
                _check_typed(name, raw, d.type)
            except ConfigError as exc:
                raise fail(str(exc)) from None
            value = raw.strip().lower() if d.type == BOOLEAN else str(int(raw.strip()))
        values[name] = value
    reset = values[SHARE_AUTO_OFFSET_RESET]
    if reset not in ("latest", "earliest") and not (
            reset.startswith("by_duration:") and duration_ms(reset[12:]) is not None):
        raise fail(f"Invalid value {reset} for configuration {SHARE_AUTO_OFFSET_RESET}: "
                   "[latest, earliest, by_duration:PnDTnHnMn.nS]")
    if values[SHARE_ISOLATION_LEVEL] not in ("read_uncommitted", "read_committed"):
        raise fail(f"Invalid value {values[SHARE_ISOLATION_LEVEL]} for configuration "
                   f"{SHARE_ISOLATION_LEVEL}: String must be one of: read_committed, "
                   "read_uncommitted")
    for name, d in GROUP_CONFIGS.items():
        if d.bounds is None:
            continue
        low_name, high_name = d.bounds
        low = int(settings[low_name]) if low_name is not None else 0
        if int(values[name]) < low:
            raise fail(f"{name} must be greater than or equal to {low_name or 0}")
        if int(values[name]) > int(settings[high_name]):
            raise fail(f"{name} must be less than or equal to {high_name}")
    for session, interval in ((CONSUMER_SESSION_TIMEOUT, CONSUMER_HEARTBEAT_INTERVAL),
                              (SHARE_SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL),
                              (STREAMS_SESSION_TIMEOUT, STREAMS_HEARTBEAT_INTERVAL)):
        if int(values[session]) <= int(values[interval]):
            raise fail(f"{session} must be greater than {interval}")


class GroupConfigStore:
    """The group configs of every group, in a document: ``{group id: {name: value}}``."""

    def __init__(self, document: Document) -> None:
        self.document = document

    def get(self, group_id: str) -> dict[str, str]:
        return dict(self.document.value.get(group_id, {}))

    def overrides(self, group_id: str) -> Mapping[str, str]:
        """What the coordinator asks per heartbeat (no copy)."""
        return self.document.value.get(group_id) or {}

    async def set(self, group_id: str, configs: Mapping[str, str]) -> None:
        def change(content: dict[str, Any]) -> dict[str, Any]:
            if configs:
                content[group_id] = dict(configs)
            else:
                content.pop(group_id, None)
            return content

        try:
            await self.document.update(change)
        except DocumentError as exc:
            raise DynamicConfigError("UNKNOWN_SERVER_ERROR", str(exc)) from None
