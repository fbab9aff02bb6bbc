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
import struct
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


_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


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

    def count(self, n: int, pos: int) -> None:
        # Every element takes at least one byte.
        if n > self.end - pos:
            raise ClaimError(f"an array claims {n} elements with {self.end - pos} bytes left")
        self.elements += n
        if self.elements > self.max_elements:
            raise ClaimError(f"a message may hold at most {self.max_elements} array elements")

    def tagged(self, pos: int, known: frozenset[int]) -> int:
        """The tagged section of a flexible struct at ``pos``. Tags the schema does not
        know are dropped from the request (KIP-482: receivers skip unknown tagged
        fields), by an edit that rewrites the section with only the known ones."""
        start = pos
        n, pos = self.uvarint(pos)
        self.count(n, pos)
        kept: list[bytes] = []
        dropped = False
        for _ in range(n):
            field_start = pos
            tag, pos = self.uvarint(pos)
            size, pos = self.uvarint(pos)
            pos = self.need(pos, size)
            if tag in known:
                kept.append(self.buf[field_start:pos])
            else:
                dropped = True
        if dropped:
            self.edits.append((start, pos, encode_uvarint(len(kept)) + b"".join(kept)))
        return pos


def _null(name: str | None) -> ClaimError:
    return ClaimError(f"non-nullable field {name} was serialized as null")


def _past(size: int, pos: int) -> ClaimError:
    return ClaimError(f"a {size}-byte field at byte {pos} runs past the end")


# --- the walk of one schema, written out as Python source and compiled once --------------
#
# Why compiled: an interpreter of the schema (a closure per field, called per field and
# element) spent ~10 us on a one-partition Fetch answer where kio's decode of the same
# bytes takes ~3 us, and every request and every inter-broker answer pays the walk. The
# generated function is the same walk with the per-field calls inlined: loops for arrays,
# the common one-byte varint read in place, the helpers of ``_Walk`` only for the rare
# paths (long varints, unknown tagged fields, errors).


class _Source:
    """The lines of one walk function, and the constants it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, object] = {}

    def emit(self, indent: int, *lines: str) -> None:
        self.lines += ["    " * indent + line for line in lines]

    def constant(self, value: object) -> str:
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def fixed(self, indent: int, size: int) -> None:
        self.emit(indent, f"pos += {size}",
                  "if pos > end:", f"    raise _past({size}, pos - {size})")

    def count(self, indent: int, flexible: bool, legacy_length: str, minus: int) -> None:
        """Read a length or count into ``n`` (``minus``: 1 where the wire has n + 1)."""
        if flexible:
            self.emit(indent,
                      "if pos < end and buf[pos] < 128:",
                      f"    n = buf[pos]{' - 1' if minus else ''}",
                      "    pos += 1",
                      "else:",
                      "    n, pos = w.uvarint(pos)")
            if minus:
                self.emit(indent + 1, "n -= 1")
        else:
            size, unpack = (2, "_i16") if legacy_length == "int16" else (4, "_i32")
            self.emit(indent, f"if pos + {size} > end:", f"    w.need(pos, {size})",
                      f"n = {unpack}(buf, pos)[0]", f"pos += {size}")

    def sized(self, indent: int, flexible: bool, legacy_length: str,
              null_name: str | None) -> None:
        """A string or bytes field; ``null_name``: the field's name when it may not be
        null in this version (refused, as Kafka's generated readers refuse it)."""
        self.count(indent, flexible, legacy_length, 0)
        if flexible:
            if null_name is not None:
                self.emit(indent, "if n == 0:", f"    raise _null({null_name!r})")
            self.emit(indent, "if n > 1:", "    if pos + n - 1 > end:",
                      "        w.need(pos, n - 1)", "    pos += n - 1")
        else:
            if null_name is not None:
                self.emit(indent, "if n < 0:", f"    raise _null({null_name!r})")
            self.emit(indent, "if n > 0:", "    if pos + n > end:",
                      "        w.need(pos, n)", "    pos += n")

    def array(self, indent: int, flexible: bool, null_name: str | None,
              element: Callable[[int], None], element_size: int | None) -> None:
        """An array; ``element`` emits one element's walk at an indent; a fixed-size
        element (``element_size``) is skipped for the whole array at once."""
        self.count(indent, flexible, "int32", 1)
        if null_name is not None:
            self.emit(indent, "if n < 0:", f"    raise _null({null_name!r})")
        self.emit(indent, "if n > 0:", "    w.count(n, pos)")
        if element_size is not None:
            self.emit(indent + 1, f"if pos + n * {element_size} > end:",
                      f"    raise _past({element_size}, "
                      f"pos + (end - pos) // {element_size} * {element_size})",
                      f"pos += n * {element_size}")
        else:
            self.emit(indent + 1, "for _ in range(n):")
            element(indent + 2)

    def entity(self, cls: type, indent: int) -> None:
        """The walk of one entity of class ``cls`` (a kio dataclass), inlined."""
        flexible = bool(getattr(cls, "__flexible__", False))
        hints = typing.get_type_hints(cls)
        run = 0  # consecutive fixed-size fields, checked as one run of bytes

        def flush() -> None:
            nonlocal run
            if run:
                self.fixed(indent, run)
                run = 0

        for field in dataclasses.fields(cls):
            if "tag" in field.metadata:
                continue  # tagged fields live in the tagged section at the end
            hint = hints[field.name]
            kafka_type = field.metadata.get("kafka_type")
            # kio types a field that may be null in this version as Optional (the
            # schema's nullableVersions): a null anywhere else is refused here, before
            # any handler sees it.
            null_name = None if type(None) in typing.get_args(hint) else field.name
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            origin = typing.get_origin(hint)
            if origin is not tuple and args and typing.get_origin(args[0]) is tuple:
                hint, origin = args[0], tuple  # Optional[tuple[...]]
            if origin is not tuple and kafka_type in _FIXED:
                run += _FIXED[kafka_type]
                continue
            flush()
            if origin is tuple:
                element_type = typing.get_args(hint)[0]
                if dataclasses.is_dataclass(element_type):
                    assert isinstance(element_type, type)  # a type hint's argument: a class
                    self.array(indent, flexible, null_name,
                               functools.partial(self.entity, element_type), None)
                elif (kafka_type or "") in _FIXED:
                    self.array(indent, flexible, null_name, lambda i: None,
                               _FIXED[kafka_type or ""])
                else:
                    self.array(indent, flexible, null_name,
                               functools.partial(self.primitive, kafka_type=kafka_type or "",
                                                 flexible=flexible),
                               None)
            elif kafka_type is not None:
                # The request header's client id is a classic string in every header
                # version ("flexibleVersions": "none" in RequestHeader.json), even in v2.
                legacy = cls.__name__ == "RequestHeader" and field.name == "client_id"
                self.primitive(indent, kafka_type, flexible and not legacy, null_name)
            else:
                nested = hint if dataclasses.is_dataclass(hint) else next(
                    a for a in args if dataclasses.is_dataclass(a))
                assert isinstance(nested, type)  # a type hint (or its argument): a class
                if null_name is None:
                    # A nullable struct (DescribeTopicPartitions' cursor) is preceded by
                    # a marker byte: negative for null, else the struct follows (Kafka's
                    # generated readers test ``readByte() < 0``).
                    self.fixed(indent, 1)
                    self.emit(indent, "if buf[pos - 1] < 128:")
                    self.entity(nested, indent + 1)
                else:
                    self.entity(nested, indent)
        flush()
        if flexible:
            known = self.constant(frozenset(f.metadata["tag"] for f in dataclasses.fields(cls)
                                            if "tag" in f.metadata))
            self.emit(indent, "if pos < end and buf[pos] == 0:", "    pos += 1",
                      "else:", f"    pos = w.tagged(pos, {known})")

    def primitive(self, indent: int, kafka_type: str, flexible: bool,
                  null_name: str | None = None) -> None:
        if kafka_type in _FIXED:
            self.fixed(indent, _FIXED[kafka_type])
        elif kafka_type == "string":
            self.sized(indent, flexible, "int16", null_name)
        elif kafka_type in ("bytes", "records"):
            self.sized(indent, flexible, "int32", null_name)
        else:
            raise TypeError(f"unknown kafka_type {kafka_type!r}")


Walker = Callable[[bytes, int, _Walk], int]


@functools.cache
def _walker(cls: type) -> Walker:
    """The compiled walk over one entity of class ``cls``: (buf, pos, walk) -> its end."""
    source = _Source()
    source.entity(cls, 1)
    text = "\n".join(["def walk(buf, pos, w):", "    end = w.end", *source.lines,
                      "    return pos", ""])
    namespace: dict[str, object] = {"_null": _null, "_past": _past, "_i16": _I16,
                                    "_i32": _I32, **source.constants}
    exec(compile(text, f"<claims walk of {cls.__module__}.{cls.__name__}>", "exec"),
         namespace)
    return typing.cast(Walker, namespace["walk"])


def check_claims(cls: type, buf: bytes, offset: int = 0, *,
                 max_elements: int = MAX_ELEMENTS) -> tuple[int, bytes]:
    """Walk one ``cls`` entity at ``offset``. Returns where it ends and the buffer to
    decode: ``buf`` itself, or a copy without tagged fields the schema does not know.
    Raises ClaimError when a claimed length or count exceeds the bytes left, or the
    message holds more than ``max_elements`` array elements."""
    walk = _Walk(buf, len(buf), max_elements)
    end = _walker(cls)(buf, offset, walk)
    if not walk.edits:
        return end, buf
    parts, last = [], 0
    for start, stop, replacement in walk.edits:
        parts += [buf[last:start], replacement]
        last = stop
    parts.append(buf[last:])
    shrink = sum(stop - start - len(r) for start, stop, r in walk.edits)
    return end - shrink, b"".join(parts)
