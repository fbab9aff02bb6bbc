"""Sans-IO framing of the Kafka protocol: a 4-byte big-endian size, then that many bytes.

``FrameDecoder`` takes bytes as they arrive and hands back whole frames. The size is
checked against the limit (``socket.request.max.bytes``) as soon as its 4 bytes are
there, before any buffer for the frame is grown, so a peer cannot make the broker
allocate memory by claiming a large frame. No sockets, no asyncio: the listener moves the
bytes, and tests drive this with plain byte strings.
"""

from __future__ import annotations

import struct

SIZE = struct.Struct(">i")

# Kafka's socket.request.max.bytes default: the largest request a broker accepts.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


class FrameError(Exception):
    """The peer broke the framing; the only answer is to close the connection."""


class FrameDecoder:
    """Accumulates received bytes and splits them into frames."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buffer) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes. Raises FrameError as soon as a frame's size is invalid."""
        if self._pos and self._pos == len(self._buffer):
            self._buffer.clear()
            self._pos = 0
        if len(self._buffer) - self._pos < 4:
            self._buffer += data
            self._check_size()  # a bad size is refused before its frame is buffered
        else:
            self._buffer += data

    def _check_size(self) -> None:
        if len(self._buffer) - self._pos >= 4:
            (size,) = SIZE.unpack_from(self._buffer, self._pos)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameError(
                    f"frame of {size} bytes exceeds socket.request.max.bytes "
                    f"({self.max_frame_bytes})"
                )

    def next_frame(self) -> bytes | None:
        """The next whole frame's payload (without its size), or None if incomplete.
        A bad size after a whole frame is reported at the next call, so the frame before
        it is still answered (as Kafka does)."""
        self._check_size()
        available = len(self._buffer) - self._pos
        if available < 4:
            return None
        (size,) = SIZE.unpack_from(self._buffer, self._pos)
        if available < 4 + size:
            return None
        start = self._pos + 4
        frame = bytes(self._buffer[start : start + size])
        self._pos = start + size
        # Compact once the consumed prefix dominates, so the buffer does not grow forever.
        if self._pos > 65536 and self._pos * 2 > len(self._buffer):
            del self._buffer[: self._pos]
            self._pos = 0
        return frame


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its size."""
    return SIZE.pack(len(payload)) + payload


def encode_uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (compact lengths, tagged fields), least significant group
    first."""
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
