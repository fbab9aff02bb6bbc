"""A pre-pass over a request that checks every length and count it claims against the
bytes that are really there, before kio decodes it.

Why: kio's native readers reserve memory for the number of elements an array *claims*
before reading any, so a 47-byte request claiming 2**32 elements makes the process abort
on a failed 32 GiB allocation. Kafka refuses any count larger than the bytes remaining;
this walk does the same, from the same kio schema (so no layout is written twice), and
also bounds the number of elements one request may hold.

The walk only skips over bytes: strings, byte fields and records are jumped over by
their length, so its cost is proportional to the number of fields and elements, not to
the bytes of a Produce request's records.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable

from odradek.protocol.framing import encode_uvarint

# The most array elements one request may hold. The largest legitimate requests (a fetch
# or metadata request for every partition of a 10,000-partition broker, a produce to
# thousands of partitions) stay far below; walking (and later decoding) more would hold
# the event loop for seconds.
MAX_ELEMENTS = 250_000

_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8,
    "uuid": 16, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8,
}


class ClaimError(ValueError):
    """A length or count that the request's bytes cannot back."""


class _Walk:
    __slots__ = ("buf", "edits", "elements", "end", "max_elements")

    def __init__(self, buf: bytes, end: int, max_elements: int = MAX_ELEMENTS) -> None:
        self.buf = buf
        self.end = end
        self.elements = 0
        self.max_elements = max_elements
        # (start, end, replacement): tagged sections rewritten without unknown tags.
        self.edits: list[tuple[int, int, bytes]] = []

    def need(self, pos: int, n: int) -> int:
        if n < 0 or pos + n > self.end:
            raise ClaimError(f"a field claims {n} bytes at byte {pos}; "
                             f"{self.end - pos} are left")
        return pos + n

    def uvarint(self, pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if pos >= self.end:
                raise ClaimError("a varint runs past the end of the request")
            byte = self.buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7
            if shift > 35:
                raise ClaimError("a varint longer than 5 bytes")

    def int16(self, pos: int) -> tuple[int, int]:
        self.need(pos, 2)
        return int.from_bytes(self.buf[pos : pos + 2], "big", signed=True), pos + 2

    def int32(self, pos: int) -> tuple[int, int]:
        self.need(pos, 4)
        return int.from_bytes(self.buf[pos : pos + 4], "big", signed=True), pos + 4

    def count(self, n: int, pos: int) -> None:
        # Every element takes at least one byte.
        if n > self.end - pos:
            raise ClaimError(f"an array claims {n} elements with {self.end - pos} bytes left")
        self.elements += n
        if self.elements > self.max_elements:
            raise ClaimError(f"a message may hold at most {self.max_elements} array elements")


Step = Callable[[_Walk, int], int]


def _skip_fixed(size: int) -> Step:
    def step(w: _Walk, pos: int) -> int:
        end = pos + size
        if end > w.end:
            raise ClaimError(f"a {size}-byte field at byte {pos} runs past the end")
        return end

    return step


def _null(name: str | None) -> ClaimError:
    return ClaimError(f"non-nullable field {name} was serialized as null")


def _skip_sized(flexible: bool, legacy_length: str, null_name: str | None = None) -> Step:
    """A string or bytes field; ``null_name``: the field's name when it may not be null
    in this version (a null is then refused, as Kafka's generated readers refuse it)."""
    def step(w: _Walk, pos: int) -> int:
        if flexible:
            n, pos = w.uvarint(pos)
            if n == 0 and null_name is not None:
                raise _null(null_name)
            return pos if n == 0 else w.need(pos, n - 1)
        n, pos = (w.int16 if legacy_length == "int16" else w.int32)(pos)
        if n < 0 and null_name is not None:
            raise _null(null_name)
        return pos if n < 0 else w.need(pos, n)

    return step


def _skip_array(flexible: bool, element: Step, null_name: str | None = None) -> Step:
    """An array; ``null_name`` as for ``_skip_sized``."""
    def step(w: _Walk, pos: int) -> int:
        if flexible:
            n, pos = w.uvarint(pos)
            n -= 1
        else:
            n, pos = w.int32(pos)
        if n < 0 and null_name is not None:
            raise _null(null_name)
        if n <= 0:
            return pos
        w.count(n, pos)
        for _ in range(n):
            pos = element(w, pos)
        return pos

    return step


def _skip_tagged(known: frozenset[int]) -> Step:
    """The tagged section of a flexible struct. Tags the schema does not know are dropped
    from the request (KIP-482: receivers skip unknown tagged fields), by an edit that
    rewrites the section with only the known ones."""

    def step(w: _Walk, pos: int) -> int:
        start = pos
        n, pos = w.uvarint(pos)
        w.count(n, pos)
        kept: list[bytes] = []
        dropped = False
        for _ in range(n):
            field_start = pos
            tag, pos = w.uvarint(pos)
            size, pos = w.uvarint(pos)
            pos = w.need(pos, size)
            if tag in known:
                kept.append(w.buf[field_start:pos])
            else:
                dropped = True
        if dropped:
            w.edits.append((start, pos, encode_uvarint(len(kept)) + b"".join(kept)))
        return pos

    return step


def _primitive(kafka_type: str, flexible: bool, null_name: str | None = None) -> Step:
    if kafka_type in _FIXED:
        return _skip_fixed(_FIXED[kafka_type])
    if kafka_type == "string":
        return _skip_sized(flexible, "int16", null_name)
    if kafka_type in ("bytes", "records"):
        return _skip_sized(flexible, "int32", null_name)
    raise TypeError(f"unknown kafka_type {kafka_type!r}")


@functools.cache
def _plan(cls: type) -> Step:
    """One step that skips a whole entity of class ``cls``."""
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    steps: list[Step | int] = []  # an int: that many bytes of fixed-size fields
    known_tags = frozenset(f.metadata["tag"] for f in dataclasses.fields(cls)
                           if "tag" in f.metadata)
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue  # tagged fields live in the tagged section at the end
        hint = hints[field.name]
        kafka_type = field.metadata.get("kafka_type")
        # kio types a field that may be null in this version as Optional (the schema's
        # nullableVersions): a null anywhere else is refused here, before any handler
        # sees it.
        null_name = None if type(None) in typing.get_args(hint) else field.name
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        origin = typing.get_origin(hint)
        if origin is not tuple and args and typing.get_origin(args[0]) is tuple:
            hint, origin = args[0], tuple  # Optional[tuple[...]]
        if origin is tuple:
            element_type = typing.get_args(hint)[0]
            element = (_plan(element_type) if dataclasses.is_dataclass(element_type)
                       else _primitive(kafka_type or "", flexible))
            steps.append(_skip_array(flexible, element, null_name))
        elif kafka_type in _FIXED:
            # Consecutive fixed-size fields are checked as one run of bytes.
            if steps and isinstance(steps[-1], int):
                steps[-1] += _FIXED[kafka_type]
            else:
                steps.append(_FIXED[kafka_type])
        elif kafka_type is not None:
            # The request header's client id is a classic string in every header version
            # ("flexibleVersions": "none" in RequestHeader.json), even in header v2.
            legacy = cls.__name__ == "RequestHeader" and field.name == "client_id"
            steps.append(_primitive(kafka_type, flexible and not legacy, null_name))
        else:
            nested = hint if dataclasses.is_dataclass(hint) else next(
                a for a in args if dataclasses.is_dataclass(a))
            steps.append(_plan(nested))
    if flexible:
        steps.append(_skip_tagged(known_tags))
    compiled = tuple(_skip_fixed(s) if isinstance(s, int) else s for s in steps)
    if len(compiled) == 1:
        return compiled[0]

    def skip_entity(w: _Walk, pos: int) -> int:
        for step in compiled:
            pos = step(w, pos)
        return pos

    return skip_entity


def check_claims(cls: type, buf: bytes, offset: int = 0, *,
                 max_elements: int = MAX_ELEMENTS) -> tuple[int, bytes]:
    """Walk one ``cls`` entity at ``offset``. Returns where it ends and the buffer to
    decode: ``buf`` itself, or a copy without tagged fields the schema does not know.
    Raises ClaimError when a claimed length or count exceeds the bytes left, or the
    message holds more than ``max_elements`` array elements."""
    walk = _Walk(buf, len(buf), max_elements)
    end = _plan(cls)(walk, offset)
    if not walk.edits:
        return end, buf
    parts, last = [], 0
    for start, stop, replacement in walk.edits:
        parts += [buf[last:start], replacement]
        last = stop
    parts.append(buf[last:])
    shrink = sum(stop - start - len(r) for start, stop, r in walk.edits)
    return end - shrink, b"".join(parts)
