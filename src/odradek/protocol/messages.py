"""Build kio's version-specific message dataclasses from plain, version-agnostic data.

Each API version is its own kio dataclass with its own fields. Handlers describe a
response once, as nested dicts holding the union of fields across versions, and
``build(cls, data)`` keeps the fields that ``cls`` has, fills those it lacks with Kafka's
zero values, and converts plain values to kio's field types (error codes, millisecond
durations and timestamps, UUIDs). The plan for each class is computed once and cached.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
ZERO_UUID = uuid.UUID(int=0)


def _ms_timedelta(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _ms_datetime(value: Any) -> datetime.datetime | None:
    # -1 ("none") becomes the instant 1 ms before the epoch: encoded as -1 both where
    # the field is nullable and where it is not (kio writes no None there).
    if value is None or isinstance(value, datetime.datetime):
        return value
    return _EPOCH + datetime.timedelta(milliseconds=int(value))


def _error_code(value: Any) -> ErrorCode:
    return value if isinstance(value, ErrorCode) else ErrorCode(int(value))


def _uuid(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    return uuid.UUID(str(value))


_CONVERT: dict[str | None, Callable[[Any], Any]] = {
    "timedelta_i32": _ms_timedelta,
    "timedelta_i64": _ms_timedelta,
    "datetime_i64": _ms_datetime,
    "error_code": _error_code,
    "uuid": _uuid,
}

_ZERO: dict[str | None, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": None,
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": None,
    "uuid": ZERO_UUID,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    convert: Callable[[Any], Any] | None
    nested: type | None  # an entity (or entity array element) type
    array: bool
    required: bool
    zero: Any
    nullable: bool


def _nested_type(hint: Any) -> tuple[type | None, bool]:
    """(entity class, is array) for a field's type hint."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    # A type hint or its argument that is a dataclass is a class (build() uses it in
    # isinstance), never a dataclass instance.
    if origin is tuple:
        element = args[0] if args else None
        if not dataclasses.is_dataclass(element):
            return None, True
        assert isinstance(element, type)
        return element, True
    if dataclasses.is_dataclass(hint):
        assert isinstance(hint, type)
        return hint, False
    for arg in args:  # Optional[...]
        if arg is type(None):
            continue
        nested, array = _nested_type(arg)
        if nested is not None or array:
            return nested, array
    return None, False


@functools.cache
def _plan(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        nested, array = _nested_type(hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        nullable = type(None) in typing.get_args(hints[f.name])
        zero: Any = () if array else _ZERO.get(kafka_type)
        plan.append(_Field(f.name, _CONVERT.get(kafka_type), nested, array, required, zero,
                           nullable))
    return tuple(plan)


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """An instance of kio dataclass ``cls`` from ``data`` (extra keys are ignored)."""
    kwargs = {}
    for field in _plan(cls):
        if field.name in data:
            value = data[field.name]
            if field.nested is not None and value is not None:
                if field.array:
                    value = tuple(
                        v if isinstance(v, field.nested) else build(field.nested, v)
                        for v in value
                    )
                elif not isinstance(value, field.nested):
                    value = build(field.nested, value)
            elif field.array and value is not None:
                value = tuple(value)
            elif field.convert is not None and value is not None:
                value = field.convert(value)
            kwargs[field.name] = value
        elif field.required:
            if field.nested is not None and not field.array:
                kwargs[field.name] = None if field.nullable else build(field.nested, {})
            else:
                kwargs[field.name] = field.zero
    return cls(**kwargs)


def ms(value: datetime.timedelta | int | None, default: int = 0) -> int:
    """Milliseconds from a kio duration field (or a plain int)."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return value.days * 86_400_000 + value.seconds * 1000 + value.microseconds // 1000
    return int(value)
