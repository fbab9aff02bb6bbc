"""An asyncio Kafka client connection, for the traffic between brokers.

Replication makes brokers clients of each other: follower fetchers send Fetch, a new
follower or leader asks OffsetForLeaderEpoch where to truncate, the transaction runtime
sends WriteTxnMarkers. All of that runs on the broker's event loop, where the blocking
``client.connection.BrokerConnection`` (the Spark reader's: one request at a time, the
calling thread parked on its socket) would stall every other connection. This is its
asyncio twin: the same wire format and version negotiation (``client.codec``), but
requests from several tasks are pipelined on one connection, their answers matched in
order by one reader task the connection owns, and every wait is a cancellable await
bounded by a timeout.

It owns its socket and its reader task and nothing else: no reconnection, no metadata,
no retries (the fetcher above it knows which errors are worth another try).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kio.index import KioIndexError, load_request_schema

from odradek.client import secure
from odradek.client.codec import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SIZE,
    WRITE_TXN_MARKERS,
    KafkaClientError,
    api_name,
    check_response_size,
    decode_response,
    encode_request,
    negotiate,
    served_versions,
)
from odradek.client.secure import SaslLogin
from odradek.protocol.messages import build
from odradek.protocol.reader import DecodeError

__all__ = ["DEFAULT_VERSIONS", "MAX_IN_FLIGHT", "AsyncBrokerConnection", "KafkaClientError"]

# The versions a broker speaks to another unless the caller narrows them: Fetch v4
# (record batches v2, the last stable offset) to v12 (the last with topic names; v13 uses
# topic ids), OffsetForLeaderEpoch v3 (the first with a replica id) and v4 (flexible),
# WriteTxnMarkers v1 (Kafka 4 dropped v0), Produce v3 (the first with v2 batches only)
# to v9, Metadata 1-12 and ListOffsets 1-7 as the blocking client.
DEFAULT_VERSIONS: dict[int, tuple[int, int]] = {
    FETCH: (4, 12),
    OFFSET_FOR_LEADER_EPOCH: (3, 4),
    WRITE_TXN_MARKERS: (1, 1),
    METADATA: (1, 12),
    LIST_OFFSETS: (1, 7),
    PRODUCE: (3, 9),
    API_VERSIONS: (0, 3),
}
# Requests sent and not yet answered, per connection. Odradek's broker stops reading a
# connection that has 16 requests queued (server/network/connection.py, MAX_QUEUED_REQUESTS), so
# more would only wait in socket buffers while their timeouts run; the bound also caps
# the request bytes a runaway caller can queue in this process, which is why writes are
# not awaited (drained) one by one.
MAX_IN_FLIGHT = 16
# asyncio's StreamReader stops reading the socket past twice this many unread bytes. Its
# default (64 KiB) would pause and resume reading hundreds of times during one follower
# Fetch answer of tens of MB; the reader task takes each frame as soon as it is whole,
# so this only bounds what piles up between two of its reads.
READ_LIMIT = 4 * 1024 * 1024


# A request encoded by hand: the frame for a correlation id (size prefix included).
Encode = Callable[[int], bytes | memoryview]
# Its answer decoded by hand: the frame without its size prefix, and the correlation id
# it must answer; DecodeError when it does not decode.
Decode = Callable[[bytes, int], Any]


@dataclasses.dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    answer: asyncio.Future[Any]
    decode: Decode | None = None  # None: kio's reader (client/codec.decode_response)


class AsyncBrokerConnection:
    """One asyncio connection to one broker, its API versions known.

    Open it with ``await AsyncBrokerConnection.open(...)``; close it with ``await
    conn.close()``. Once closed (by the caller, a timeout, or a failure) it stays closed
    and every request fails with the reason: make a new one."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 address: str, client_id: str, timeout_s: float,
                 spoken: Mapping[int, tuple[int, int]]) -> None:
        self.address = address
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.spoken = dict(spoken)  # api key -> (min, max) the caller can speak
        self.served: dict[int, tuple[int, int]] = {}  # ... and the broker serves
        self.versions: dict[int, int] = {}  # the negotiated version of each
        self._reader = reader
        self._writer = writer
        self._in_flight: deque[_InFlight] = deque()  # in the order sent = answered
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)  # one per _in_flight entry
        self._correlation = 0
        self._failure: str | None = None  # why it closed; None while open
        self._reader_task = asyncio.get_running_loop().create_task(
            self._read_responses(), name=f"odradek client reader {address}")

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout_s: float,
                   versions: Mapping[int, tuple[int, int]] | None = None,
                   tls: ssl.SSLContext | None = None, sasl: SaslLogin | None = None,
                   ) -> AsyncBrokerConnection:
        """Connect (over TLS with ``tls``), negotiate versions with ApiVersions and log in
        (with ``sasl``); ``versions`` (api key -> (min, max)) are those the caller can
        speak, DEFAULT_VERSIONS if not given. Connecting, the TLS handshake, negotiating
        and logging in are each bounded by ``timeout_s``."""
        address = f"{host}:{port}"
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port, limit=READ_LIMIT,
                                                               ssl=tls)
        except TimeoutError:  # before OSError: it is one
            raise KafkaClientError(f"cannot connect to {address}: no answer within "
                                   f"{timeout_s:g}s") from None
        except (OSError, ssl.SSLError) as exc:
            raise KafkaClientError(f"cannot connect to {address}: {exc}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:  # requests are small and answered one by one: no Nagle delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        spoken = dict(DEFAULT_VERSIONS if versions is None else versions)
        if sasl is not None:
            spoken.update(secure.SPOKEN)
        conn = cls(reader, writer, address=address, client_id=client_id,
                   timeout_s=timeout_s, spoken=spoken)
        try:
            # v0: every broker answers it, and its answer lists all the versions needed.
            answer = await conn.call(load_request_schema(API_VERSIONS, 0)())
            conn.served = served_versions(answer, address)
            conn.versions = negotiate(conn.served, conn.spoken)
            if sasl is not None:
                steps = secure.login_steps(sasl, address)
                try:
                    step = next(steps)
                    while True:
                        step = steps.send(await conn.request(*step))
                except StopIteration:
                    pass
        except BaseException:
            await conn.close()
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._failure is not None

    def version(self, api_key: int) -> int:
        """The version to use for an API, or KafkaClientError naming what is missing."""
        if api_key in self.versions:
            return self.versions[api_key]
        name = f"{api_name(api_key)} (API key {api_key})"
        if api_key not in self.spoken:
            raise KafkaClientError(f"the connection to {self.address} was not opened to "
                                   f"speak {name}: give its versions to open()")
        low, high = self.spoken[api_key]
        served = self.served.get(api_key)
        broker = f"serves {served[0]}-{served[1]}" if served else "does not serve it"
        raise KafkaClientError(f"{self.address} does not serve {name} at versions "
                               f"{low}-{high}, which this client needs (the broker {broker})")

    async def request(self, api_key: int, data: Mapping[str, Any], *,
                      version: int | None = None, timeout_s: float | None = None) -> Any:
        """Send ``data`` (plain values; see protocol.messages.build) as ``api_key`` at
        ``version`` (default: the negotiated one) and return the decoded response body.
        An explicit version must be one the broker serves."""
        if version is None:
            version = self.version(api_key)
        else:
            low, high = self.served.get(api_key, (0, -1))
            if not low <= version <= high:
                raise KafkaClientError(f"{self.address} does not serve {api_name(api_key)} "
                                       f"v{version}")
        try:
            schema = load_request_schema(api_key, version)
        except KioIndexError:
            raise KafkaClientError(f"kio has no {api_name(api_key)} v{version}") from None
        return await self.call(build(schema, data), timeout_s=timeout_s)

    async def call(self, body: Any, *, timeout_s: float | None = None) -> Any:
        """Send one kio request body and return its decoded response body.

        Bounded by ``timeout_s`` (default: the connection's) from the call on. A request
        that was sent and not answered in time closes the connection: its answer may
        still come, and every answer after it would be matched to the wrong request."""
        schema = type(body)
        client_id = self.client_id
        return await self.call_encoded(
            schema.__api_key__, schema.__version__,
            lambda correlation: encode_request(body, correlation, client_id), None,
            timeout_s=timeout_s)

    async def call_encoded(self, api_key: int, version: int, encode: Encode,
                           decode: Decode | None, *, timeout_s: float | None = None) -> Any:
        """``call`` for a request ``encode`` frames by hand (``api_key`` at ``version``,
        which the caller checked the broker serves); ``decode`` reads its answer (None:
        kio's reader). A frame ``decode`` refuses closes the connection, as one kio's
        reader refuses does."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        what = f"{api_name(api_key)} v{version}"
        entry: _InFlight | None = None
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
                entry = self._send(api_key, version, encode, decode)
                # A caller cancelled here cancels this future, not the request: its answer
                # is still read off the stream, and dropped.
                return await entry.answer
        except TimeoutError:
            if entry is None:  # never sent: the stream is intact
                raise KafkaClientError(f"{what} to {self.address} waited {timeout:g}s "
                                       f"behind {MAX_IN_FLIGHT} requests in flight") from None
            error = (f"{self.address} did not answer {what} (request {entry.correlation_id})"
                     f" within {timeout:g}s")
            await self._close(error)
            raise KafkaClientError(error) from None

    def _send(self, api_key: int, version: int, encode: Encode, decode: Decode | None
              ) -> _InFlight:
        """Queue and write one request; the caller holds a slot, which becomes the
        entry's. No await: what is written and the queue's order must not diverge."""
        if self._failure is not None:
            self._slots.release()
            raise KafkaClientError(self._failure)
        correlation = self._correlation % 0x7FFF_FFFF + 1  # an int32 that wraps, never 0
        try:
            frame = encode(correlation)
        except BaseException:
            self._slots.release()
            raise
        self._correlation = correlation
        entry = _InFlight(correlation, api_key, version,
                          asyncio.get_running_loop().create_future(), decode)
        self._in_flight.append(entry)
        self._writer.write(frame)
        return entry

    async def _read_responses(self) -> None:
        """The reader task: answers arrive in request order (Kafka answers a connection's
        requests one at a time), each for the oldest request not yet answered."""
        try:
            while True:
                size = SIZE.unpack(await self._reader.readexactly(4))[0]
                check_response_size(size, self.address)  # before allocating that much
                payload = await self._reader.readexactly(size)  # one bytes: kio needs it
                if not self._in_flight:
                    raise KafkaClientError(f"{self.address} sent an answer to no request")
                entry = self._in_flight[0]
                # Decoded while still queued: if it fails, _fail fails this request too.
                if entry.decode is None:
                    answer = decode_response(payload, entry.api_key, entry.version,
                                             entry.correlation_id, self.address)
                else:
                    try:
                        answer = entry.decode(payload, entry.correlation_id)
                    except DecodeError as exc:
                        raise KafkaClientError(
                            f"{self.address} sent a response that does not decode as "
                            f"{api_name(entry.api_key)} v{entry.version}: {exc}") from None
                del payload  # a Fetch answer can be tens of MB: not kept until the next
                self._in_flight.popleft()
                self._slots.release()
                if not entry.answer.done():  # done: its caller gave up (cancelled)
                    entry.answer.set_result(answer)
        except asyncio.IncompleteReadError:
            self._fail(f"{self.address} closed the connection")
        except KafkaClientError as exc:
            self._fail(str(exc))
        except OSError as exc:
            self._fail(f"connection to {self.address} failed: {exc}")
        except Exception as exc:  # a bug here must not leave callers waiting out timeouts
            self._fail(f"reading from {self.address} failed: {exc!r}")
            raise

    def _fail(self, error: str) -> None:
        """Close at once (idempotent): drop unsent bytes, fail every request in flight
        with ``error``, stop the reader task (without waiting for it: see _close)."""
        if self._failure is not None:
            return
        self._failure = error
        self._writer.transport.abort()  # not close(): it would wait to send what is queued
        while self._in_flight:
            entry = self._in_flight.popleft()
            if not entry.answer.done():
                entry.answer.set_exception(KafkaClientError(error))
            # Wakes a caller waiting for a slot, which then finds the connection closed
            # (and hands its slot on to the next one).
            self._slots.release()
        if self._reader_task is not asyncio.current_task():
            self._reader_task.cancel()

    async def _close(self, error: str) -> None:
        self._fail(error)
        if self._reader_task is not asyncio.current_task():
            # wait(), not await: the reader's cancellation is not ours to raise, while a
            # cancellation of the caller still is.
            await asyncio.wait([self._reader_task])
        with contextlib.suppress(OSError):  # the reason is recorded already
            await self._writer.wait_closed()

    async def close(self) -> None:
        """Close the connection and wait for its reader task to end (idempotent).
        Requests still waiting for answers fail with KafkaClientError."""
        await self._close(f"the connection to {self.address} was closed")
