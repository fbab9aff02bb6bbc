"""The follower's Fetch v13 by hand (protocol/replica_fetch.py, topics by id) writes the
bytes kio writes and reads what kio reads, names each topic id from the fetcher's
metadata, and refuses every cut-short or inflated answer with one error."""

from __future__ import annotations

import dataclasses
import io
import struct
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer
from kio.static.primitive import Records

from odradek.client.codec import FETCH, decode_response, encode_request
from odradek.protocol.codec import Request
from odradek.protocol.fetch import decode_fetch
from odradek.protocol.replica_fetch import (
    VERSION,
    FetchResponseError,
    decode_fetch_response,
    encode_fetch_request,
)
from odradek.records.builder import build_simple
from odradek.server.handlers.fetch import encode_fetch_response
from odradek.server.replication.reads import PartitionResult
from odradek.storage.log import FileRegion
from odradek.storage.txn_index import AbortedTxn

# As tests/protocol/test_codec.py registers it (records are replaced per partition below).
st.register_type_strategy(Records, st.binary(max_size=100))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), correlation_id=st.integers(1, 2**31 - 1))
def test_a_request_is_the_bytes_kio_writes(data: st.DataObject, correlation_id: int) -> None:
    kio_body = data.draw(st.from_type(load_request_schema(FETCH, VERSION)))
    kio_body = dataclasses.replace(kio_body, cluster_id=None)  # a tagged field never sent
    expected = bytes(encode_request(kio_body, correlation_id, "broker-2-fetcher-0"))
    # The same request as the broker's own reader gives it (what a fetcher builds).
    _, _, _, body = decode_fetch(expected[4:])
    assert encode_fetch_request(correlation_id, "broker-2-fetcher-0", body) == expected


def kio_answer(data: st.DataObject) -> Any:
    """A random Fetch v13 answer, as kio's dataclass (records: a record batch or null)."""
    schema = load_response_schema(FETCH, VERSION)
    answer = data.draw(st.from_type(schema))
    topics = []
    for topic in answer.responses:
        partitions = []
        for p in topic.partitions:
            records = data.draw(st.sampled_from([None, b"", build_simple([b"v", b"w"])]))
            partitions.append(dataclasses.replace(p, records=records))
        topics.append(dataclasses.replace(topic, partitions=tuple(partitions)))
    return dataclasses.replace(answer, responses=tuple(topics))


def kio_frame(answer: Any, correlation_id: int) -> bytes:
    """The answer's frame as a connection reads it (size prefix removed)."""
    schema = type(answer)
    buf = io.BytesIO()
    header = schema.__header_schema__
    entity_writer(header)(buf, header(correlation_id=correlation_id))
    entity_writer(schema)(buf, answer)
    return buf.getvalue()


def same_answer(mine: Any, kio: Any, names: dict[uuid.UUID, str] | None = None) -> None:
    assert (mine.throttle_time_ms, mine.error_code, mine.session_id) == (
        # Whole milliseconds, exactly: total_seconds() * 1000 rounds 262,143 ms down.
        kio.throttle_time // timedelta(milliseconds=1), kio.error_code, kio.session_id)
    assert len(mine.responses) == len(kio.responses)
    for got, want in zip(mine.responses, kio.responses, strict=True):
        assert got.topic_id == want.topic_id
        assert got.topic == (names or {}).get(want.topic_id, "")
        assert [(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                 p.log_start_offset, p.records) for p in got.partitions] == [
            (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
             p.log_start_offset, p.records) for p in want.partitions]


@SETTINGS
@given(data=st.data(), correlation_id=st.integers(1, 2**31 - 1))
def test_an_answer_reads_as_kio_reads_it(data: st.DataObject, correlation_id: int) -> None:
    answer = kio_answer(data)
    frame = kio_frame(answer, correlation_id)
    kio = decode_response(frame, FETCH, VERSION, correlation_id, "test:0")
    # The fetcher's metadata knows some of the ids (a topic it no longer knows is "").
    names = {t.topic_id: f"t{i}" for i, t in enumerate(kio.responses)
             if i % 2 == 0 and t.topic_id is not None}
    same_answer(decode_fetch_response(frame, correlation_id, names), kio, names)


IDS = {"orders": uuid.UUID(int=1), "audit": uuid.UUID(int=2)}
NAMES = {topic_id: name for name, topic_id in IDS.items()}


class LeadersIds:
    """The leader's side of the ids (the handler's AnswerNames): each topic's id."""

    def topic_id(self, name: str) -> bytes:
        return IDS[name].bytes


def leaders_answer(tmp_path: Any) -> bytes:
    """What an Odradek leader sends (the fetch handler's encoder), records from a file."""
    path = tmp_path / "segment"
    records = build_simple([b"a", b"b"])
    path.write_bytes(records)
    fd = open(path, "rb")  # noqa: SIM115  # closed by the test's end
    results = [
        PartitionResult("orders", 0, 0, 2, 2, 0, FileRegion(fd.fileno(), 0, len(records))),
        PartitionResult("orders", 1, 6, -1, -1, -1, None),  # NOT_LEADER_OR_FOLLOWER
        PartitionResult("orders", 2, 0, 9, 7, 1, None, [AbortedTxn(5, 3, 0, 0)]),
        PartitionResult("audit", 0, 0, 4, 4, 0, None),
    ]
    request = Request(FETCH, VERSION, 77, "broker-2-fetcher-0", None)
    parts = encode_fetch_response(request, results, 12, names=LeadersIds())  # type: ignore[arg-type]
    frame = b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)
    fd.close()
    return frame[4:]


def test_a_leaders_answer_reads_as_kio_reads_it(tmp_path) -> None:
    frame = leaders_answer(tmp_path)
    mine = decode_fetch_response(frame, 77, NAMES)
    same_answer(mine, decode_response(frame, FETCH, VERSION, 77, "test:0"), NAMES)
    assert mine.session_id == 12
    assert [t.topic for t in mine.responses] == ["orders", "audit"]
    assert mine.responses[0].partitions[0].records == build_simple([b"a", b"b"])


def test_every_cut_short_answer_is_refused_with_one_error(tmp_path) -> None:
    frame = leaders_answer(tmp_path)
    for end in range(len(frame)):
        with pytest.raises(FetchResponseError):
            decode_fetch_response(frame[:end], 77)
    with pytest.raises(FetchResponseError, match="after the answer"):
        decode_fetch_response(frame + b"\x00", 77)
    with pytest.raises(FetchResponseError, match="request 77, not 78"):
        decode_fetch_response(frame, 78)


def test_inflated_counts_and_unknown_errors_are_refused(tmp_path) -> None:
    frame = bytearray(leaders_answer(tmp_path))
    top = 4 + 1 + 4 + 2 + 4  # correlation id, header tags, throttle, error, session id
    inflated = bytes(frame[:top]) + b"\xff\xff\xff\xff\x07" + bytes(frame[top + 1:])
    with pytest.raises(FetchResponseError, match="claims"):
        decode_fetch_response(inflated, 77)
    unknown = bytearray(frame)
    struct.pack_into(">h", unknown, 4 + 1 + 4, 32000)
    with pytest.raises(FetchResponseError, match="unknown error code"):
        decode_fetch_response(bytes(unknown), 77)


def test_a_leader_below_v13_gets_the_same_request_through_kio() -> None:
    """The fetcher's fallback (a leader that does not serve v13): the same body by name as plain
    values for kio, which the broker's own reader gives back unchanged."""
    import asyncio

    from odradek.protocol.fetch import FetchPartition, FetchTopic, ForgottenTopic
    from odradek.protocol.fetch import FetchRequestBody as Body
    from odradek.protocol.messages import build
    from odradek.server.replication.fetcher import _send_fetch

    body = Body(2, 500, 1, 1 << 20, 0, 9, 3,
                [FetchTopic("orders", [FetchPartition(4, 7, 120, 7, 0, 1 << 20)])],
                [ForgottenTopic("old", [1, 2])], "")

    class OlderLeader:
        def version(self, api_key: int) -> int:
            return 11

        async def request(self, api_key: int, data: Any, *, timeout_s: float) -> Any:
            return build(load_request_schema(api_key, 11), data)

    kio_body = asyncio.run(_send_fetch(OlderLeader(), body, timeout_s=1))  # type: ignore[arg-type]
    _, _, _, decoded = decode_fetch(bytes(encode_request(kio_body, 5, "f"))[4:])
    # All but last_fetched_epoch, which v11 does not carry (read as -1).
    older = [FetchTopic("orders", [body.topics[0].partitions[0]._replace(
        last_fetched_epoch=-1)])]
    assert decoded == body._replace(topics=older)
