"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44),
ListConfigResources (74) and DescribeCluster (60).

Configs: a topic's settings are its overrides (``Topic.configs``, persisted in the
metadata file) over the broker's ``log.*`` defaults, under Kafka's names. Describing one
reports where each value comes from, with Kafka's config sources: a topic override is
DYNAMIC_TOPIC_CONFIG, a broker setting given in the file, environment or command line is
STATIC_BROKER_CONFIG, anything else DEFAULT_CONFIG.

Broker resources (a broker id, or "" for the cluster-wide default) take Kafka's dynamic
broker configs, and group resources (type 32) Kafka's group configs; what is accepted,
how it is validated and where it is kept is in server.dynamic_configs. A dynamic value
is DYNAMIC_BROKER_CONFIG (set on this broker) or DYNAMIC_DEFAULT_BROKER_CONFIG (set on
the cluster default); a group config set on the group is GROUP_CONFIG.

AlterConfigs replaces a topic's whole override set (configs it does not name go back to
the broker default, as in Kafka); IncrementalAlterConfigs (KIP-339) edits it key by key.
Either way the new settings reach the open logs at once (``Broker.set_topic_configs``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.dynamic_configs import (
    GROUP_CONFIGS,
    STORED_ONLY,
    STORED_ONLY_DOC,
    DynamicConfigError,
    group_config_defaults,
    validate_group_configs,
)
from odradek.server.errors import error_code
from odradek.server.handlers.base import (
    CLUSTER,
    NO_AUTHORIZED_OPERATIONS,
    Api,
    allowed,
    authorized_operations,
    respond,
)
from odradek.server.handlers.metadata import brokers, controller_id
from odradek.server.metadata import Topic, TopicError
from odradek.server.settings import DYNAMIC_BROKER_SETTINGS, SETTINGS, Setting
from odradek.server.tiered import check_topic_configs
from odradek.storage.config import LogConfig

if TYPE_CHECKING:
    from odradek.server.broker import Broker

# ConfigResource.Type (the resource_type field)
TOPIC = 2
BROKER = 4
GROUP = 32

# DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8

# ConfigDef.Type as DescribeConfigs v3+ reports it (KIP-569)
UNKNOWN_TYPE, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = range(8)

# Kafka's types of the topic configs we honour (TopicConfig / LogConfig's ConfigDef).
TOPIC_CONFIG_TYPES = {
    "segment.bytes": INT,
    "segment.ms": LONG,
    "segment.index.bytes": INT,
    "index.interval.bytes": INT,
    "flush.messages": LONG,
    "flush.ms": LONG,
    "retention.ms": LONG,
    "retention.bytes": LONG,
    "cleanup.policy": LIST,
    "delete.retention.ms": LONG,
    "min.cleanable.dirty.ratio": DOUBLE,
    "min.compaction.lag.ms": LONG,
    "max.compaction.lag.ms": LONG,
    "max.message.bytes": INT,
    "message.timestamp.type": STRING,
    "compression.type": STRING,
    "file.delete.delay.ms": LONG,
    "min.insync.replicas": INT,
    "unclean.leader.election.enable": BOOLEAN,
    "leader.replication.throttled.replicas": LIST,
    "follower.replication.throttled.replicas": LIST,
    "remote.storage.enable": BOOLEAN,
    "local.retention.ms": LONG,
    "local.retention.bytes": LONG,
    "remote.log.copy.disable": BOOLEAN,
    "remote.log.delete.on.disable": BOOLEAN,
}
LIST_CONFIGS = frozenset(n for n, t in TOPIC_CONFIG_TYPES.items() if t == LIST)

# IncrementalAlterConfigs' config_operation (AlterConfigOp.OpType)
SET, DELETE, APPEND, SUBTRACT = range(4)
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

# The broker setting each topic config defaults to (log.retention.ms -> retention.ms).
_BROKER_SETTING_OF = {s.topic_name: s for s in SETTINGS.values() if s.topic_name}


BROKERS_ENDPOINT = 1  # DescribeCluster v1 endpoint_type: brokers (2 = controllers)


class ConfigRequestError(Exception):
    """A resource of a configs request that cannot be served; ``kafka_error`` names the
    Kafka error."""

    def __init__(self, kafka_error: str, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


def _text(value: Any) -> str:
    """A setting's value as Kafka prints it (booleans in lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _setting_type(setting: Setting) -> int:
    if setting.topic_name in TOPIC_CONFIG_TYPES:
        return TOPIC_CONFIG_TYPES[setting.topic_name]
    default = setting.default
    if isinstance(default, bool):
        return BOOLEAN
    if isinstance(default, float):
        return DOUBLE
    if isinstance(default, int):
        return LONG if setting.name.endswith(".ms") else INT
    return STRING


def _entry(name: str, value: str | None, source: int, config_type: int,
           synonyms: list[dict[str, Any]], doc: str | None, *, read_only: bool,
           include_synonyms: bool, include_documentation: bool) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": config_type,
        "documentation": doc if include_documentation else None,
    }


def _wanted(keys: Any) -> set[str] | None:
    """The configuration_keys filter: None (or, as Kafka also accepts, empty) means all."""
    return set(keys) if keys else None


def describe_topic(broker: Broker, topic: Topic, keys: set[str] | None, *,
                   include_synonyms: bool, include_documentation: bool
                   ) -> list[dict[str, Any]]:
    effective = broker.log_config_for(topic.name).to_kafka()
    defaults = LogConfig().to_kafka()
    sources = broker.config.sources
    entries = []
    for name, value in effective.items():
        if keys is not None and name not in keys:
            continue
        setting = _BROKER_SETTING_OF.get(name)
        # Synonyms in order of precedence, the one in effect first (as Kafka lists them).
        synonyms: list[dict[str, Any]] = []
        if name in topic.configs:
            synonyms.append({"name": name, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
        if setting is not None:
            dynamic = broker.dynamic_setting(setting.name)
            if dynamic is not None:  # a dynamic broker config (this broker's or default)
                synonyms.append({"name": setting.name, "value": dynamic[0],
                                 "source": DYNAMIC_BROKER_CONFIG if dynamic[1] == "broker"
                                 else DYNAMIC_DEFAULT_BROKER_CONFIG})
            if setting.name in sources:
                synonyms.append({"name": setting.name, "value": _text(broker.config[setting.name]),
                                 "source": STATIC_BROKER_CONFIG})
            synonyms.append({"name": setting.name, "value": _text(setting.default),
                             "source": DEFAULT_CONFIG})
        else:
            synonyms.append({"name": name, "value": defaults[name], "source": DEFAULT_CONFIG})
        entries.append(_entry(
            name, value, synonyms[0]["source"], TOPIC_CONFIG_TYPES.get(name, UNKNOWN_TYPE),
            synonyms, setting.doc if setting is not None else None, read_only=False,
            include_synonyms=include_synonyms, include_documentation=include_documentation))
    return entries


def _dynamic_type(name: str) -> int:
    """The ConfigDef type of a dynamic broker config (an Odradek setting or not)."""
    return STORED_ONLY[name].type if name in STORED_ONLY else _setting_type(SETTINGS[name])


def describe_broker(broker: Broker, keys: set[str] | None, *, include_synonyms: bool,
                    include_documentation: bool) -> list[dict[str, Any]]:
    entries = []
    dynamic = broker.broker_configs(str(broker.node_id))
    defaults = broker.broker_configs("")

    def synonyms_of(name: str, static: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # In order of precedence, the one in effect first (as Kafka lists them).
        out = []
        if name in dynamic:
            out.append({"name": name, "value": dynamic[name], "source": DYNAMIC_BROKER_CONFIG})
        if name in defaults:
            out.append({"name": name, "value": defaults[name],
                        "source": DYNAMIC_DEFAULT_BROKER_CONFIG})
        return out + static

    for setting in SETTINGS.values():
        if keys is not None and setting.name not in keys:
            continue
        static = []
        if setting.name in broker.config.sources:
            static.append({"name": setting.name, "value": _text(broker.config[setting.name]),
                           "source": STATIC_BROKER_CONFIG})
        static.append({"name": setting.name, "value": _text(setting.default),
                       "source": DEFAULT_CONFIG})
        synonyms = synonyms_of(setting.name, static)
        entries.append(_entry(
            setting.name, synonyms[0]["value"], synonyms[0]["source"], _setting_type(setting),
            synonyms, setting.doc, read_only=setting.name not in DYNAMIC_BROKER_SETTINGS,
            include_synonyms=include_synonyms, include_documentation=include_documentation))
    for name, spec in STORED_ONLY.items():
        if keys is not None and name not in keys:
            continue
        synonyms = synonyms_of(name, [{"name": name, "value": spec.default,
                                       "source": DEFAULT_CONFIG}])
        entries.append(_entry(
            name, synonyms[0]["value"], synonyms[0]["source"], spec.type, synonyms,
            STORED_ONLY_DOC, read_only=False, include_synonyms=include_synonyms,
            include_documentation=include_documentation))
    return entries


def describe_broker_defaults(broker: Broker, keys: set[str] | None, *,
                             include_synonyms: bool,
                             include_documentation: bool) -> list[dict[str, Any]]:
    """The cluster-wide dynamic broker configs (resource name ""): those set."""
    entries = []
    for name, value in sorted(broker.broker_configs("").items()):
        if (keys is not None and name not in keys) or not (
                name in SETTINGS or name in STORED_ONLY):
            continue
        synonyms = [{"name": name, "value": value, "source": DYNAMIC_DEFAULT_BROKER_CONFIG}]
        doc = SETTINGS[name].doc if name in SETTINGS else STORED_ONLY_DOC
        entries.append(_entry(name, value, DYNAMIC_DEFAULT_BROKER_CONFIG, _dynamic_type(name),
                              synonyms, doc, read_only=False,
                              include_synonyms=include_synonyms,
                              include_documentation=include_documentation))
    return entries


def describe_group(broker: Broker, group_id: str, keys: set[str] | None, *,
                   include_synonyms: bool, include_documentation: bool
                   ) -> list[dict[str, Any]]:
    """A group's configs (any group id, existing or not, as in Kafka): its own values
    (GROUP_CONFIG), else the broker's defaults (DEFAULT_CONFIG)."""
    own = broker.group_configs.get(group_id) if broker.group_configs is not None else {}
    defaults = group_config_defaults(broker.config.values)
    entries = []
    for name in GROUP_CONFIGS:
        if keys is not None and name not in keys:
            continue
        synonyms: list[dict[str, Any]] = []
        if name in own:
            synonyms.append({"name": name, "value": own[name], "source": GROUP_CONFIG})
        synonyms.append({"name": name, "value": defaults[name], "source": DEFAULT_CONFIG})
        entries.append(_entry(name, synonyms[0]["value"], synonyms[0]["source"],
                              GROUP_CONFIGS[name].type, synonyms, GROUP_CONFIGS[name].doc,
                              read_only=False,
                              include_synonyms=include_synonyms,
                              include_documentation=include_documentation))
    return entries


def _check_broker_name(broker: Broker, name: str) -> None:
    """A broker resource names this node by id (or is "" for the cluster-wide defaults)."""
    if name == "":
        return
    try:
        node = int(name)
    except ValueError:
        raise ConfigRequestError("INVALID_REQUEST",
                                 f"Node id must be an integer, but it is: {name}") from None
    if node != broker.node_id:
        raise ConfigRequestError("INVALID_REQUEST",
                                 f"Unexpected broker id, expected {broker.node_id}, but "
                                 f"received {name}")


def _require_topic(broker: Broker, name: str) -> Topic:
    topic = broker.topic(name)
    if topic is None:
        raise ConfigRequestError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
    return topic


def _failure(exc: Exception) -> dict[str, Any]:
    return {"error_code": error_code(exc), "error_message": str(exc)}


async def describe_configs(broker: Broker, request: Request) -> bytes:
    body = request.body
    include_synonyms = getattr(body, "include_synonyms", False)
    include_documentation = getattr(body, "include_documentation", False)
    results = []
    for res in body.resources:
        entry: dict[str, Any] = {"error_code": 0, "error_message": None,
                                 "resource_type": res.resource_type,
                                 "resource_name": res.resource_name, "configs": []}
        keys = _wanted(res.configuration_keys)
        refused = _config_refusal(broker, request, res, Operation.DESCRIBE_CONFIGS)
        if refused is not None:
            entry.update(refused)
            results.append(entry)
            continue
        try:
            if res.resource_type == TOPIC:
                entry["configs"] = describe_topic(
                    broker, _require_topic(broker, res.resource_name), keys,
                    include_synonyms=include_synonyms,
                    include_documentation=include_documentation)
            elif res.resource_type == BROKER:
                _check_broker_name(broker, res.resource_name)
                # "" asks for the cluster-wide dynamic defaults.
                describe = describe_broker if res.resource_name != "" else \
                    describe_broker_defaults
                entry["configs"] = describe(broker, keys, include_synonyms=include_synonyms,
                                           include_documentation=include_documentation)
            elif res.resource_type == GROUP:
                _check_group_name(res.resource_name)
                entry["configs"] = describe_group(
                    broker, res.resource_name, keys, include_synonyms=include_synonyms,
                    include_documentation=include_documentation)
            else:
                raise ConfigRequestError("INVALID_REQUEST",
                                         f"resource type {res.resource_type} is not supported")
        except (ConfigRequestError, DynamicConfigError, TopicError) as exc:
            entry.update(_failure(exc))
        results.append(entry)
    return respond(request, {"throttle_time": 0, "results": results})


def _config_refusal(broker: Broker, request: Request, res: Any, operation: Operation
                    ) -> dict[str, Any] | None:
    """The error fields of a config resource the principal may not ``operation``
    (DESCRIBE_CONFIGS or ALTER_CONFIGS on the topic, or on the cluster for a broker)."""
    if broker.authorizer is None:
        return None
    if res.resource_type == TOPIC:
        if not allowed(broker, request, operation, ResourceType.TOPIC, res.resource_name):
            return {"error_code": ErrorCode.topic_authorization_failed,
                    "error_message": "Topic authorization failed."}
    elif res.resource_type == GROUP:
        if not allowed(broker, request, operation, ResourceType.GROUP, res.resource_name):
            return {"error_code": ErrorCode.group_authorization_failed,
                    "error_message": "Group authorization failed."}
    elif not allowed(broker, request, operation, ResourceType.CLUSTER, CLUSTER):
        return {"error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "Cluster authorization failed."}
    return None


def _duplicate_resources(resources: Any) -> set[tuple[int, str]]:
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {key for key, n in counts.items() if n > 1}


def _check_alterable(broker: Broker, res: Any, duplicates: set[tuple[int, str]]) -> None:
    if (res.resource_type, res.resource_name) in duplicates:
        raise ConfigRequestError("INVALID_REQUEST",
                                 f"resource {res.resource_name!r} appears more than once")
    if res.resource_type == BROKER:
        _check_broker_name(broker, res.resource_name)
    elif res.resource_type == GROUP:
        _check_group_name(res.resource_name)
    elif res.resource_type != TOPIC:
        raise ConfigRequestError("INVALID_REQUEST",
                                 f"resource type {res.resource_type} is not supported")
    names = Counter(c.name for c in res.configs)
    repeated = sorted(n for n, count in names.items() if count > 1)
    if repeated:
        raise ConfigRequestError("INVALID_REQUEST",
                                 f"config {', '.join(repeated)} appears more than once")
    if res.resource_type == TOPIC:
        _require_topic(broker, res.resource_name)


async def _alter(broker: Broker, request: Request,
                 new_configs: Callable[[Any], dict[str, str]]) -> bytes:
    """The resource loop AlterConfigs and IncrementalAlterConfigs share: check each
    resource, compute its new override set with ``new_configs``, apply or validate it."""
    body = request.body
    duplicates = _duplicate_resources(body.resources)
    responses = []
    for res in body.resources:
        entry: dict[str, Any] = {"error_code": 0, "error_message": None,
                                 "resource_type": res.resource_type,
                                 "resource_name": res.resource_name}
        refused = _config_refusal(broker, request, res, Operation.ALTER_CONFIGS)
        if refused is not None:
            entry.update(refused)
            responses.append(entry)
            continue
        try:
            _check_alterable(broker, res, duplicates)
            if res.resource_type == BROKER:
                await broker.set_broker_configs(
                    res.resource_name, new_configs(res), validate_only=body.validate_only)
            elif res.resource_type == GROUP:
                configs = new_configs(res)
                validate_group_configs(broker.config.values, configs)
                if not body.validate_only:
                    assert broker.group_configs is not None
                    await broker.group_configs.set(res.resource_name, configs)
            else:
                configs = new_configs(res)
                if broker.topic(res.resource_name) is not None:
                    check_topic_configs(broker, configs,
                                        broker.log_config_for(res.resource_name))
                await broker.topology.set_configs(res.resource_name, configs,
                                                  validate_only=body.validate_only)
        except (ConfigRequestError, DynamicConfigError, TopicError) as exc:
            entry.update(_failure(exc))
        responses.append(entry)
    return respond(request, {"throttle_time": 0, "responses": responses})


async def alter_configs(broker: Broker, request: Request) -> bytes:
    # The new override set is exactly what the request lists (null: not set).
    return await _alter(broker, request, lambda res: {
        c.name: c.value for c in res.configs if c.value is not None})


def _list_items(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


# The static defaults of the topic configs: what APPEND and SUBTRACT start from when the
# topic has no override (Kafka's controller takes the config's default from the topic
# ConfigDef, not the broker's log.* setting).
_TOPIC_DEFAULTS = LogConfig().to_kafka()


def _null_values(ops: Any) -> None:
    """Kafka's ConfigAdminManager.preprocess: only DELETE may come without a value."""
    nulls = [op.name for op in ops if op.config_operation != DELETE and op.value is None]
    if nulls:
        raise ConfigRequestError("INVALID_REQUEST",
                                 "Null value not supported for : " + ", ".join(nulls))


def apply_incremental(broker: Broker, topic: Topic, ops: Any) -> dict[str, str]:
    """The override set after applying IncrementalAlterConfigs' operations in order, as
    Kafka's controller does (ConfigurationControlManager.incrementalAlterConfigResource):
    APPEND adds the items not in the list yet, SUBTRACT removes the given items, both
    from the topic's override or else the config's default, and only list configs take
    them (INVALID_CONFIG otherwise)."""
    configs = dict(topic.configs)
    known = set(LogConfig.names())
    _null_values(ops)
    for op in ops:
        name, kind, value = op.name, op.config_operation, op.value
        if kind not in _OP_NAMES:
            raise ConfigRequestError("INVALID_REQUEST",
                                     f"Unknown operations type {kind}")
        if kind in (APPEND, SUBTRACT):
            if name not in LIST_CONFIGS:  # unknown names too: Kafka's message for both
                raise ConfigRequestError(
                    "INVALID_CONFIG",
                    f"Can't {_OP_NAMES[kind]} to key {name} because its type is not LIST.")
            items = _list_items(configs.get(name, _TOPIC_DEFAULTS[name]))
            given = _list_items(value)
            if kind == APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            configs[name] = ",".join(items)
        elif kind == DELETE:
            # Deleting a name that is not a topic config is a no-op in Kafka, not an
            # error (found by the oracle tier, tests/oracle).
            configs.pop(name, None)
        elif name not in known:
            raise ConfigRequestError("INVALID_CONFIG", f"unknown topic config {name!r}")
        else:
            configs[name] = value
    return configs


def _default_text(name: str) -> str:
    """A dynamic broker config's default as Kafka prints it (APPEND/SUBTRACT start)."""
    if name in STORED_ONLY:
        return STORED_ONLY[name].default or ""
    return _text(SETTINGS[name].default)


def _apply_keyed(current: dict[str, str], ops: Any, list_type: Callable[[str], bool],
                 default: Callable[[str], str]) -> dict[str, str]:
    """Kafka's ConfigAdminManager.prepareIncrementalConfigs: SET and DELETE on any
    config; APPEND and SUBTRACT only on a LIST one (else INVALID_CONFIG), from its value
    on the resource or else its default."""
    configs = dict(current)
    _null_values(ops)
    for op in ops:
        kind = op.config_operation
        if kind == SET:
            configs[op.name] = op.value
        elif kind == DELETE:
            configs.pop(op.name, None)
        elif kind in (APPEND, SUBTRACT):
            verb = "append" if kind == APPEND else "subtract"
            if not list_type(op.name):
                raise ConfigRequestError(
                    "INVALID_CONFIG",
                    f"Config value {verb} is not allowed for config key: {op.name}")
            items = _list_items(configs.get(op.name, default(op.name)))
            given = _list_items(op.value)
            if kind == APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            configs[op.name] = ",".join(items)
        else:
            raise ConfigRequestError("INVALID_REQUEST", f"Unknown operations type {kind}")
    return configs


def apply_incremental_broker(broker: Broker, resource: str, ops: Any) -> dict[str, str]:
    """A broker resource's dynamic configs after IncrementalAlterConfigs' operations."""
    for op in ops:
        if op.config_operation in (APPEND, SUBTRACT) and not (
                op.name in SETTINGS or op.name in STORED_ONLY):
            raise ConfigRequestError("INVALID_CONFIG", f"Unknown config name: {op.name}")
    return _apply_keyed(broker.broker_configs(resource), ops,
                        lambda name: _dynamic_type(name) == LIST, _default_text)


def apply_incremental_group(broker: Broker, group_id: str, ops: Any) -> dict[str, str]:
    """A group's configs after IncrementalAlterConfigs' operations (none is a list)."""
    current = broker.group_configs.get(group_id) if broker.group_configs is not None else {}
    return _apply_keyed(current, ops, lambda name: False, lambda name: "")


def _check_group_name(name: str) -> None:
    if not name:
        raise ConfigRequestError("INVALID_REQUEST", "Group name must not be empty.")


async def incremental_alter_configs(broker: Broker, request: Request) -> bytes:
    def new_configs(res: Any) -> dict[str, str]:
        if res.resource_type == TOPIC:
            return apply_incremental(broker, _require_topic(broker, res.resource_name),
                                     res.configs)
        if res.resource_type == GROUP:
            return apply_incremental_group(broker, res.resource_name, res.configs)
        return apply_incremental_broker(broker, res.resource_name, res.configs)

    return await _alter(broker, request, new_configs)


async def describe_cluster(broker: Broker, request: Request) -> bytes:
    body = request.body
    assert broker.metadata is not None
    endpoint_type = getattr(body, "endpoint_type", BROKERS_ENDPOINT)
    data: dict[str, Any] = {
        "throttle_time": 0, "error_code": 0, "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": controller_id(broker),
        # v2's include_fenced_brokers: a ZooKeeper cluster fences no broker (a broker is
        # registered and live, or not listed), so every one listed is unfenced.
        "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                     "rack": b["rack"], "is_fenced": False}
                    for b in brokers(broker, request)],
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
        data.update(error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", brokers=[],
                    controller_id=-1)
    elif endpoint_type != BROKERS_ENDPOINT:
        data.update(error_code=ErrorCode.unsupported_endpoint_type,
                    error_message=f"endpoint type {endpoint_type} is not served: this node "
                                  "is a broker, not a KRaft controller",
                    brokers=[], controller_id=-1)
    elif body.include_cluster_authorized_operations:
        # KIP-430: the operations the principal may do on the cluster (all of them
        # without an authorizer).
        data["cluster_authorized_operations"] = authorized_operations(
            broker, request, ResourceType.CLUSTER, CLUSTER)
    return respond(request, data)


# ListConfigResources' resource types (ConfigResource.Type), in the order Kafka lists them.
_GROUP, _BROKER_LOGGER, _BROKER, _TOPIC, _CLIENT_METRICS = 32, 8, 4, 2, 16


async def list_config_resources(broker: Broker, request: Request) -> bytes:
    """ListConfigResources (74, KIP-1142): the resources that have configs, of the types
    asked for (all when none): groups with group configs, the live brokers (as BROKER and
    as BROKER_LOGGER), every topic. CLIENT_METRICS resources (KIP-714) are not served:
    none, and v0 (ListClientMetricsResources) lists only those. An unknown type is
    UNSUPPORTED_VERSION, as in Kafka; CLUSTER DESCRIBE_CONFIGS is needed."""
    asked = list(getattr(request.body, "resource_types", None) or ())
    known = (_GROUP, _BROKER_LOGGER, _BROKER, _TOPIC, _CLIENT_METRICS)
    if request.api_version == 0:
        asked = [_CLIENT_METRICS]
    if not allowed(broker, request, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER,
                   CLUSTER):
        return respond(request, {"throttle_time": 0, "config_resources": [],
                                 "error_code": ErrorCode.cluster_authorization_failed})
    if any(t not in known for t in asked):
        return respond(request, {"throttle_time": 0, "config_resources": [],
                                 "error_code": ErrorCode.unsupported_version})
    wanted = set(asked or known)
    assert broker.metadata is not None
    found: list[tuple[str, int]] = []
    if _GROUP in wanted and broker.group_configs is not None:
        found += [(g, _GROUP) for g in sorted(broker.group_configs.document.value)]
    ids = [str(b.node_id) for b in broker.topology.live_brokers()]
    for kind in (_BROKER_LOGGER, _BROKER):
        if kind in wanted:
            found += [(i, kind) for i in ids]
    if _TOPIC in wanted:
        found += [(t, _TOPIC) for t in sorted(broker.metadata.topics)]
    return respond(request, {"throttle_time": 0, "error_code": 0, "config_resources": [
        {"resource_name": name, "resource_type": kind} for name, kind in found]})


DESCRIBE_CONFIGS = Api(32, "DescribeConfigs", 1, 4, describe_configs)
LIST_CONFIG_RESOURCES = Api(74, "ListConfigResources", 0, 1, list_config_resources)
ALTER_CONFIGS = Api(33, "AlterConfigs", 0, 2, alter_configs)
INCREMENTAL_ALTER_CONFIGS = Api(44, "IncrementalAlterConfigs", 0, 1, incremental_alter_configs)
DESCRIBE_CLUSTER = Api(60, "DescribeCluster", 0, 2, describe_cluster)
