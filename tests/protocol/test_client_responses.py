"""The internal client's response decoder (client/codec.py ``decode_response``) on
answers another broker could send: a follower's Fetch answer from its leader is input
like a request, and every malformed one is refused with KafkaClientError (the replica
fetcher logs it and reconnects), never decoded into something the fetcher then trips
over. Regressions found by the fuzz tier's ``fetch_response`` target (issue 21)."""

from __future__ import annotations

import io
import struct

import pytest
from kio.index import load_response_schema

from odradek.client.codec import FETCH, KafkaClientError, decode_response, writer
from odradek.protocol.messages import build


def fetch_v11(responses_count: bytes) -> bytes:
    """A FetchResponse v11 body (size prefix removed): correlation id 7, throttle time,
    error code, session id, then the ``responses`` array's int32 count and nothing."""
    return struct.pack(">iihi", 7, 0, 0, 0) + responses_count


def test_a_null_responses_array_is_refused_not_decoded_as_none() -> None:
    # kio reads any array of count -1 as None; ``responses`` is not nullable and the
    # fetcher iterates it (TypeError, a traceback per fetch, before the fix).
    with pytest.raises(KafkaClientError, match="responses"):
        decode_response(fetch_v11(struct.pack(">i", -1)), FETCH, 11, 7, "leader:1")


def test_a_count_the_bytes_cannot_hold_is_refused_before_anything_is_allocated() -> None:
    # kio's native reader reserves memory for the claimed count first.
    with pytest.raises(KafkaClientError, match="claims"):
        decode_response(fetch_v11(struct.pack(">i", 2**31 - 1)), FETCH, 11, 7, "leader:1")


def test_a_well_formed_fetch_answer_decodes_as_before() -> None:
    schema = load_response_schema(FETCH, 12)
    buf = io.BytesIO()
    writer(schema.__header_schema__)(buf, schema.__header_schema__(correlation_id=9))
    writer(schema)(buf, build(schema, {"session_id": 3, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 4,
                                       "records": b"\0" * 61}]}]}))
    answer = decode_response(buf.getvalue(), FETCH, 12, 9, "leader:1")
    assert answer.session_id == 3
    assert answer.responses[0].partitions[0].records == b"\0" * 61
