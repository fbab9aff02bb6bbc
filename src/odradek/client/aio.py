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

Answers are received the way the broker receives requests: the kernel writes them
straight into a ``protocol.framing.FrameDecoder``'s buffers (an asyncio
``BufferedProtocol``), and a large answer (a follower's Fetch) comes out as a view of
its own buffer, which the follower's decoder slices and its log writes without a copy.
Before, asyncio's StreamReader copied every replicated byte three times (into its
buffer, out as the frame, out again as the records).

It owns its socket and its reader task and nothing else: no reconnection, no metadata,
no retries (the fetcher above it knows which errors are worth another try).
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kio.index import KioIndexError

from odradek.client import secure
from odradek.client.codec import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    MAX_RESPONSE_BYTES,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
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
from odradek.protocol.extra_schemas import load_request_schema
from odradek.protocol.framing import BufferPool, FrameDecoder, FrameError
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
# Large answers' buffers kept for the next ones, per connection (a follower's Fetch
# answers are up to replica.fetch.response.max.bytes, usually far less).
POOLED_BYTES = 4 * 1024 * 1024


# A request encoded by hand: the frame for a correlation id (size prefix included).
Encode = Callable[[int], bytes | memoryview]
# Its answer decoded by hand: the frame without its size prefix (bytes, or a view of a
# buffer of its own for a large one: views of it stay valid), and the correlation id it
# must answer; DecodeError when it does not decode.
Decode = Callable[[bytes | memoryview, int], Any]


@dataclasses.dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    answer: asyncio.Future[Any]
    decode: Decode | None = None  # None: kio's reader (client/codec.decode_response)


class _Receiver(asyncio.BufferedProtocol):
    """The socket's receiving side: bytes go straight into ``decoder``; ``frame()``
    waits for the next whole answer. Frames whose answers have been handed out are kept
    in ``spent`` until nothing views them (the caller is done with the records sliced
    from them), and their buffers then go back to the decoder's pool, before the next
    answer needs one."""

    def __init__(self, decoder: FrameDecoder) -> None:
        self.decoder = decoder
        self.spent: list[bytearray] = []
        self.ended = False  # no more bytes come
        self.lost: Exception | None = None  # the error that ended it, if one did
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiter: asyncio.Future[None] | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.spent:
            self._recycle()
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.decoder.buffer_updated(nbytes)
        if self.decoder.queued or self.decoder.error is not None:
            self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended:
            self.ended, self.lost = True, exc
        self._wake()
        if not self.closed.done():
            self.closed.set_result(None)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def frame(self) -> bytes | memoryview | None:
        """The next answer frame (FrameError if the peer broke the framing); None once
        the connection has ended with none left."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not None or self.ended:
                return frame
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    def done_with(self, frame: bytes | memoryview) -> None:
        """``frame``'s answer is handed out: its buffer is reused once nothing views it."""
        if isinstance(frame, memoryview) and isinstance(frame.obj, bytearray):
            self.spent.append(frame.obj)
            if len(self.spent) > 4:  # still viewed long after: let it go
                del self.spent[0]

    def _recycle(self) -> None:
        give = self.decoder.pool.give
        self.spent = [buf for buf in self.spent if not give(buf)]


class AsyncBrokerConnection:
    """One asyncio connection to one broker, its API versions known.

    Open it with ``await AsyncBrokerConnection.open(...)``; close it with ``await
    conn.close()``. Once closed (by the caller, a timeout, or a failure) it stays closed
    and every request fails with the reason: make a new one."""

    def __init__(self, receiver: _Receiver, transport: asyncio.Transport, *,
                 address: str, client_id: str, timeout_s: float,
                 spoken: Mapping[int, tuple[int, int]]) -> None:
        self.address = address
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.spoken = dict(spoken)  # api key -> (min, max) the caller can speak
        self.served: dict[int, tuple[int, int]] = {}  # ... and the broker serves
        self.versions: dict[int, int] = {}  # the negotiated version of each
        self._receiver = receiver
        self._transport = transport
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
        receiver = _Receiver(FrameDecoder(MAX_RESPONSE_BYTES, BufferPool(POOLED_BYTES)))
        try:
            async with asyncio.timeout(timeout_s):
                transport, _ = await asyncio.get_running_loop().create_connection(
                    lambda: receiver, host, port, ssl=tls)
        except TimeoutError:  # before OSError: it is one
            raise KafkaClientError(f"cannot connect to {address}: no answer within "
                                   f"{timeout_s:g}s") from None
        except (OSError, ssl.SSLError) as exc:
            raise KafkaClientError(f"cannot connect to {address}: {exc}") from None
        assert isinstance(transport, asyncio.Transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # requests are small and answered one by one: no Nagle delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        spoken = dict(DEFAULT_VERSIONS if versions is None else versions)
        if sasl is not None:
            spoken.update(secure.SPOKEN)
        conn = cls(receiver, transport, address=address, client_id=client_id,
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
        self._transport.write(frame)
        return entry

    async def _read_responses(self) -> None:
        """The reader task: answers arrive in request order (Kafka answers a connection's
        requests one at a time), each for the oldest request not yet answered."""
        receiver = self._receiver
        try:
            while True:
                try:
                    payload = await receiver.frame()
                except FrameError as exc:  # checked before anything of it is received
                    check_response_size(-1 if exc.size is None else exc.size, self.address)
                    raise
                if payload is None:
                    lost = receiver.lost
                    raise KafkaClientError(
                        f"{self.address} closed the connection" if lost is None
                        else f"connection to {self.address} failed: {lost}")
                check_response_size(len(payload), self.address)
                if not self._in_flight:
                    raise KafkaClientError(f"{self.address} sent an answer to no request")
                entry = self._in_flight[0]
                # Decoded while still queued: if it fails, _fail fails this request too.
                if entry.decode is None:  # kio's reader needs bytes
                    answer = decode_response(bytes(payload), entry.api_key, entry.version,
                                             entry.correlation_id, self.address)
                else:
                    try:
                        answer = entry.decode(payload, entry.correlation_id)
                    except DecodeError as exc:
                        raise KafkaClientError(
                            f"{self.address} sent a response that does not decode as "
                            f"{api_name(entry.api_key)} v{entry.version}: {exc}") from None
                receiver.done_with(payload)
                del payload  # a Fetch answer can be tens of MB: not kept until the next
                self._in_flight.popleft()
                self._slots.release()
                if not entry.answer.done():  # done: its caller gave up (cancelled)
                    entry.answer.set_result(answer)
                # Not held while the next answer comes: it may view this one's buffer.
                del entry, answer
        except FrameError as exc:
            self._fail(f"{self.address} broke the framing: {exc}")
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
        self._transport.abort()  # not close(): it would wait to send what is queued
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
        await asyncio.wait([self._receiver.closed])  # the transport's end

    async def close(self) -> None:
        """Close the connection and wait for its reader task to end (idempotent).
        Requests still waiting for answers fail with KafkaClientError."""
        await self._close(f"the connection to {self.address} was closed")
