"""The wire format both of Odradek's client connections share, with no I/O of its own.

``client/connection.py`` (blocking, for the Spark reader) and ``client/aio.py`` (asyncio,
for broker-to-broker traffic) differ only in how bytes move; what the bytes are is here,
once: request framing (size prefix, the request header kio's schema names), response
checks (size prefix, correlation id) and decoding, version negotiation from an
ApiVersions answer, the cached kio readers and writers, and the error both raise.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import typing
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i64

from odradek.protocol.extra_schemas import load_response_schema
from odradek.protocol.guard import check_claims

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
API_VERSIONS = 18
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
WRITE_TXN_MARKERS = 27
DESCRIBE_LOG_DIRS = 35
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49

MAX_RESPONSE_BYTES = 512 * 1024 * 1024  # larger is a corrupt size prefix, not an answer
SIZE = struct.Struct(">i")
CORRELATION = struct.Struct(">i")


class KafkaClientError(RuntimeError):
    """A broker could not be reached, or answered something this client cannot use."""


@functools.cache
def writer(cls: type) -> Callable[[Any, Any], None]:
    """kio's writer for an entity class (building one walks the schema: built once)."""
    return entity_writer(cls)


# Responses whose timestamps Kafka sets to -1 on a refusal though the schema's field is
# not nullable (the delegation-token APIs): kio's reader refuses negative timestamps.
_INT_TIMESTAMPS = frozenset({38, 39, 40})


@functools.cache
def reader(cls: type) -> Callable[[bytes, int], tuple[Any, int]]:
    """kio's reader for an entity class (built once, like ``writer``). The
    delegation-token responses are read with their timestamps as int64 milliseconds."""
    if getattr(cls, "__api_key__", None) in _INT_TIMESTAMPS:
        return entity_reader(_with_int_timestamps(cls))
    return entity_reader(cls)


def _with_int_timestamps(cls: type) -> type:
    """``cls`` with its datetime_i64 fields read as plain int64 (same bytes)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = []
    for f in dataclasses.fields(cls):
        metadata, hint = dict(f.metadata), hints[f.name]
        if metadata.get("kafka_type") == "datetime_i64":
            metadata["kafka_type"], hint = "int64", i64
        fields.append((f.name, hint, dataclasses.field(metadata=metadata)))
    namespace = {name: getattr(cls, name) for name in (
        "__version__", "__flexible__", "__api_key__", "__header_schema__", "__type__")}
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace,
                                      frozen=True, slots=True)


def api_name(api_key: int) -> str:
    """Kafka's name of an API ("fetch"), or the bare key kio does not know it."""
    return api_key_map.get(api_key, f"API key {api_key}")


def encode_request(body: Any, correlation_id: int, client_id: str) -> memoryview:
    """One request frame: size prefix, the header version ``body``'s schema names, body.

    A view of the encoder's own buffer, so a large request is not copied once more."""
    schema = type(body)
    header_cls = schema.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    writer(header_cls)(buf, header_cls(
        request_api_key=schema.__api_key__, request_api_version=schema.__version__,
        correlation_id=correlation_id, client_id=client_id))
    writer(schema)(buf, body)  # type: ignore[arg-type]  # mypy#11470: type[Any] not Hashable
    frame = buf.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - 4)
    return frame


def check_response_size(size: int, address: str) -> None:
    """Refuse a size prefix no answer can have before reading (and allocating) that much."""
    if not 4 <= size <= MAX_RESPONSE_BYTES:
        raise KafkaClientError(f"{address} sent a response of {size} bytes")


def decode_response(payload: bytes, api_key: int, version: int, correlation_id: int,
                    address: str) -> Any:
    """The body of a response frame (size prefix removed) to request ``correlation_id``
    of ``api_key`` at ``version``; KafkaClientError naming ``address`` if it is another
    request's answer or does not decode.

    The answer comes from another broker (a follower's Fetch from its leader), so it is
    input like a request: before kio decodes it, the same walk the broker makes over
    requests (protocol/guard.py) checks every count and length against the bytes there
    (kio's native readers reserve memory for a claimed count before reading: 2**31
    elements claimed in a few bytes would abort the process) and refuses nulls where the
    schema has none (kio reads any array of count -1 as None, and the fetcher iterating
    ``responses`` would fail on it: found by the fuzz tier, ``fetch_response``)."""
    correlation = CORRELATION.unpack_from(payload)[0]
    if correlation != correlation_id:
        raise KafkaClientError(f"{address} answered request {correlation}, "
                               f"not {correlation_id}")
    response = load_response_schema(api_key, version)
    try:
        # Annotated `type`: mypy takes the narrower type[ResponseHeader] for not Hashable
        # (mypy#11470), and the reader cache wants a Hashable.
        header_schema: type = response.__header_schema__
        # No element cap beyond the bytes: an answer is as large as what was asked
        # (a big cluster's Metadata holds more than a request may).
        used, payload = check_claims(header_schema, payload, 0, max_elements=len(payload))
        _, payload = check_claims(response, payload, used, max_elements=len(payload))
        _, used = reader(header_schema)(payload, 0)
        answer, _ = reader(response)(payload, used)
    except Exception as exc:  # kio raises several kinds on bad input; all mean this
        raise KafkaClientError(f"{address} sent a response that does not decode "
                               f"as {response.__name__} v{version}: {exc!r}") from None
    return answer


def served_versions(answer: Any, address: str) -> dict[int, tuple[int, int]]:
    """API key -> (min, max) version from an ApiVersions response body."""
    if answer.error_code != ErrorCode.none:
        raise KafkaClientError(f"{address} refused ApiVersions: {answer.error_code.name}")
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def negotiate(served: Mapping[int, tuple[int, int]],
              spoken: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Per API key the client speaks, the highest version both sides serve (KIP-35);
    keys with no common version are left out."""
    versions = {}
    for key, (low, high) in spoken.items():
        if key in served and served[key][0] <= high and low <= served[key][1]:
            versions[key] = min(high, served[key][1])
    return versions
