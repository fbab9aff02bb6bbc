"""One client connection: the kernel receives straight into the frame decoder's buffers
(an ``asyncio.BufferedProtocol``), requests are handled one at a time in arrival order
(Kafka mutes a channel while its request is in flight, so pipelined requests are answered
in order), and responses go out — record bytes by ``sendfile``.

A request that arrives while the connection has nothing in progress, of an API with a
synchronous handler (Fetch, Produce), is answered at once from ``buffer_updated``: no
task step, future or coroutine per request (each cost a pass of the event loop; at one
fetch per ~1 MB, those passes were a large share of a consuming broker's CPU). What
cannot finish at once — a long poll, an fsync to wait for, bytes the socket does not
take — is handed to the request loop, which finishes it before it takes the next
request, so answers stay in order.

Why a protocol and not asyncio streams: a StreamReader copies every received byte twice
more (into its buffer, out of it) before the decoder sees it, and produce requests are
most of the bytes a broker receives. Here a large request is received into a buffer of
its own, and its records reach the log as views of it.

Whatever a peer sends, the worst outcome is that this one connection is closed with one
log line: a frame over ``socket.request.max.bytes`` or with a negative size is refused
before anything is allocated for it; an undecodable request or an unknown API version
closes the connection, as Kafka does (ApiVersions excepted: it answers with the versions
it serves); a peer that goes silent is dropped after ``connections.max.idle.ms``; a peer
that stops reading its responses is dropped after the same time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from odradek.protocol.codec import (
    CorruptRequestError,
    UnsupportedVersionError,
    decode_request,
)
from odradek.protocol.framing import FrameDecoder, FrameError
from odradek.server.metrics import T_LOCAL, T_READY, RequestTiming, new_timing
from odradek.server.network.session import Session
from odradek.storage.log import FileRegion

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.config import Listener

log = logging.getLogger(__name__)

# Received requests not yet handled, beyond which the socket is not read (the rest waits
# in the kernel's buffers, and the client's own in-flight limit does the rest).
MAX_QUEUED_REQUESTS = 16
MAX_QUEUED_BYTES = 4 * 1024 * 1024
# Responses with up to this many bytes of records are read and written whole in one
# send, one pread and one write, instead of separate writes around a sendfile (a
# consumer that keeps up fetches a few KiB at a time; copying that much is cheap; the
# threshold is a judgement, not a measured optimum). Larger regions go by sendfile, the
# bytes never entering Python.
COPY_REGION_MAX_BYTES = 64 * 1024
# TLS: a margin for what the TLS layer may hold undecrypted (two records of 16 KiB), and
# the highest SO_RCVLOWAT set (see Connection._wake_for).
TLS_HELD_BYTES = 32 * 1024
RCVLOWAT_MAX_BYTES = 1024 * 1024

Response = bytes | list[bytes | FileRegion] | None


class ConnectionClosed(Exception):
    """This connection must end (a protocol violation or an unsendable response)."""


class SessionEnded(ConnectionClosed):
    """The connection's security session ends it: a failed login, a request before
    authentication, an expired session. Logged at INFO (as Kafka logs failed
    authentications): a client retrying a wrong password must not flood the log."""


class Connection(asyncio.BufferedProtocol):
    """The protocol object of one accepted socket; ``run()`` is its request loop."""

    def __init__(self, broker: Broker, listener: Listener) -> None:
        self.broker = broker
        self.listener = listener
        self.session: Session | None = None  # from connection_made
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"],
                                    pool=broker.buffer_pool)
        self.idle_s = broker.config["connections.max.idle.ms"] / 1000
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_id: str | None = None  # of the last request run() decoded (for logs)
        self.in_request = False
        self._input: asyncio.Future[None] | None = None  # set when run() waits for bytes
        self._writable: asyncio.Future[None] | None = None  # set when a drain waits
        self._write_paused = False
        self._reading_paused = False
        self._eof = False
        self._lost = False
        self._sock_fd = -1  # for sendfile straight to the socket
        # TLS: the raw socket, whose SO_RCVLOWAT asks the kernel to wake the loop only
        # once most of a large request's rest has arrived (see _wake_for).
        self._tls_sock: socket.socket | None = None
        self._rcvlowat = 1
        # Left by a request answered in buffer_updated, to finish before the next
        # request: a long poll still to await (with its frame; one that hands its answer
        # over finishes itself through _parked_done unless run() takes it over), or
        # response parts still to send ([] when only a drain is due).
        self._parked: tuple[bytes | memoryview, Awaitable[Response]] | None = None
        self._unsent: list[bytes | FileRegion] | None = None
        # metrics.listen (RequestMetrics' time split, server.metrics.RequestTiming): when
        # each queued frame was read, oldest first (one entry per frame the decoder
        # holds), and the moments of the request buffer_updated started that run() is to
        # finish. None without metrics: then the only cost is that test.
        self._arrivals: deque[float] | None = deque() if broker.stats is not None else None
        self._timing: RequestTiming | None = None
        # Idle detection without a timer per wait: reads are counted, and the broker's
        # sweep (reap_idle) closes a connection whose count has not moved for
        # connections.max.idle.ms while it had no request in progress.
        self.reads = 0
        self._reads_seen = 0
        self._quiet_since = time.monotonic()

    # --- asyncio.BufferedProtocol --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Under TLS the record bytes must pass through the encryption: no sendfile to the
        # socket (regions are read and written through the transport instead).
        tls = self.listener.tls
        self._sock_fd = sock.fileno() if sock is not None and not tls else -1
        self._tls_sock = sock if tls and sock is not None else None
        self.session = self.broker.new_session(self.listener, transport,
                                               peer[0] if isinstance(peer, tuple) else "")
        # Kafka's Acceptor logs accepted connections at DEBUG too (one test per connection).
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: connection accepted on listener %s", self.peer, self.listener.name,
                      extra=self.log_context())
        self.broker.accept(self)  # runs run() as a task the broker owns

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.reads += 1
        decoder = self.decoder
        decoder.buffer_updated(nbytes)
        if self._tls_sock is not None:
            self._wake_for(decoder.frame_missing)
        queued = decoder.queued
        if queued or decoder.error is not None:
            waiter = self._input
            # run() waits for input with nothing in progress, and this is the one frame
            # waiting: answering it here keeps the order of answers (its read time is
            # when _try_now starts it: no queue time).
            if (queued == 1 and waiter is not None and not waiter.done()
                    and decoder.error is None and self._parked is None
                    and self._unsent is None and self._answer_now()):
                return
            arrivals = self._arrivals
            if arrivals is not None and queued > len(arrivals):
                # metrics.listen: frames completed by this read, left to run(): read now.
                now = time.perf_counter()
                arrivals.extend([now] * (queued - len(arrivals)))
            if (queued >= MAX_QUEUED_REQUESTS or decoder.queued_bytes >= MAX_QUEUED_BYTES
                    or decoder.error is not None):
                self._pause_reading()
            self._wake_input()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake_input()
        return False  # close our side too: a Kafka client never half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake_input()
        waiter = self._writable
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiter = self._writable
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_for(self, missing: int) -> None:
        """Under TLS, mid-way through a large request, have the socket report itself
        readable only once ``missing`` bytes (less what the TLS layer may hold already,
        TLS_HELD_BYTES) are there, at most RCVLOWAT_MAX_BYTES.

        A TLS client writes a large request as 16 KiB records, one send each, and a loop
        woken for every few of them spends most of its time going round (measured: 13
        reads per 1 MB produce request under TLS, 2 in plaintext, where the kernel
        delivers the request's single write in large pieces). Encrypted bytes are never
        fewer than the plaintext they carry, so the request's rest always reaches the
        mark (asyncio's TLS layer drains what it holds by itself when our buffer fills,
        and a lower mark set then wakes the loop at once if the bytes are there); the
        end of the stream is reported whatever the mark. Measured (broker CPU per
        record, TLS / plaintext, ~1 MB produce requests of 100-byte records from a
        producer process of its own): 3.0x before, 1.9x with it; bench/security_bench.py's
        load, whose reads were large already, 2.2x either way."""
        want = min(max(missing - TLS_HELD_BYTES, 1), RCVLOWAT_MAX_BYTES)
        if want != self._rcvlowat and self._tls_sock is not None:
            self._rcvlowat = want
            try:
                self._tls_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, want)
            except OSError:
                self._tls_sock = None  # not supported here: wake per arrival, as before

    # --- the request loop ----------------------------------------------------------------

    def _answer_now(self) -> bool:
        """Answer the waiting frame synchronously if its API has a synchronous handler;
        False leaves it to run() (which decodes it again: it is then either an error or
        an API without one)."""
        broker = self.broker
        frame = self.decoder.peek_frame()
        if frame is None or len(frame) < 2 or frame[0] != 0 or broker.stopping:
            return False
        session = self.session
        if session is not None and (not session.authenticated
                                    or session.expires_at is not None
                                    or session.muted_until):
            return False  # run() checks what the session allows, and sits out a throttle
        handle_now = broker.handlers_now.get(frame[1])
        if handle_now is None:
            return False
        try:
            request = decode_request(frame, broker.supported, self.session)
        except Exception:  # ProtocolError or worse: run() meets it again, as it would
            return False
        self.decoder.next_frame()  # taken: this frame is answered here or parked for run()
        started = time.perf_counter()
        quotas = broker.quotas
        limit = (quotas.request_limit(request)
                 if quotas is not None and quotas.active else None)
        try:
            if limit is not None:
                assert quotas is not None and session is not None
                session.throttle_ms = quotas.request_throttle(limit)
                started = time.perf_counter()
                response = handle_now(broker, request)
                quotas.record_request_time(limit, time.perf_counter() - started)
            else:
                response = handle_now(broker, request)
            # metrics.listen: the handler's synchronous part is local time (without
            # metrics this block is the one test per request).
            timing = None
            if self._arrivals is not None:
                now = time.perf_counter()
                # new_timing written out (see server.metrics.RequestTiming); read when
                # started (buffer_updated calls this for the frame it completed).
                timing = [request.api_key, started, started, now - started,
                          now if response is None or isinstance(response, (bytes, list))
                          else 0.0, 0.0, request.api_version]
            if response is not None and not isinstance(response, (bytes, list)):
                self._parked = (frame, response)
                self._timing = timing
                frame = b""  # recycled once the parked request is done
                if hasattr(response, "sender") and hasattr(response, "on_done"):
                    # It hands its answer over when made (_send_parked) and says when it
                    # is done (_parked_done), which finishes the request there: run()
                    # sleeps on, unless more input comes first (then it takes over).
                    response.sender = self._send_parked
                    response.on_done = self._parked_done
                else:
                    self._wake_input()
            else:
                if response is not None:
                    self._unsent = self._send_now(response)
                    if self._unsent is not None:
                        self._timing = timing  # done once run() has sent the rest
                        timing = None
                        self._wake_input()
                if session is not None and session.throttle_ms:
                    self._mute()
                if timing is not None and broker.stats is not None:
                    broker.stats.request_done(timing, time.perf_counter())
        except Exception as exc:
            self.client_id = request.client_id
            self._closing_after(exc)
        finally:
            self.decoder.recycle(frame)
        return True

    def _send_parked(self, response: bytes | list[bytes | FileRegion]) -> bool:
        """Send the parked request's answer now, from whatever call completed it (a long
        poll: the fetch purgatory's wake-up after the append), a loop step before run()
        would. In order: the
        parked request is this connection's oldest unanswered one, and run() answers
        nothing after it until it is done. False leaves the answer to run().

        A parked request with ``sender`` and ``on_done`` attributes gets this method and
        _parked_done there when it is parked (handlers.fetch's delayed fetch,
        handlers.produce's acks=all wait); when this returns True, the request's awaited
        result is None (nothing left to send)."""
        transport = self.transport
        if self._lost or transport is None or transport.is_closing():
            return False
        if self._timing is not None:
            self._timing[T_READY] = time.perf_counter()
        try:
            self._unsent = self._send_now(response)  # what the socket did not take: run()
        except Exception:
            return False  # run() sends it again and meets the error itself
        return True

    def _parked_done(self, sent: bool) -> None:
        """The parked request (one with a ``sender``) is done: ``sent``, its answer went
        out through _send_parked. Unless run() took it over meanwhile (more input came:
        it then finishes it itself), finish it here, without a step of run(): a long
        poll parks for every fetch a follower or a caught-up consumer makes, and waking
        run() twice per fetch (to await it, then to wait for input again) was a tenth of
        the leader's Python calls per replicated produce. Not sent (an error, the
        transport closing): run() takes it over and meets the outcome itself."""
        parked = self._parked
        if parked is None:
            return
        if not sent:
            self._wake_input()
            return
        self._parked = None
        self.decoder.recycle(parked[0])
        stats = self.broker.stats
        if self._timing is not None and stats is not None and self._unsent is None:
            timing, self._timing = self._timing, None
            stats.request_done(timing, time.perf_counter())
        decoder = self.decoder
        if (self._unsent is not None or decoder.queued or decoder.error is not None
                or self._eof or self._lost):
            self._wake_input()  # the rest to send, or what came meanwhile

    def _closing_after(self, exc: BaseException) -> None:
        """Log and close as run() does for the same exception."""
        self._log_ending(exc)
        self.close()

    def log_context(self) -> dict[str, str]:
        """This connection's fields for a log record's ``extra=`` (log.format=json):
        those it knows (no client id before a request, no principal before a session)."""
        context = {"peer": self.peer, "listener": self.listener.name}
        if self.client_id is not None:
            context["client_id"] = self.client_id
        if self.session is not None:
            context["principal"] = self.session.principal
        return context

    def _log_ending(self, exc: BaseException) -> None:
        """One line for why this connection ends: the peer's doing (a bad frame or
        request, a protocol violation), the connection's loss, or a bug (with its trace)."""
        context = self.log_context()
        if isinstance(exc, SessionEnded):
            log.info("%s: closing connection: %s", self.peer, exc, extra=context)
        elif isinstance(exc, (FrameError, ConnectionClosed)):
            log.warning("%s: closing connection: %s", self.peer, exc, extra=context)
        elif isinstance(exc, (ConnectionError, OSError)):
            log.info("%s: connection lost: %s", self.peer, exc, extra=context)
        else:
            log.error("%s: closing connection after an unexpected error", self.peer,
                      exc_info=exc, extra=context)

    async def run(self) -> None:
        decoder = self.decoder
        session = self.session
        assert session is not None
        try:
            while not self.broker.stopping:
                if session.throttle_ms:
                    self._mute()
                if session.muted_until:
                    await self._sit_out_throttle()
                    continue
                if self._parked is not None or self._unsent is not None:
                    await self._finish_started()
                    continue
                frame = decoder.next_frame()  # raises FrameError once frames before it are done
                if frame is None:
                    if self._eof or self._lost:
                        return
                    self._resume_reading()
                    await self._wait_for_input()
                    continue
                arrivals = self._arrivals
                read_at = arrivals.popleft() if arrivals is not None else 0.0
                self.in_request = True
                try:
                    await self._handle(frame, read_at)
                finally:
                    self.in_request = False
                    decoder.recycle(frame)
        except Exception as exc:  # a bug in a handler ends this one connection, never the broker
            self._log_ending(exc)
        finally:
            if self._parked is not None:
                parked = self._parked[1]
                self._parked = None
                close = getattr(parked, "close", None)  # a coroutine, or a delayed fetch
                if close is not None:
                    close()  # never awaited: the connection is ending
            self.close()

    async def _finish_started(self) -> None:
        """Finish what buffer_updated started: a parked request, or unsent parts."""
        parked, self._parked = self._parked, None
        unsent, self._unsent = self._unsent, None
        timing = self._timing  # metrics.listen: the request these belong to
        if unsent is not None:
            await self._send_rest(unsent)
        if parked is not None:
            frame, awaitable = parked
            self.in_request = True
            try:
                if timing is not None and asyncio.iscoroutine(awaitable):
                    timed = _Timed(awaitable)  # its own steps are local time
                    response = await timed
                    timing[T_LOCAL] += timed.seconds
                else:
                    response = await awaitable
                if timing is not None and (response is not None or not timing[T_READY]):
                    timing[T_READY] = time.perf_counter()
                if response is not None:
                    await self._send(response)
            finally:
                self.in_request = False
                self.decoder.recycle(frame)
        stats = self.broker.stats
        if timing is not None and stats is not None and self._unsent is None:
            self._timing = None  # sent whole (else the next call sends the rest first)
            stats.request_done(timing, time.perf_counter())

    def _mute(self) -> None:
        """KIP-219: the response with its throttle time is out; read nothing more from
        this client until the throttle has passed (run() sits it out)."""
        session = self.session
        assert session is not None
        session.muted_until = time.monotonic() + session.throttle_ms / 1000
        session.throttle_ms = 0
        self._pause_reading()
        self._wake_input()

    async def _sit_out_throttle(self) -> None:
        session = self.session
        assert session is not None
        self.in_request = True  # a muted client is not an idle one
        try:
            left = session.muted_until - time.monotonic()
            if left > 0:
                await asyncio.sleep(left)
        finally:
            self.in_request = False
            session.muted_until = 0.0

    def close(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size():
            # Responses the peer never read: close() would wait for them forever.
            transport.abort()
        else:
            transport.close()

    async def _wait_for_input(self) -> None:
        """Wait until a frame, end of input or a framing error arrives (or the idle sweep
        closes the connection)."""
        self._input = asyncio.get_running_loop().create_future()
        try:
            await self._input
        finally:
            self._input = None

    @property
    def busy(self) -> bool:
        """A request in progress: run() in one, or one parked (a long poll, an acks=all
        produce) that finishes without run() (``_parked_done``)."""
        return self.in_request or self._parked is not None

    def close_if_idle(self, now: float) -> bool:
        """Close this connection if nothing was received for connections.max.idle.ms and
        no request is in progress (a parked JoinGroup or long poll is not idleness)."""
        if self.busy or self.reads != self._reads_seen:
            self._reads_seen = self.reads
            self._quiet_since = now
            return False
        if now - self._quiet_since < self.idle_s:
            return False
        log.info("%s: idle for %.0f s, closing", self.peer, now - self._quiet_since,
                 extra=self.log_context())
        self.close()
        return True

    def _wake_input(self) -> None:
        waiter = self._input
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and self.decoder.error is None:
            self._reading_paused = False
            self.transport.resume_reading()

    async def _handle(self, frame: bytes | memoryview, read_at: float) -> None:
        """Answer one request; ``read_at`` is when its frame was read (metrics only)."""
        broker = self.broker
        if self.session is not None and self.session.raw_sasl:
            await self._raw_sasl_token(bytes(frame))
            return
        try:
            request = decode_request(frame, broker.supported, self.session)
        except UnsupportedVersionError as exc:
            if exc.api_key == 18:  # ApiVersions: answer so the client can pick a version
                await self._send(broker.api_versions_fallback(exc.correlation_id))
                return
            if exc.api_key == 0 and exc.api_version < 3:
                raise ConnectionClosed(
                    f"Produce v{exc.api_version} (message format v0/v1) is not supported; "
                    "clients must send record batches (Produce v3+)") from None
            raise ConnectionClosed(str(exc)) from None
        except CorruptRequestError as exc:
            raise ConnectionClosed(str(exc)) from None
        self.client_id = request.client_id
        session = self.session
        if session is not None:
            refused = session.may_send(request.api_key)
            if refused is not None:
                raise SessionEnded(refused)
        handler = broker.handlers[request.api_key]
        quotas = broker.quotas
        limit = (quotas.request_limit(request)
                 if quotas is not None and quotas.active else None)
        stats = broker.stats
        timing = (new_timing(request.api_key, read_at, time.perf_counter(),
                             request.api_version)
                  if stats is not None else None)
        if limit is not None:
            assert quotas is not None and session is not None
            session.throttle_ms = quotas.request_throttle(limit)
            timed = _Timed(handler(broker, request))
            try:
                response = await timed
            finally:
                quotas.record_request_time(limit, timed.seconds)
        elif timing is not None:
            timed = _Timed(handler(broker, request))
            response = await timed
        else:
            response = await handler(broker, request)
        if timing is not None:
            timing[T_LOCAL] = timed.seconds
            timing[T_READY] = time.perf_counter()
        if response is not None:
            await self._send(response)
        if stats is not None and timing is not None:
            stats.request_done(timing, time.perf_counter())
        if session is not None and session.close_after_response:
            assert self.transport is not None
            self.transport.close()  # not abort(): the answer saying why goes out first
            raise SessionEnded(session.close_after_response)

    async def _raw_sasl_token(self, token: bytes) -> None:
        """After a SaslHandshake v0 the client sends its SASL tokens as bare size-prefixed
        frames, and gets the server's the same way (Kafka's pre-KIP-152 framing, which
        older clients such as librdkafka before 2.1 use when they see v0 served). A
        failure closes the connection without an answer, as Kafka does there."""
        from odradek.security.scram import AuthenticationFailed

        session = self.session
        assert session is not None and session.authenticator is not None
        authenticator = session.authenticator
        try:
            answer, user = authenticator.step(token)
        except AuthenticationFailed as exc:
            raise SessionEnded(f"SASL {session.mechanism}: {exc}") from None
        if user is not None:
            session.complete(user, self.broker.config, authenticator)
        await self._send(len(answer).to_bytes(4, "big") + answer)

    async def _send(self, response: bytes | list[bytes | FileRegion]) -> None:
        unsent = self._send_now(response)
        if unsent is not None:
            await self._send_rest(unsent)

    def _send_now(self, response: bytes | list[bytes | FileRegion]
                  ) -> list[bytes | FileRegion] | None:
        """Send what goes without waiting; None if all went and no drain is due, else
        the parts still to send (``[]``: only the drain)."""
        transport = self.transport
        assert transport is not None
        if self._lost:
            raise ConnectionResetError("connection lost")
        if isinstance(response, bytes):
            transport.write(response)
        elif self._sock_fd < 0:
            # TLS: the bytes are encrypted in user space anyway, so each region is read
            # once (pread) and handed to the transport, which encrypts it into its buffer.
            for part in response:
                transport.write(part if isinstance(part, bytes) else _read_region(part))
        elif _region_bytes(response) <= COPY_REGION_MAX_BYTES:
            transport.write(b"".join([
                part if isinstance(part, bytes) else _read_region(part) for part in response]))
        else:
            for i, part in enumerate(response):
                if isinstance(part, FileRegion):
                    sent = self._sendfile_now(part)
                    if sent < part.length:
                        rest = FileRegion(part.fd, part.position + sent, part.length - sent)
                        return [rest, *response[i + 1:]]
                else:
                    transport.write(part)
        return [] if self._write_paused else None

    async def _send_rest(self, parts: list[bytes | FileRegion]) -> None:
        transport = self.transport
        assert transport is not None
        for part in parts:
            if isinstance(part, FileRegion):
                await self._send_region(part)
            else:
                transport.write(part)
        await self._drain()

    def _sendfile_now(self, region: FileRegion) -> int:
        """Bytes of ``region`` sent straight to the socket (0 when something of ours is
        queued ahead of it or the socket is full).

        Usually it all fits, and asyncio's sendfile (pause reading, wait for an empty
        buffer, fstat, resume: ~10 Python calls and 2-4 more system calls) is needed only
        for what the socket does not take at once."""
        transport = self.transport
        assert transport is not None
        if self._sock_fd < 0 or transport.get_write_buffer_size():
            return 0
        try:
            return os.sendfile(self._sock_fd, region.fd, region.position, region.length)
        except (BlockingIOError, InterruptedError):
            return 0

    async def _send_region(self, region: FileRegion) -> None:
        """Zero-copy: the kernel moves the bytes from the page cache to the socket. The
        descriptor stays open for file.delete.delay.ms even if the segment is deleted
        meanwhile (see storage.log.FileRegion)."""
        transport = self.transport
        assert transport is not None
        sent = self._sendfile_now(region)
        if sent < region.length:
            await self._drain()
            with os.fdopen(region.fd, "rb", buffering=0, closefd=False) as f:
                sent += await asyncio.get_running_loop().sendfile(
                    transport, f, region.position + sent, region.length - sent)
        if sent != region.length:
            raise ConnectionClosed(
                f"segment shrank under a fetch ({sent} of {region.length} bytes)")

    async def _drain(self) -> None:
        """Wait while the transport holds more than its high-water mark of unsent bytes."""
        if not self._write_paused:
            return
        if self._lost:
            raise ConnectionResetError("connection lost")
        self._writable = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self.idle_s):
                await self._writable
        except TimeoutError:
            raise ConnectionClosed("the client stopped reading its responses") from None
        finally:
            self._writable = None


class _Timed:
    """Awaits a coroutine, adding up the time spent in its steps but not in what it
    awaits (a request quota counts the broker's work on a request, not a long poll's
    wait or an fsync)."""

    __slots__ = ("coro", "seconds")

    def __init__(self, coro: Coroutine[Any, Any, Response]) -> None:
        self.coro = coro
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Response]:
        coro = self.coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                step = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                return done.value
            finally:
                self.seconds += time.perf_counter() - started
            try:
                value, error = (yield step), None
            except BaseException as exc:  # cancellation too: into the coroutine
                value, error = None, exc


def _region_bytes(parts: list[bytes | FileRegion]) -> int:
    """The file bytes among an answer's parts (a loop: a generator's every step is a
    call, and this runs for each fetch answered)."""
    total = 0
    for part in parts:
        if isinstance(part, FileRegion):
            total += part.length
    return total


def _read_region(region: FileRegion) -> bytes:
    data = os.pread(region.fd, region.length, region.position)
    if len(data) != region.length:
        raise ConnectionClosed(
            f"segment shrank under a fetch ({len(data)} of {region.length} bytes)")
    return data
