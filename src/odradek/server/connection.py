"""One client connection: bytes in through the sans-IO frame decoder, requests handled one
at a time in arrival order (Kafka mutes a channel while its request is in flight, so
pipelined requests are answered in order), responses out — record bytes by ``sendfile``.

Whatever a peer sends, the worst outcome is that this one connection is closed with one
log line: a frame over ``socket.request.max.bytes`` or with a negative size is refused
before anything is allocated for it; an undecodable request or an unknown API version
closes the connection, as Kafka does (ApiVersions excepted: it answers with the versions
it serves); a peer that goes silent is dropped after ``connections.max.idle.ms``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from odradek.protocol.codec import (
    CorruptRequestError,
    UnsupportedVersionError,
    decode_request,
)
from odradek.protocol.framing import FrameDecoder, FrameError
from odradek.storage.log import FileRegion

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024  # bytes asked of the socket per read

Response = bytes | list[bytes | FileRegion] | None


class ConnectionClosed(Exception):
    """This connection must end (a protocol violation or an unsendable response)."""


class Connection:
    def __init__(self, broker: Broker, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.in_request = False

    async def run(self) -> None:
        idle_s = self.broker.config["connections.max.idle.ms"] / 1000
        try:
            while not self.broker.stopping:
                try:
                    async with asyncio.timeout(idle_s):
                        data = await self.reader.read(READ_CHUNK)
                except TimeoutError:
                    log.info("%s: idle for %.0f s, closing", self.peer, idle_s)
                    return
                if not data:
                    return
                self.decoder.feed(data)
                while (frame := self.decoder.next_frame()) is not None:
                    self.in_request = True
                    try:
                        await self._handle(frame)
                    finally:
                        self.in_request = False
        except FrameError as exc:
            log.warning("%s: closing connection: %s", self.peer, exc)
        except ConnectionClosed as exc:
            log.warning("%s: closing connection: %s", self.peer, exc)
        except (ConnectionError, OSError) as exc:
            log.info("%s: connection lost: %s", self.peer, exc)
        except Exception:
            # A bug in a handler ends this one connection, never the broker.
            log.exception("%s: closing connection after an unexpected error", self.peer)
        finally:
            transport = self.writer.transport
            if transport.get_write_buffer_size():
                # Responses the peer never read: close() would wait for them forever.
                transport.abort()
            else:
                self.writer.close()

    async def _handle(self, frame: bytes) -> None:
        broker = self.broker
        try:
            request = decode_request(frame, broker.supported)
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
        handler = broker.handlers[request.api_key]
        response = await handler(broker, request)
        if response is not None:
            await self._send(response)

    async def _send(self, response: bytes | list[bytes | FileRegion]) -> None:
        writer = self.writer
        if isinstance(response, bytes):
            writer.write(response)
        else:
            loop = asyncio.get_running_loop()
            for part in response:
                if isinstance(part, FileRegion):
                    await writer.drain()
                    # Zero-copy: the kernel moves the bytes from the page cache to the
                    # socket. The descriptor stays open for file.delete.delay.ms even if
                    # the segment is deleted meanwhile (see storage.log.FileRegion).
                    with os.fdopen(part.fd, "rb", buffering=0, closefd=False) as f:
                        sent = await loop.sendfile(writer.transport, f, part.position,
                                                   part.length)
                    if sent != part.length:
                        raise ConnectionClosed(
                            f"segment shrank under a fetch ({sent} of {part.length} bytes)")
                else:
                    writer.write(part)
        idle_s = self.broker.config["connections.max.idle.ms"] / 1000
        try:
            async with asyncio.timeout(idle_s):
                await writer.drain()
        except TimeoutError:
            raise ConnectionClosed("the client stopped reading its responses") from None
