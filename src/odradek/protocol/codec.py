"""Sans-IO request decoding and response encoding on kio's schema-driven codecs.

Message layouts come from kio, which generates a dataclass per API version from Kafka's
own JSON message specs; this module adds only what the specs leave to the broker: the
request header's own version (kio names it per request class), the response header, and
typed errors for what cannot be decoded. Decoders and encoders are built once per
(API key, version) and cached.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.index import UnknownAPIKey, UnknownEntity
from kio.serial import entity_reader, entity_writer

from odradek.protocol import fetch, produce
from odradek.protocol.extra_schemas import load_request_schema, load_response_schema
from odradek.protocol.framing import SIZE
from odradek.protocol.guard import ClaimError, check_claims
from odradek.protocol.reader import DecodeError

# The requests on the data path are read by hand (no copies, no per-version classes):
# API key -> (versions, reader returning version, correlation id, client id, body).
_HandReader = Callable[[bytes | bytearray | memoryview], tuple[int, int, str | None, Any]]
_BY_HAND: dict[int, tuple[range, _HandReader]] = {
    0: (produce.VERSIONS, produce.decode_produce),
    1: (fetch.VERSIONS, fetch.decode_fetch),
}

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")


class ProtocolError(Exception):
    """A request that cannot be decoded."""


class UnsupportedVersionError(ProtocolError):
    """An API key or version this broker does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"API key {api_key} version {api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class CorruptRequestError(ProtocolError):
    """Bytes that do not decode as the request they claim to be."""

    def __init__(self, message: str, correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


# A NamedTuple, not a frozen dataclass: one is made per request, and a frozen
# dataclass's __init__ (object.__setattr__ per field) cost ~4 us against ~1 us.
class Request(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request dataclass
    # Who sent it, over which listener: the connection's session (server.network.session), opaque
    # here; None for requests made inside the broker.
    session: Any = None
    size: int = 0  # the request's bytes (without the size prefix): for produce quotas


@dataclass(frozen=True, slots=True)
class _Decoder:
    header_schema: type
    schema: type
    read_header: Callable[[bytes, int], tuple[Any, int]]
    read_body: Callable[[bytes, int], tuple[Any, int]]


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fixed start of every request header."""
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise CorruptRequestError(f"request of {len(frame)} bytes is shorter than a header")
    return _KEY_VERSION_CORRELATION.unpack_from(frame)


@functools.cache
def _decoder(api_key: int, api_version: int) -> _Decoder:
    schema = load_request_schema(api_key, api_version)
    return _Decoder(schema.__header_schema__, schema, entity_reader(schema.__header_schema__),
                    entity_reader(schema))


def decode_request(frame: bytes | bytearray | memoryview,
                   supported: dict[int, tuple[int, int]], session: Any = None) -> Request:
    """Decode one request frame (without its size prefix).

    ``supported`` maps API keys to the (min, max) versions this broker serves; anything
    else is UnsupportedVersionError, so callers can answer as Kafka does. Produce and
    Fetch are read by hand (``protocol.produce``, ``protocol.fetch``; records are left in
    ``frame``), everything else through kio.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    versions = supported.get(api_key)
    if versions is None or not versions[0] <= api_version <= versions[1]:
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    by_hand = _BY_HAND.get(api_key)
    if by_hand is not None and api_version in by_hand[0]:
        try:
            _, _, client_id, body = by_hand[1](frame)
        except DecodeError as exc:
            raise CorruptRequestError(
                f"API key {api_key} v{api_version} request: {exc}", correlation_id) from None
        return Request(api_key, api_version, correlation_id, client_id, body, session,
                       len(frame))
    if not isinstance(frame, bytes):
        frame = bytes(frame)  # kio's reader takes bytes only
    try:
        decoder = _decoder(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedVersionError(api_key, api_version, correlation_id) from None
    try:
        # Every claimed length and count is checked against the bytes present before
        # kio sees them (kio allocates by claimed counts: see guard).
        body_start, frame = check_claims(decoder.header_schema, frame, 0)
        _, frame = check_claims(decoder.schema, frame, body_start)
    except ClaimError as exc:
        raise CorruptRequestError(
            f"API key {api_key} v{api_version} request: {exc}", correlation_id) from None
    try:
        header, used = decoder.read_header(frame, 0)
        body, _ = decoder.read_body(frame, used)
    except Exception as exc:  # kio raises several kinds on bad input; all mean the same
        raise CorruptRequestError(
            f"API key {api_key} v{api_version} request does not decode: {exc!r}",
            correlation_id,
        ) from exc
    # Bytes after the last field are ignored, as Kafka's own parser does: librdkafka
    # 2.x, for one, sends three such bytes after its Metadata v12 request.
    return Request(api_key, api_version, correlation_id, header.client_id, body, session,
                   len(frame))


@functools.cache
def _encoder(api_key: int, api_version: int) -> tuple[Callable[[Any, Any], None], bool]:
    schema = load_response_schema(api_key, api_version)
    flexible_header = schema.__header_schema__.__version__ >= 1
    return entity_writer(schema), flexible_header


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame: size, response header, body."""
    write, flexible_header = _encoder(api_key, api_version)
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")  # size, filled in below
    buf.write(_CORRELATION.pack(correlation_id))
    if flexible_header:
        buf.write(b"\x00")  # no tagged fields in the header
    write(buf, body)
    out = buf.getbuffer()
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


@functools.cache
def response_schema(api_key: int, api_version: int) -> type:
    """The kio response dataclass for an API version (for handlers to instantiate);
    cached: kio resolves it by import path on every call."""
    return load_response_schema(api_key, api_version)

