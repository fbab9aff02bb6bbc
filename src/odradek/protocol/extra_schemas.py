"""Message schemas Kafka 4.4 has and kio 0.6.5 (the newest kio) does not, and the one
place every lookup of a schema by (API key, version) goes through.

Why: kio generates one dataclass per API version from Kafka's JSON specs, but its newest
release predates three versions Kafka 4.4 serves and its Java client sends:

- ApiVersions v5 (KIP-1242): the request adds ClusterId (nullable string, default null)
  and NodeId (int32, default -1), the broker the client means to reach; the response is
  v4's (a mismatch is answered REBOOTSTRAP_REQUIRED).
- TxnOffsetCommit v6 (KIP-1319): topics by TopicId (uuid) instead of Name, in the
  request and the response.
- DeleteGroups v3: each group's result adds ErrorMessage (nullable string).
- StreamsGroupHeartbeat v1 (KIP-1331): the request is v0's; the response swaps v0's
  int32 AcceptableRecoveryLag(Legacy) for an int64 AcceptableRecoveryLag (default -1)
  and adds TopologyDescriptionRequired (bool) after WarmupTasks.
- StreamsGroupDescribe v1 (KIP-1331, KIP-1357): the request adds
  IncludeTopologyDescription (bool); each described group adds TopologyDescription (a
  nullable struct), TopologyDescriptionStatus (int8) and AssignorName (nullable string).
- StreamsGroupTopologyDescriptionUpdate v0 (KIP-1331, API key 93): a new API, so its
  classes are made here whole, as kio would generate them.

Each is built here from kio's previous version, the fields changed as Kafka 4.4's specs
(``common/message/*.json`` in kafka-clients-4.4.0.jar) change them, shaped exactly like
kio's generated classes (field metadata ``kafka_type``, the class attributes
``__version__``, ``__flexible__``, ``__api_key__``, ``__header_schema__``, ``__type__``),
so kio's readers and writers, the claims guard and ``messages.build`` take them as they
take kio's. None of them adds a tagged field.

Remove each when a kio release has it: ``load_request_schema`` / ``load_response_schema``
below then find kio's own, and nothing else changes.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import uuid
from collections.abc import Callable
from types import UnionType
from typing import Any

from kio.index import load_request_schema as _kio_request
from kio.index import load_response_schema as _kio_response
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

# (name, type hint, dataclasses.field(...)): one field of a class being built.
_Field = tuple[str, Any, Any]
# Per nested class name: how its list of fields changes in the new version.
_Edits = dict[str, Callable[[list[_Field]], list[_Field]]]

_CLASS_ATTRIBUTES = ("__type__", "__flexible__", "__api_key__", "__header_schema__")


def _entity(hint: Any) -> type | None:
    """The kio entity class a field holds (alone, optional or as a tuple), if any."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is tuple:
        return _entity(args[0])
    if origin in (UnionType, typing.Union):
        return next((e for a in args if (e := _entity(a)) is not None), None)
    return hint if dataclasses.is_dataclass(hint) and isinstance(hint, type) else None


def _replace_entity(hint: Any, old: type, new: type) -> Any:
    if hint is old:
        return new
    origin = typing.get_origin(hint)
    if origin is tuple:
        return tuple[_replace_entity(typing.get_args(hint)[0], old, new), ...]  # type: ignore[misc]
    if origin in (UnionType, typing.Union):
        a, b = (_replace_entity(x, old, new) for x in typing.get_args(hint))
        return a | b
    return hint


def _evolve(cls: type, version: int, edits: _Edits) -> type:
    """``cls`` (a kio entity) as of ``version``: every nested entity class rebuilt at
    that version too, and the fields of the classes named in ``edits`` changed."""
    hints = typing.get_type_hints(cls)
    fields: list[_Field] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nested = _entity(hint)
        if nested is not None:
            hint = _replace_entity(hint, nested, _evolve(nested, version, edits))
        fields.append((f.name, hint, dataclasses.field(
            metadata=dict(f.metadata), default=f.default,
            default_factory=f.default_factory)))
    if cls.__name__ in edits:
        fields = edits[cls.__name__](fields)
    namespace = {name: getattr(cls, name) for name in _CLASS_ATTRIBUTES}
    namespace["__version__"] = i16(version)
    namespace["__module__"] = __name__
    namespace["__doc__"] = (f"{cls.__name__} v{version}: Kafka 4.4's schema, which kio "
                            "0.6.5 lacks (see odradek.protocol.extra_schemas).")
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace,
                                      frozen=True, slots=True, kw_only=True)


def _field(name: str, hint: Any, kafka_type: str, **default: Any) -> _Field:
    return (name, hint, dataclasses.field(metadata={"kafka_type": kafka_type}, **default))


def _struct(name: str, hint: Any, **default: Any) -> _Field:
    """A field holding an entity (or a tuple of them): kio gives these no metadata."""
    return (name, hint, dataclasses.field(**default))


def _append(*added: _Field) -> Callable[[list[_Field]], list[_Field]]:
    return lambda fields: [*fields, *added]


def _insert_after(name: str, *added: _Field) -> Callable[[list[_Field]], list[_Field]]:
    def edit(fields: list[_Field]) -> list[_Field]:
        at = next(i for i, f in enumerate(fields) if f[0] == name) + 1
        return [*fields[:at], *added, *fields[at:]]
    return edit


def _then(*edits: Callable[[list[_Field]], list[_Field]]
          ) -> Callable[[list[_Field]], list[_Field]]:
    def edit(fields: list[_Field]) -> list[_Field]:
        for e in edits:
            fields = e(fields)
        return fields
    return edit


def _entity_class(name: str, fields: list[_Field], *, api_key: int, version: int,
                  kind: EntityType, header: type) -> type:
    """A class of an API kio has no version of, in the shape of kio's generated ones."""
    namespace = {"__type__": kind, "__version__": i16(version), "__flexible__": True,
                 "__api_key__": i16(api_key), "__header_schema__": header,
                 "__module__": __name__,
                 "__doc__": f"{name} v{version}: Kafka 4.4's schema, which kio 0.6.5 "
                            "lacks (see odradek.protocol.extra_schemas)."}
    return dataclasses.make_dataclass(name, fields, namespace=namespace, frozen=True,
                                      slots=True, kw_only=True)


def _topology_description(api_key: int, version: int, header: type) -> type:
    """KIP-1331's TopologyDescription common struct (StreamsGroupDescribe v1's response
    and StreamsGroupTopologyDescriptionUpdate v0's request have the same one)."""
    def nested(name: str, fields: list[_Field]) -> type:
        return _entity_class(name, fields, api_key=api_key, version=version,
                             kind=EntityType.nested, header=header)

    node = nested("TopologyDescriptionNode", [
        _field("name", str, "string"),
        _field("node_type", i8, "int8"),
        _field("source_topics", tuple[str, ...], "string", default=()),
        _field("sink_topic", str | None, "string", default=None),
        _field("stores", tuple[str, ...], "string", default=()),
        _field("successors", tuple[str, ...], "string", default=()),
    ])
    subtopology = nested("TopologyDescriptionSubtopology", [
        _field("subtopology_id", str, "string"),
        _struct("nodes", tuple[node, ...], default=()),  # type: ignore[valid-type]
    ])
    global_store = nested("TopologyDescriptionGlobalStore", [
        _struct("source", node),
        _struct("processor", node),
    ])
    return nested("TopologyDescription", [
        _struct("subtopologies", tuple[subtopology, ...],  # type: ignore[valid-type]
                default=()),
        _struct("global_stores", tuple[global_store, ...],  # type: ignore[valid-type]
                default=()),
    ])


def _topology_description_update(kind: str) -> type:
    """StreamsGroupTopologyDescriptionUpdate v0 (API key 93), request or response."""
    if kind == "request":
        description = _topology_description(93, 0, RequestHeader)
        return _entity_class("StreamsGroupTopologyDescriptionUpdateRequest", [
            _field("group_id", str, "string"),
            _field("member_id", str, "string"),
            _field("topology_epoch", i32, "int32"),
            _struct("topology_description", description),
        ], api_key=93, version=0, kind=EntityType.request, header=RequestHeader)
    return _entity_class("StreamsGroupTopologyDescriptionUpdateResponse", [
        _field("throttle_time", i32, "int32"),
        # int16, not kio's ErrorCode: its code STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED
        # (135) is newer than kio's enum. The bytes are the same.
        _field("error_code", i16, "int16"),
        _field("error_message", str | None, "string", default=None),
    ], api_key=93, version=0, kind=EntityType.response, header=ResponseHeader)


def _replace(name: str, by: _Field) -> Callable[[list[_Field]], list[_Field]]:
    def edit(fields: list[_Field]) -> list[_Field]:
        assert any(f[0] == name for f in fields), name
        return [by if f[0] == name else f for f in fields]
    return edit


# TxnOffsetCommit v6 (KIP-1319): "Name" is versions 0-5, "TopicId" 6+, in the same place.
_BY_TOPIC_ID = _replace("name", _field("topic_id", uuid.UUID | None, "uuid"))


@functools.cache
def _extra() -> dict[tuple[int, int, str], type]:
    """(API key, version, "request" | "response") -> the class kio lacks."""
    return {
        (18, 5, "request"): _evolve(_kio_request(18, 4), 5, {"ApiVersionsRequest": _append(
            _field("cluster_id", str | None, "string", default=None),
            _field("node_id", i32, "int32", default=i32(-1)))}),
        (18, 5, "response"): _evolve(_kio_response(18, 4), 5, {}),
        (28, 6, "request"): _evolve(_kio_request(28, 5), 6, {
            "TxnOffsetCommitRequestTopic": _BY_TOPIC_ID}),
        (28, 6, "response"): _evolve(_kio_response(28, 5), 6, {
            "TxnOffsetCommitResponseTopic": _BY_TOPIC_ID}),
        (88, 1, "request"): _evolve(_kio_request(88, 0), 1, {}),
        (88, 1, "response"): _evolve(_kio_response(88, 0), 1, {
            "StreamsGroupHeartbeatResponse": _then(
                # v0's int32 (AcceptableRecoveryLagLegacy) goes; v1's int64 is after
                # TaskOffsetIntervalMs.
                lambda fields: [f for f in fields if f[0] != "acceptable_recovery_lag"],
                _insert_after("task_offset_interval", _field(
                    "acceptable_recovery_lag", i64, "int64", default=i64(-1))),
                _insert_after("warmup_tasks", _field(
                    "topology_description_required", bool, "bool", default=False)))}),
        (89, 1, "request"): _evolve(_kio_request(89, 0), 1, {
            "StreamsGroupDescribeRequest": _append(_field(
                "include_topology_description", bool, "bool", default=False))}),
        (89, 1, "response"): _evolve(_kio_response(89, 0), 1, {"DescribedGroup": _append(
            _struct("topology_description",
                    _topology_description(89, 1, ResponseHeader) | None, default=None),
            _field("topology_description_status", i8, "int8", default=i8(0)),
            _field("assignor_name", str | None, "string", default=None))}),
        (93, 0, "request"): _topology_description_update("request"),
        (93, 0, "response"): _topology_description_update("response"),
        (42, 3, "request"): _evolve(_kio_request(42, 2), 3, {}),
        (42, 3, "response"): _evolve(_kio_response(42, 2), 3, {"DeletableGroupResult": _append(
            _field("error_message", str | None, "string", default=None))}),
    }


def load_request_schema(api_key: int, api_version: int) -> Any:
    """The request class of an API version: kio's, or one built here. Raises kio's
    UnknownAPIKey / UnknownEntity (both KioIndexError) for what neither has."""
    extra = _extra().get((api_key, api_version, "request"))
    return extra if extra is not None else _kio_request(api_key, api_version)


def load_response_schema(api_key: int, api_version: int) -> Any:
    """The response class of an API version: kio's, or one built here."""
    extra = _extra().get((api_key, api_version, "response"))
    return extra if extra is not None else _kio_response(api_key, api_version)


def extra_versions() -> dict[int, int]:
    """API key -> the highest version this module adds (for tests and docs)."""
    out: dict[int, int] = {}
    for key, version, _ in _extra():
        out[key] = max(out.get(key, version), version)
    return out
