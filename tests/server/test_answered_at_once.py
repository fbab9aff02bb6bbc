"""Requests answered synchronously, from the bytes' arrival (``Connection._answer_now``:
Fetch and Produce), must be indistinguishable from requests answered by the request
loop: same bytes, same order, long polls still woken by appends, produce to a
flush.messages topic still answered after its fsync, and a bug still closes only its
connection.

The comparison runs the same requests against two brokers, one with the synchronous path
switched off (``handlers_now`` emptied), and compares the raw response frames."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.client.wire import WireClient
from odradek.records import builder
from odradek.testing import RunningBroker, running_broker

TOPIC = "answered"
DURABLE = "answered-durable"  # flush.messages=1: every produce waits for an fsync


@contextmanager
def two_brokers() -> Iterator[tuple[RunningBroker, RunningBroker]]:
    """(synchronous path on, off), each with TOPIC of 2 partitions."""
    with ExitStack() as stack:
        fast = stack.enter_context(running_broker())
        slow = stack.enter_context(running_broker())
        slow.broker.handlers_now = {}
        for b in (fast, slow):
            b.broker.create_topic(TOPIC, 2)
            b.broker.create_topic(DURABLE, 2, {"flush.messages": "1"})
        yield fast, slow


class RawClient(WireClient):
    """WireClient that hands back the response frame's bytes, undecoded."""

    def receive_raw(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)


def _fetch_body(version: int, partitions: list[tuple[int, int, int]], *, max_wait: int,
                min_bytes: int, max_bytes: int, isolation: int, session_id: int = 0,
                session_epoch: int = -1) -> dict:
    body = {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": isolation,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": pmax,
                 "current_leader_epoch": -1, "log_start_offset": -1}
                for p, offset, pmax in partitions]}] if partitions else []}
    if version >= 7:
        body.update(session_id=session_id, session_epoch=session_epoch,
                    forgotten_topics_data=[])
    if version >= 11:
        body["rack_id"] = ""
    return body


_fetch_shape = st.fixed_dictionaries({
    "version": st.integers(4, 12),
    "partitions": st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 60),
                                     st.sampled_from([1, 200, 5_000, 1 << 20])),
                           max_size=2, unique_by=lambda t: t[0]),
    "max_wait": st.sampled_from([0, 30]),
    "min_bytes": st.sampled_from([0, 1, 1 << 20]),
    "max_bytes": st.sampled_from([1, 3_000, 1 << 20]),
    "isolation": st.integers(0, 1),
    "session": st.sampled_from(["none", "new", "next"]),
})
_step = st.one_of(
    st.tuples(st.just("produce"), st.integers(0, 1), st.integers(1, 30),
              st.integers(1, 3_000), st.booleans(), st.sampled_from([-1, 0, 1, 7])),
    st.tuples(st.just("fetch"), _fetch_shape),
)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=12))
def test_requests_answered_at_once_are_byte_for_byte_those_of_the_request_loop(steps):
    with two_brokers() as brokers, ExitStack() as stack:
        clients = [stack.enter_context(RawClient(b.port)) for b in brokers]
        sessions = [(0, 0)] * len(clients)  # (id, next epoch) per broker
        for step in steps:
            answers = []
            for i, client in enumerate(clients):
                if step[0] == "produce":
                    _, partition, count, size, durable, acks = step
                    batch = builder.build_simple([b"v" * size] * count)
                    client.send(0, 7, {"acks": acks, "timeout": 5000, "topic_data": [
                        {"name": DURABLE if durable else TOPIC, "partition_data": [
                            {"index": partition, "records": batch},
                            {"index": 1 - partition, "records": batch}]}]})
                    if acks == 0:  # no answer; an ApiVersions request keeps them in step
                        client.send(18, 3, {"client_software_name": "t",
                                            "client_software_version": "1"})
                else:
                    shape = step[1]
                    version = shape["version"]
                    session_id, epoch = sessions[i]
                    if shape["session"] == "new" or (shape["session"] == "next"
                                                      and not session_id):
                        session_id, epoch = 0, 0
                    elif shape["session"] == "none":
                        session_id, epoch = 0, -1
                    client.send(1, version, _fetch_body(
                        version, shape["partitions"], max_wait=shape["max_wait"],
                        min_bytes=shape["min_bytes"], max_bytes=shape["max_bytes"],
                        isolation=shape["isolation"], session_id=session_id,
                        session_epoch=epoch))
                raw = client.receive_raw()
                if step[0] == "fetch" and version >= 7:
                    error, new_id = struct.unpack_from(">hi", raw, 8 + (version >= 12))
                    if not error and new_id:
                        sessions[i] = (new_id, 1 if new_id != session_id else epoch + 1)
                answers.append(raw)
            assert answers[0] == answers[1], step


def test_pipelined_fetches_are_answered_in_order_behind_a_long_poll(broker):
    broker.broker.create_topic(TOPIC, 2)
    batch = builder.build_simple([b"x" * 100] * 5)
    with RawClient(broker.port) as c:
        c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 1, "records": batch}]}]})
        # A long poll on the empty partition 0, then a fetch partition 1 can answer at
        # once, in one write: the second must wait for the first.
        polling = _fetch_body(12, [(0, 0, 1 << 20)], max_wait=400, min_bytes=1,
                              max_bytes=1 << 20, isolation=0)
        ready = _fetch_body(12, [(1, 0, 1 << 20)], max_wait=0, min_bytes=1,
                            max_bytes=1 << 20, isolation=0)
        start = time.monotonic()
        first = c.send(1, 12, polling)
        second = c.send(1, 12, ready)
        assert (first, second) == (2, 3)
        assert not c.receive(1, 12).responses[0].partitions[0].records
        assert time.monotonic() - start >= 0.39
        assert c.receive(1, 12).responses[0].partitions[0].records  # in order, after it


def _long_poll_in_thread(broker: RunningBroker, *, min_bytes: int, isolation: int,
                         ) -> tuple[threading.Thread, dict]:
    """A thread that sends a 20 s long poll of partition 0 from offset 0 and puts the
    response and the seconds it waited into the returned dict."""
    got: dict = {}

    def poll() -> None:
        with RawClient(broker.port, timeout=30) as c:
            start = time.monotonic()
            got["response"] = c.request(1, 12, _fetch_body(
                12, [(0, 0, 1 << 20)], max_wait=20_000, min_bytes=min_bytes,
                max_bytes=1 << 20, isolation=isolation))
            got["waited"] = time.monotonic() - start

    waiter = threading.Thread(target=poll)
    waiter.start()
    return waiter, got


def test_a_long_poll_answered_at_once_is_parked_and_woken_by_an_append(broker):
    broker.broker.create_topic(TOPIC, 2)
    waiter, got = _long_poll_in_thread(broker, min_bytes=1, isolation=1)
    time.sleep(0.3)
    with RawClient(broker.port) as c:
        # The same connection's next request is served while another one's is parked.
        c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [
                {"index": 0, "records": builder.build_simple([b"wake"])}]}]})
    waiter.join(25)
    assert got["waited"] < 10
    records = got["response"].responses[0].partitions[0].records
    assert builder.decode_batches(records)[0].records[0].value == b"wake"


def test_a_bug_in_a_fetch_answered_at_once_closes_only_that_connection(broker):
    def broken(_broker, _request):
        raise KeyError("a bug")

    broker.broker.create_topic(TOPIC, 2)
    real = broker.broker.handlers_now[1]
    broker.broker.handlers_now[1] = broken
    body = _fetch_body(12, [(0, 0, 1 << 20)], max_wait=0, min_bytes=1, max_bytes=1 << 20,
                       isolation=0)
    try:
        with RawClient(broker.port) as c:
            c.send(1, 12, body)
            with pytest.raises(ConnectionError):
                c.receive(1, 12)
    finally:
        broker.broker.handlers_now[1] = real
    with RawClient(broker.port) as c:
        assert c.request(1, 12, body).responses[0].partitions[0].error_code.value == 0


def test_a_fetch_larger_than_the_socket_takes_at_once_arrives_whole(broker):
    """The synchronous path sends what the socket takes and leaves the rest to the
    request loop (asyncio's sendfile): a reader that waits first still gets every byte."""
    broker.broker.create_topic(TOPIC, 2)
    batch = builder.build_simple([b"y" * 1000] * 900)  # 12 of them: more than a socket takes
    with RawClient(broker.port, timeout=30) as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        for _ in range(12):
            response = c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
            assert response.responses[0].partition_responses[0].error_code.value == 0
        c.send(1, 12, _fetch_body(12, [(0, 0, 16 << 20)], max_wait=0, min_bytes=1,
                                  max_bytes=16 << 20, isolation=0))
        time.sleep(0.3)  # the broker has sent what fits and waits for the socket
        records = c.receive(1, 12).responses[0].partitions[0].records
        decoded = builder.decode_batches(records)
        assert [b.header.base_offset for b in decoded] == [900 * i for i in range(12)]
        assert decoded[-1].records[-1].value == b"y" * 1000
        # and the connection goes on with the next request
        assert c.request(3, 9, {"topics": None}).cluster_id


def _produce_one(c: WireClient, value: bytes, partition: int = 0) -> int:
    response = c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [
            {"index": partition, "records": builder.build_simple([value])}]}]})
    return response.responses[0].partition_responses[0].error_code.value


def _parked(broker: RunningBroker) -> int:
    """Delayed fetches watching a partition of TOPIC now."""
    return sum(len(w) for tp, w in broker.broker.purgatory._waiters.items() if tp[0] == TOPIC)


def test_a_long_poll_waits_through_appends_until_min_bytes_arrive(broker):
    """Each append reads again for the parked fetch; one that still gives less than
    min_bytes leaves it parked (watching again), the one that gets there answers it,
    long before max_wait, with everything appended meanwhile."""
    broker.broker.create_topic(TOPIC, 2)
    waiter, got = _long_poll_in_thread(broker, min_bytes=1000, isolation=0)
    time.sleep(0.3)
    with RawClient(broker.port) as c:
        for i in range(8):  # ~170 bytes a batch: the sixth passes 1,000 bytes
            assert _produce_one(c, b"%d" % i + b"." * 100) == 0
            if i < 4:
                time.sleep(0.05)
                assert waiter.is_alive() and _parked(broker) == 1
    waiter.join(25)
    assert got["waited"] < 10
    values = [r.value for b in builder.decode_batches(
        got["response"].responses[0].partitions[0].records) for r in b.records]
    assert len(values) >= 6 and values[0].startswith(b"0.")
    assert _parked(broker) == 0


def test_a_parked_fetch_whose_client_left_leaves_the_purgatory_at_its_max_wait(broker):
    """As in Kafka, a delayed fetch outlives its connection only until it expires: then
    it leaves the purgatory (nothing watches the partitions any more) and the failed
    send of its answer ends the connection's loop."""
    broker.broker.create_topic(TOPIC, 2)
    with RawClient(broker.port) as c:
        c.send(1, 12, _fetch_body(12, [(0, 0, 1 << 20), (1, 0, 1 << 20)], max_wait=800,
                                  min_bytes=1, max_bytes=1 << 20, isolation=0))
        deadline = time.monotonic() + 10
        while _parked(broker) != 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _parked(broker) == 2  # watching both partitions
    deadline = time.monotonic() + 10
    while (_parked(broker) or broker.broker._connections) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _parked(broker) == 0 and not broker.broker._connections
    with RawClient(broker.port) as c:
        assert _produce_one(c, b"after") == 0


def test_a_failure_reading_for_a_parked_fetch_fails_that_fetch_not_the_append(broker,
                                                                              monkeypatch):
    """An append wakes a parked fetch (at the event loop's next step), which reads again;
    if that read fails (a bug, a storage error) the fetch's connection is closed and the
    producer is answered as if nothing happened."""
    from odradek.server.handlers import fetch

    broker.broker.create_topic(TOPIC, 2)
    with RawClient(broker.port, timeout=30) as poller:
        poller.send(1, 12, _fetch_body(12, [(0, 0, 1 << 20)], max_wait=20_000, min_bytes=1,
                                       max_bytes=1 << 20, isolation=0))
        deadline = time.monotonic() + 10
        while _parked(broker) != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        real = fetch._read

        def failing(*args, **kwargs):
            raise OSError("the disk went away")

        monkeypatch.setattr(fetch, "_read", failing)
        try:
            with RawClient(broker.port) as c:
                assert _produce_one(c, b"kept") == 0
            with pytest.raises(ConnectionError):
                poller.receive(1, 12)
        finally:
            monkeypatch.setattr(fetch, "_read", real)
    assert _parked(broker) == 0
    with RawClient(broker.port) as c:
        body = _fetch_body(12, [(0, 0, 1 << 20)], max_wait=0, min_bytes=1, max_bytes=1 << 20,
                           isolation=0)
        records = c.request(1, 12, body).responses[0].partitions[0].records
        assert builder.decode_batches(records)[0].records[0].value == b"kept"


def test_a_woken_long_poll_is_answered_from_the_append_that_woke_it(broker, monkeypatch):
    """The parked fetch's answer goes out from its wake-up (the purgatory's, at the loop
    step after the append; not from the fetch's connection's request loop), and when it
    is larger than the socket takes, the request loop sends the rest: the consumer gets
    every byte, then its next answer."""
    from odradek.server.network.connection import Connection

    sent = []
    real = Connection._send_parked

    def recording(self, response):
        done = real(self, response)
        sent.append((done, self._unsent is not None))
        return done

    monkeypatch.setattr(Connection, "_send_parked", recording)
    broker.broker.create_topic(TOPIC, 2)
    # Twelve batches of ~900 KB in one append (each within max.message.bytes): more than
    # the socket takes at once.
    big = builder.build_simple([b"z" * 1000] * 900) * 12
    got = {}

    def poll() -> None:
        with RawClient(broker.port, timeout=30) as c:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            c.send(1, 12, _fetch_body(12, [(0, 0, 16 << 20)], max_wait=20_000, min_bytes=1,
                                      max_bytes=16 << 20, isolation=0))
            time.sleep(1.0)  # parked, woken, and what fits sent; the rest waits for us
            got["records"] = c.receive(1, 12).responses[0].partitions[0].records
            got["next"] = c.request(3, 9, {"topics": None}).cluster_id

    waiter = threading.Thread(target=poll)
    waiter.start()
    deadline = time.monotonic() + 10
    while _parked(broker) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    with RawClient(broker.port) as c:
        response = c.request(0, 7, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": big}]}]})
        assert response.responses[0].partition_responses[0].error_code.value == 0
    waiter.join(25)
    assert sent == [(True, True)]  # sent from the wake-up, the rest left to run()
    decoded = builder.decode_batches(got["records"])
    assert [b.header.base_offset for b in decoded] == [900 * i for i in range(12)]
    assert decoded[-1].records[-1].value == b"z" * 1000
    assert got["next"]


def test_long_polls_answered_from_their_wake_ups_leave_the_connection_serving(broker):
    """A long poll whose answer goes out whole from the append that woke it is finished
    there (the connection's request loop is not woken for it): poll after poll on one
    connection is parked and answered, each with the record that woke it, and the
    connection then answers its next request as usual."""
    broker.broker.create_topic(TOPIC, 2)
    with RawClient(broker.port, timeout=30) as poller, RawClient(broker.port) as producer:
        for i in range(3):
            poller.send(1, 12, _fetch_body(12, [(0, i, 1 << 20)], max_wait=20_000,
                                           min_bytes=1, max_bytes=1 << 20, isolation=0))
            deadline = time.monotonic() + 10
            while _parked(broker) != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _parked(broker) == 1
            assert _produce_one(producer, b"round %d" % i) == 0
            records = poller.receive(1, 12).responses[0].partitions[0].records
            assert builder.decode_batches(records)[0].records[0].value == b"round %d" % i
        assert poller.request(3, 9, {"topics": None}).cluster_id
    assert _parked(broker) == 0
