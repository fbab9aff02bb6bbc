"""A bounds-checked cursor over one request frame, for the requests decoded by hand
(``protocol.produce``, ``protocol.fetch``: the hot ones). Every length and count is
checked against the bytes present before anything is taken, as the guard does for the
requests kio decodes, and every failure is one exception type.
"""

from __future__ import annotations

import struct
import uuid
from typing import Literal, NamedTuple, overload

HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class DecodeError(ValueError):
    """Bytes that are not the request they claim to be."""


class Reader:
    """A cursor over one frame; every read is bounds-checked."""

    __slots__ = ("buf", "end", "error", "pos")

    def __init__(self, buf: memoryview, pos: int,
                 error: type[DecodeError] = DecodeError) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.error = error  # raised for anything that does not decode

    def take(self, n: int) -> int:
        """Claim n bytes; returns where they start."""
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise self.error(
                f"a field claims {n} bytes at byte {pos}; {self.end - pos} are left")
        self.pos = pos + n
        return pos

    def view(self, n: int) -> memoryview:
        """The next n bytes, as a view."""
        start = self.take(n)
        return self.buf[start : start + n]

    def unpack(self, s: struct.Struct) -> tuple:
        return s.unpack_from(self.buf, self.take(s.size))

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self.take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self.take(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self.take(8))[0]

    @overload
    def string_field(self, flexible: bool, nullable: Literal[False]) -> str: ...
    @overload
    def string_field(self, flexible: bool, nullable: bool) -> str | None: ...
    def string_field(self, flexible: bool, nullable: bool) -> str | None:
        """A string: compact (uvarint length + 1) in flexible versions, else int16 length."""
        return self.string(self.uvarint() - 1 if flexible else self.int16(), nullable)

    def uvarint(self) -> int:
        pos = self.pos
        if pos < self.end and self.buf[pos] < 0x80:  # one byte: nearly every length here
            self.pos = pos + 1
            return self.buf[pos]
        value = shift = 0
        buf, end = self.buf, self.end
        while True:
            if pos >= end:
                raise self.error("a varint runs past the end of the request")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise self.error("a varint longer than 5 bytes")

    @overload
    def string(self, length: int, nullable: Literal[False]) -> str: ...
    @overload
    def string(self, length: int, nullable: bool) -> str | None: ...
    def string(self, length: int, nullable: bool) -> str | None:
        if length < 0:
            if length == -1 and nullable:
                return None
            raise self.error(f"string length {length}")
        start = self.take(length)
        try:
            return str(self.buf[start : start + length], "utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"a string is not UTF-8: {exc}") from None

    def count(self, flexible: bool, least_bytes: int) -> int:
        """An array's element count, refused if the bytes left cannot hold that many."""
        return self.check_count(self.uvarint() - 1 if flexible else self.int32(), least_bytes)

    def check_count(self, n: int, least_bytes: int) -> int:
        """``n``, if the bytes left can hold that many elements of ``least_bytes``."""
        if n < 0:
            raise self.error(f"array count {n} where an array is required")
        if n * least_bytes > self.end - self.pos:
            raise self.error(
                f"an array claims {n} elements; {self.end - self.pos} bytes are left")
        return n

    def tagged_fields(self) -> dict[int, memoryview]:
        """A tagged-field section: each field's bytes by tag (the first of a repeated
        tag is kept)."""
        pos = self.pos
        if pos < self.end and self.buf[pos] == 0:  # none: the usual case
            self.pos = pos + 1
            return {}
        fields: dict[int, memoryview] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields.setdefault(tag, self.view(self.uvarint()))
        return fields

    def skip_tagged_fields(self) -> None:
        pos = self.pos
        if pos < self.end and self.buf[pos] == 0:  # none: the usual case
            self.pos = pos + 1
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag: none of those defined is used here, all are skipped
            self.take(self.uvarint())


# UUIDs (topic ids) read from requests, parsed once: a consumer names the same ids in every
# fetch, and uuid.UUID's constructor is Python (~8,000 instructions counted per id).
# Bounded: forgotten when full (ids from a client making them up cost no memory).
_TOPIC_IDS: dict[bytes, uuid.UUID | None] = {}
_TOPIC_IDS_MAX = 4096


def uuid_field(raw: bytes | bytearray | memoryview) -> uuid.UUID | None:
    """A request's 16-byte UUID (a topic id); None for the zero id (as kio reads it)."""
    key = bytes(raw)
    found = _TOPIC_IDS.get(key, key)
    if found is not key:
        return found  # type: ignore[return-value]  # a UUID or None, never the key
    value = uuid.UUID(bytes=key)
    parsed = None if value.int == 0 else value
    if len(_TOPIC_IDS) >= _TOPIC_IDS_MAX:
        _TOPIC_IDS.clear()
    _TOPIC_IDS[key] = parsed
    return parsed


class RequestHeader(NamedTuple):
    version: int
    correlation_id: int
    client_id: str | None
    flexible: bool


def read_header(frame: bytes | bytearray | memoryview, api_key: int, versions: range,
                flexible_from: int, error: type[DecodeError]) -> tuple[Reader, RequestHeader]:
    """Check a request header (v1, or v2 with tagged fields from ``flexible_from``) for
    one API at the given versions; returns a reader at the start of the body."""
    buf = memoryview(frame)
    if len(buf) < HEADER.size:
        raise error(f"request of {len(buf)} bytes is shorter than its header")
    key, version, correlation_id, client_id_length = HEADER.unpack_from(buf)
    if key != api_key or version not in versions:
        raise error(f"not an API {api_key} v{versions.start}-v{versions.stop - 1} request "
                    f"(key {key} v{version})")
    r = Reader(buf, HEADER.size, error)
    client_id = r.string(client_id_length, nullable=True)
    flexible = version >= flexible_from
    if flexible:
        r.skip_tagged_fields()
    return r, RequestHeader(version, correlation_id, client_id, flexible)
