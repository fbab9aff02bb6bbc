"""The asyncio client connection brokers will use to talk to each other
(odradek.client.aio), against the in-process broker: version negotiation, Metadata,
ListOffsets, Produce, OffsetForLeaderEpoch and Fetch round trips (the records as the raw
batches stored), pipelined requests from many tasks, and every way a connection ends
(timeout, refused, closed by the peer, an answer that is not one) failing what waits on
it and leaving no task behind.

What a real broker will not do on cue (stall, hang up mid-request, send garbage) comes
from a fake broker on an asyncio server in the test's own loop. pytest-asyncio is not
used: each test runs its coroutine with asyncio.run.
"""

from __future__ import annotations

import asyncio
import io
import re
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from odradek.client.aio import (
    DEFAULT_VERSIONS,
    MAX_IN_FLIGHT,
    AsyncBrokerConnection,
    KafkaClientError,
)
from odradek.client.codec import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    writer,
)
from odradek.client.connection import KafkaClientError as BlockingKafkaClientError
from odradek.protocol.messages import build
from odradek.records import builder, codecs
from odradek.testing import RunningBroker

LATEST, EARLIEST = -1, -2


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a test coroutine; afterwards no task of it may be left (the test's task is
    the only one when it ends)."""

    async def checked() -> Any:
        result = await coro
        leftover = asyncio.all_tasks() - {asyncio.current_task()}
        assert not leftover, leftover
        return result

    return asyncio.run(checked())


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(10)


async def connect(broker: RunningBroker, **kwargs: Any) -> AsyncBrokerConnection:
    kwargs.setdefault("timeout_s", 10.0)
    return await AsyncBrokerConnection.open(broker.host, broker.port,
                                            client_id="async-test", **kwargs)


def fetch_request(topic: str, offset: int, *, max_wait_ms: int = 0) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}]}


def list_offsets_request(topic: str, partition: int, timestamp: int) -> dict[str, Any]:
    return {"replica_id": -1, "isolation_level": 0, "topics": [{
        "name": topic, "partitions": [{"partition_index": partition,
                                       "current_leader_epoch": -1,
                                       "timestamp": timestamp}]}]}


async def produce(conn: AsyncBrokerConnection, topic: str, partition: int,
                  batch: bytes) -> int:
    answer = await conn.request(PRODUCE, {
        "transactional_id": None, "acks": -1, "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": batch}]}]})
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none
    return int(part.base_offset)


# --- against the in-process broker ---------------------------------------------------------


def test_negotiation_picks_the_highest_version_both_sides_serve(broker):
    served = broker.broker.supported

    async def scenario() -> None:
        conn = await connect(broker)
        try:
            for key, (low, high) in DEFAULT_VERSIONS.items():
                if key in served and served[key][0] <= high and low <= served[key][1]:
                    assert conn.version(key) == min(high, served[key][1]), key
                else:  # not (yet) served by this broker: the error says what is missing
                    with pytest.raises(KafkaClientError, match=f"API key {key}"):
                        conn.version(key)
            assert conn.version(FETCH) == 12  # the top of both ranges
            assert conn.version(METADATA) == 12
        finally:
            await conn.close()

        narrowed = await connect(broker, versions={FETCH: (4, 10)})
        try:
            assert narrowed.version(FETCH) == 10  # the caller's top, not the broker's
            with pytest.raises(KafkaClientError, match="not opened to speak metadata"):
                narrowed.version(METADATA)
        finally:
            await narrowed.close()

        ahead = await connect(broker, versions={FETCH: (19, 20)})
        try:
            with pytest.raises(KafkaClientError,
                               match=r"does not serve fetch .* versions 19-20.*serves 4-18"):
                ahead.version(FETCH)
            with pytest.raises(KafkaClientError, match="does not serve fetch v19"):
                await ahead.request(FETCH, {}, version=19)
        finally:
            await ahead.close()

    run(scenario())


def test_metadata_and_list_offsets_round_trips(broker):
    create(broker.bootstrap, "accounts", partitions=3)

    async def scenario() -> None:
        conn = await connect(broker)
        try:
            meta = await conn.request(METADATA, {"topics": [{"name": "accounts"}],
                                                 "allow_auto_topic_creation": False})
            assert [(b.host, b.port) for b in meta.brokers] == [(broker.host, broker.port)]
            (topic,) = meta.topics
            assert (topic.name, topic.error_code) == ("accounts", ErrorCode.none)
            assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]

            await produce(conn, "accounts", 1, builder.build_simple([b"x", b"y", b"z"]))
            for partition, timestamp, offset in ((1, LATEST, 3), (1, EARLIEST, 0),
                                                 (2, LATEST, 0)):
                answer = await conn.request(LIST_OFFSETS,
                                            list_offsets_request("accounts", partition,
                                                                 timestamp))
                part = answer.topics[0].partitions[0]
                assert (part.partition_index, part.error_code, part.offset) == (
                    partition, ErrorCode.none, offset)

            old = await conn.request(METADATA, {"topics": [{"name": "accounts"}]}, version=1)
            assert old.topics[0].name == "accounts"  # a pinned older version works too
        finally:
            await conn.close()

    run(scenario())


def test_fetch_v12_returns_the_stored_batches_as_raw_bytes(broker):
    create(broker.bootstrap, "ledger")
    first = builder.build_simple([b"a", None, b"c" * 100], keys=[b"k1", None, b"k3"],
                                 timestamp=1_700_000_000_000)
    second = builder.build_simple([b"d", b"e"], timestamp=1_700_000_000_001,
                                  codec=codecs.ZSTD)

    async def scenario() -> None:
        conn = await connect(broker)
        try:
            assert await produce(conn, "ledger", 0, first) == 0
            assert await produce(conn, "ledger", 0, second) == 3
            answer = await conn.request(FETCH, fetch_request("ledger", 0), version=12)
            part = answer.responses[0].partitions[0]
            assert (part.error_code, part.high_watermark) == (ErrorCode.none, 5)
            raw = part.records
            assert isinstance(raw, bytes)
            # The broker sets base offset and leader epoch (bytes 0-7 and 12-15, outside
            # the CRC); from the magic byte on, each batch is the bytes produced.
            assert len(raw) == len(first) + len(second)
            assert raw[16:len(first)] == first[16:]
            assert raw[len(first) + 16:] == second[16:]
            batches = builder.decode_batches(raw)
            assert [r.offset for b in batches for r in b.records] == [0, 1, 2, 3, 4]
            assert [r.value for b in batches for r in b.records] == [
                b"a", None, b"c" * 100, b"d", b"e"]

            epochs = await conn.request(OFFSET_FOR_LEADER_EPOCH, {
                "replica_id": -1, "topics": [{"topic": "ledger", "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
            found = epochs.topics[0].partitions[0]
            assert (found.error_code, found.leader_epoch, found.end_offset) == (
                ErrorCode.none, 0, 5)
        finally:
            await conn.close()

    run(scenario())


def test_fifty_pipelined_requests_from_concurrent_tasks_get_their_own_answers(broker):
    create(broker.bootstrap, "spread", partitions=5)

    async def scenario() -> None:
        conn = await connect(broker)
        try:
            for partition in range(5):  # partition p holds p records
                if partition:
                    await produce(conn, "spread", partition,
                                  builder.build_simple([b"v"] * partition))

            async def latest(partition: int) -> int:
                answer = await conn.request(
                    LIST_OFFSETS, list_offsets_request("spread", partition, LATEST))
                return int(answer.topics[0].partitions[0].offset)

            async def metadata(i: int) -> str:
                answer = await conn.request(METADATA, {
                    "topics": [{"name": f"absent-{i}"}],
                    "allow_auto_topic_creation": False})
                assert answer.topics[0].error_code == ErrorCode.unknown_topic_or_partition
                return answer.topics[0].name

            calls: list[Awaitable[Any]] = [
                latest(i % 5) if i % 2 else metadata(i) for i in range(50)]
            answers = await asyncio.gather(*calls)
            assert answers == [i % 5 if i % 2 else f"absent-{i}" for i in range(50)]
            assert not conn.closed
        finally:
            await conn.close()

    run(scenario())


def test_a_timeout_closes_the_connection_and_fails_what_waits_on_it(broker):
    create(broker.bootstrap, "quiet")

    async def scenario() -> None:
        conn = await connect(broker)
        try:
            # An empty partition: the broker holds each fetch for its max_wait (5s).
            patient = asyncio.create_task(conn.request(
                FETCH, fetch_request("quiet", 0, max_wait_ms=5000), timeout_s=30))
            await asyncio.sleep(0)  # sent first
            started = time.monotonic()
            with pytest.raises(KafkaClientError,
                               match=r"127\.0\.0\.1:\d+ did not answer fetch v12 "
                                     r"\(request \d+\) within 0.3s"):
                await conn.request(FETCH, fetch_request("quiet", 0, max_wait_ms=5000),
                                   timeout_s=0.3)
            assert time.monotonic() - started < 3
            assert conn.closed
            with pytest.raises(KafkaClientError, match="did not answer fetch"):
                await patient  # failed at once, not after its own 30s
            assert time.monotonic() - started < 3
            with pytest.raises(KafkaClientError, match="did not answer fetch"):
                await conn.request(METADATA, {"topics": []})  # and it stays closed
        finally:
            await conn.close()
            await conn.close()  # idempotent

    run(scenario())


def test_close_ends_the_reader_task_and_fails_requests_still_waiting(broker):
    create(broker.bootstrap, "idle")

    async def scenario() -> None:
        before = asyncio.all_tasks()
        conn = await connect(broker)
        assert len(asyncio.all_tasks() - before) == 1  # its reader
        waiting = asyncio.create_task(conn.request(
            FETCH, fetch_request("idle", 0, max_wait_ms=5000)))
        await asyncio.sleep(0.05)
        await conn.close()
        assert conn.closed
        assert waiting.done()  # failed by close(), not left to its timeout
        assert asyncio.all_tasks() == before  # and the reader task is gone
        with pytest.raises(KafkaClientError, match="was closed"):
            await waiting

    run(scenario())


def test_a_caller_cancelled_mid_request_leaves_the_stream_in_step(broker):
    create(broker.bootstrap, "steps")

    async def scenario() -> None:
        conn = await connect(broker)
        try:
            slow = asyncio.create_task(conn.request(
                FETCH, fetch_request("steps", 0, max_wait_ms=300)))
            await asyncio.sleep(0.05)
            slow.cancel()  # its answer still comes, and must be read and dropped
            meta = await conn.request(METADATA, {"topics": [{"name": "steps"}]})
            assert meta.topics[0].name == "steps"
            assert slow.cancelled() and not conn.closed
        finally:
            await conn.close()

    run(scenario())


def test_connection_refused_is_a_quick_client_error():
    with socket.socket() as taken:  # bound, not listening: connecting is refused
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]

        async def scenario() -> None:
            started = time.monotonic()
            with pytest.raises(KafkaClientError, match=f"cannot connect to 127.0.0.1:{port}"):
                await AsyncBrokerConnection.open("127.0.0.1", port, client_id="t",
                                                 timeout_s=10)
            assert time.monotonic() - started < 1

        run(scenario())


def test_both_clients_raise_the_same_error_class():
    assert KafkaClientError is BlockingKafkaClientError


# --- against a fake broker -----------------------------------------------------------------

_REQUEST_HEAD = struct.Struct(">ihhi")  # size, api key, api version, correlation id

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[int, int, int]:
    """(api key, version, correlation id) of the next request; the rest is skipped."""
    size, api_key, version, correlation = _REQUEST_HEAD.unpack(await reader.readexactly(12))
    await reader.readexactly(size - 8)
    return api_key, version, correlation


def response_frame(api_key: int, version: int, correlation: int,
                   body: dict[str, Any]) -> bytes:
    schema = load_response_schema(api_key, version)
    buf = io.BytesIO()
    writer(schema.__header_schema__)(buf, build(schema.__header_schema__,
                                                {"correlation_id": correlation}))
    writer(schema)(buf, build(schema, body))
    return struct.pack(">i", buf.tell()) + buf.getvalue()


async def fake_broker(after_api_versions: Serve) -> asyncio.Server:
    """A listener that answers ApiVersions v0 (Metadata 0-12 served), then hands the
    connection to ``after_api_versions``."""

    async def serve(reader: asyncio.StreamReader, writer_: asyncio.StreamWriter) -> None:
        try:
            api_key, version, correlation = await read_request(reader)
            assert (api_key, version) == (API_VERSIONS, 0)
            writer_.write(response_frame(API_VERSIONS, 0, correlation, {
                "api_keys": [{"api_key": METADATA, "min_version": 0, "max_version": 12}]}))
            await after_api_versions(reader, writer_)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client hung up: the end these tests look for
        finally:
            writer_.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def with_fake_broker(after_api_versions: Serve,
                           test: Callable[[AsyncBrokerConnection], Awaitable[None]]) -> None:
    server = await fake_broker(after_api_versions)
    port = server.sockets[0].getsockname()[1]
    try:
        conn = await AsyncBrokerConnection.open("127.0.0.1", port, client_id="t",
                                                timeout_s=5)
        assert conn.version(METADATA) == 12
        try:
            await test(conn)
        finally:
            await conn.close()
    finally:
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.01)  # let the fake's connection handler finish


async def two_metadata_requests(conn: AsyncBrokerConnection) -> list[Any]:
    requests = [conn.request(METADATA, {"topics": [{"name": f"t{i}"}]}) for i in range(2)]
    return await asyncio.gather(*requests, return_exceptions=True)


async def hang_up_mid_request(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await reader.readexactly(6)  # a part of the next request, then the socket closes


async def answer_garbage(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    _, _, correlation = await read_request(reader)
    w.write(struct.pack(">ii", 9, correlation) + b"\xff" * 5)
    await reader.read()


async def answer_another_request(reader: asyncio.StreamReader, w: asyncio.StreamWriter
                                 ) -> None:
    _, version, correlation = await read_request(reader)
    w.write(response_frame(METADATA, version, correlation + 7, {}))
    await reader.read()


async def claim_a_huge_answer(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await read_request(reader)
    w.write(struct.pack(">i", 0x7FFF_FFFF))
    await reader.read()


async def cut_off_a_large_answer(reader: asyncio.StreamReader, w: asyncio.StreamWriter
                                 ) -> None:
    _, _, correlation = await read_request(reader)
    w.write(struct.pack(">ii", 100_000, correlation) + b"\0" * 50_000)  # half, then gone
    await w.drain()


@pytest.mark.parametrize(("peer", "error"), [
    (hang_up_mid_request, "closed the connection"),
    (cut_off_a_large_answer, "closed the connection"),
    (answer_garbage, "does not decode as MetadataResponse v12"),
    (answer_another_request, r"answered request \d+, not \d+"),
    (claim_a_huge_answer, "sent a response of 2147483647 bytes"),
])
def test_a_broken_peer_fails_every_waiting_request_naming_the_address(peer, error):
    async def test(conn: AsyncBrokerConnection) -> None:
        started = time.monotonic()
        first, second = await two_metadata_requests(conn)
        assert time.monotonic() - started < 2  # at once, not at a timeout
        for failure in (first, second):
            assert isinstance(failure, KafkaClientError)
            assert conn.address in str(failure)
            assert str(failure) == str(first)  # the one reason, for every request
        assert re.search(error, str(first)), str(first)
        assert conn.closed

    run(with_fake_broker(peer, test))


def test_a_large_answer_is_a_view_whose_buffer_serves_again_only_once_let_go():
    # A follower's Fetch answers (hundreds of KB) arrive in a buffer of their own and
    # reach its log as views of it, uncopied; that buffer takes a later answer once
    # nothing views the earlier one - never while the caller still holds it.
    size = 200_000

    async def answer_large(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            _, _, correlation = await read_request(reader)
            w.write(struct.pack(">ii", 4 + size, correlation) + bytes([correlation]) * size)

    def encode(correlation: int) -> bytes:  # a request head only: all the fake reads
        return struct.pack(">ihhi", 8, METADATA, 12, correlation)

    def decode(payload: bytes | memoryview, correlation: int) -> memoryview:
        assert isinstance(payload, memoryview)  # not copied out of its buffer
        assert struct.unpack_from(">i", payload)[0] == correlation
        return payload[4:]

    async def test(conn: AsyncBrokerConnection) -> None:
        async def call() -> memoryview:
            return await conn.call_encoded(METADATA, 12, encode, decode)

        first = await call()
        second = await call()
        kept, spare = first.obj, second.obj
        assert spare is not kept  # the first answer is still viewed: its buffer too
        del second
        third = await call()
        assert third.obj is spare  # let go, so used again
        assert bytes(first) == bytes([first_id := 2]) * size, first_id  # intact
        del first, third
        fourth = await call()
        assert fourth.obj in (kept, spare)

    run(with_fake_broker(answer_large, test))


def test_no_more_than_max_in_flight_requests_are_sent_before_answers():
    seen: list[int] = []

    async def answer_when_all_arrived(reader: asyncio.StreamReader,
                                      w: asyncio.StreamWriter) -> None:
        pending = []
        while len(pending) < MAX_IN_FLIGHT:  # every one sent before any answer: pipelined
            pending.append(await read_request(reader))
        try:  # ... and not one more while all those wait
            async with asyncio.timeout(0.2):
                pending.append(await read_request(reader))
        except TimeoutError:
            pass
        seen.append(len(pending))
        while True:
            for _, version, correlation in pending:
                w.write(response_frame(METADATA, version, correlation,
                                       {"topics": [{"name": f"c{correlation}"}]}))
            pending = [await read_request(reader)]

    async def test(conn: AsyncBrokerConnection) -> None:
        names = await asyncio.gather(*[
            conn.request(METADATA, {"topics": []}) for _ in range(MAX_IN_FLIGHT + 4)])
        # each caller got the answer to its own request (correlation ids 2, 3, ...)
        assert [n.topics[0].name for n in names] == [
            f"c{i + 2}" for i in range(MAX_IN_FLIGHT + 4)]

    run(with_fake_broker(answer_when_all_arrived, test))
    assert seen == [MAX_IN_FLIGHT]


def test_a_request_waiting_for_a_slot_times_out_without_closing():
    async def never_answer(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await reader.read()

    async def test(conn: AsyncBrokerConnection) -> None:
        stuck = [asyncio.create_task(conn.request(METADATA, {"topics": []}, timeout_s=1.0))
                 for _ in range(MAX_IN_FLIGHT)]
        await asyncio.sleep(0.05)
        with pytest.raises(KafkaClientError, match=f"behind {MAX_IN_FLIGHT} requests"):
            await conn.request(METADATA, {"topics": []}, timeout_s=0.1)
        assert not conn.closed  # nothing was sent: the stream is still in step
        results = await asyncio.gather(*stuck, return_exceptions=True)
        assert all(isinstance(r, KafkaClientError) for r in results)
        assert conn.closed  # these were sent, and not answered

    run(with_fake_broker(never_answer, test))


def test_a_fetch_answer_of_tens_of_megabytes_comes_whole(broker):
    create(broker.bootstrap, "bulk")
    batch = builder.build_simple([bytes(range(256)) * 3500])  # ~900 KB, under 1 MiB

    async def scenario() -> None:
        conn = await connect(broker)
        try:
            for _ in range(24):
                await produce(conn, "bulk", 0, batch)
            request = fetch_request("bulk", 0)
            request["max_bytes"] = 64 << 20
            request["topics"][0]["partitions"][0]["partition_max_bytes"] = 64 << 20
            started = time.monotonic()
            answer = await conn.request(FETCH, request)
            elapsed = time.monotonic() - started
            raw = answer.responses[0].partitions[0].records
            assert len(raw) == 24 * len(batch) > 20 << 20
            assert raw[-len(batch) + 16:] == batch[16:]
            assert elapsed < 5, elapsed
        finally:
            await conn.close()

    run(scenario())
