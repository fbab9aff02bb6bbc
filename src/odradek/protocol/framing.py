"""Sans-IO framing of the Kafka protocol: a 4-byte big-endian size, then that many bytes.

``FrameDecoder`` takes bytes as they arrive and hands back whole frames. The size is
checked against the limit (``socket.request.max.bytes``) as soon as its 4 bytes are
there, before any buffer for the frame is grown, so a peer cannot make the broker
allocate memory by claiming a large frame. No sockets, no asyncio: the connection lets
the kernel receive into the decoder's buffers, and tests drive it with byte strings.
"""

from __future__ import annotations

import struct
from collections import deque

SIZE = struct.Struct(">i")

# Kafka's socket.request.max.bytes default: the largest request a broker accepts.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
RECEIVE_BUFFER_BYTES = 64 * 1024  # the reusable buffer for headers and small frames
SMALL_FRAME_BYTES = 32 * 1024  # larger frames are received into a buffer of their own
BIG_FRAME_START_BYTES = 1024 * 1024  # that buffer's first size; it grows 4x as it fills
POOLED_BYTES = 8 * 1024 * 1024  # large buffers kept for reuse, all connections together


class BufferPool:
    """Large receive buffers, handed back after their request and reused.

    Why: a fresh buffer per large request costs the kernel a page fault and a zeroed page
    for every 4 KiB, then the same again for the allocator's memset (perf put page faults
    at ~28% of the broker's CPU under a produce load of ~1 MB requests). A buffer is taken
    back only if nothing still views it (records handed to the log as memoryviews): a
    buffer with live views cannot be resized, which ``give`` tests.
    """

    def __init__(self, max_bytes: int = POOLED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._free: list[bytearray] = []
        self._bytes = 0

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes (the smallest free one that fits)."""
        best = -1
        for i, buf in enumerate(self._free):
            if len(buf) >= size and (best < 0 or len(buf) < len(self._free[best])):
                best = i
        if best < 0:
            return bytearray(size)
        buf = self._free.pop(best)
        self._bytes -= len(buf)
        return buf

    def give(self, buf: bytearray) -> bool:
        """Keep ``buf`` for reuse, unless the pool is full (then it is let go). False:
        something still views it, so it was not taken (give it again later)."""
        if self._bytes + len(buf) > self.max_bytes or not buf:
            return True
        try:
            del buf[-1:]  # refused (BufferError) while any view of it is alive
        except BufferError:
            return False
        buf.append(0)  # back to its size, in the same allocation
        self._free.append(buf)
        self._bytes += len(buf)
        return True


POOL = BufferPool()  # the default: for decoders used from one thread (a broker has its own)


class FrameError(Exception):
    """The peer broke the framing; the only answer is to close the connection.
    ``size``: the frame size it claimed, when that was the fault."""

    def __init__(self, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.size = size


class FrameDecoder:
    """Splits a byte stream into frames, receiving straight into its own buffers.

    Two ways in: ``get_buffer()`` / ``buffer_updated(n)`` (an ``asyncio.BufferedProtocol``
    lets the kernel write into the returned view: no intermediate copy), or ``feed(data)``
    for callers holding bytes. Frames come out of ``next_frame()`` in order.

    Small frames are received into one reusable buffer and copied out; a frame larger
    than ``SMALL_FRAME_BYTES`` (every sizeable Produce request) gets a buffer of its own
    from ``pool`` that the kernel fills in place and that is then handed out as a
    memoryview, so its records reach the log without being copied; ``recycle(frame)``
    returns it once the request is done. That buffer holds at most
    ``BIG_FRAME_START_BYTES`` at first and grows fourfold each time it fills up to the
    claimed size: what a peer can make the broker hold is bounded by the bytes it really
    sends, never by a claim.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 pool: BufferPool = POOL) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.pool = pool
        self._buf = bytearray(RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet taken out as a frame
        self._end = 0  # end of the received bytes
        self._big: bytearray | None = None  # a large frame being received in place
        self._big_filled = 0
        self._big_size = 0
        self._frames: deque[bytes | memoryview] = deque()
        self._queued_bytes = 0
        self.error: FrameError | None = None  # set once; nothing is parsed after it

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames (size prefixes included)."""
        big = 4 + self._big_filled if self._big is not None else 0
        return self._end - self._start + big + self._queued_bytes

    @property
    def frame_missing(self) -> int:
        """Bytes still to come of a large frame being received (0 between frames)."""
        return self._big_size - self._big_filled if self._big is not None else 0

    @property
    def queued(self) -> int:
        """Whole frames waiting to be taken."""
        return len(self._frames)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty)."""
        if self.error is not None:
            return self._view[:]  # the connection is ending: whatever comes is dropped
        big = self._big
        if big is not None:
            if self._big_filled == len(big):
                bigger = self.pool.take(min(self._big_size, 4 * len(big)))
                bigger[: len(big)] = big
                self.pool.give(big)
                self._big = big = bigger
            return memoryview(big)[self._big_filled : self._big_size]
        if self._end == len(self._buf):
            # Full with the start of a small frame: move it to the front.
            pending = bytes(self._view[self._start : self._end])
            self._buf[: len(pending)] = pending
            self._start, self._end = 0, len(pending)
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the last ``get_buffer()`` view."""
        if self.error is not None:
            return
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled == self._big_size:
                self._queue(memoryview(self._big)[: self._big_size])
                self._big = None
            return
        self._end += nbytes
        self._split()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes. Raises FrameError as soon as a frame's size is invalid,
        unless whole frames before it are still to be taken (they are answered first)."""
        src = memoryview(data).cast("B")
        pos = 0
        while pos < len(src) and self.error is None:
            dst = self.get_buffer()
            n = min(len(dst), len(src) - pos)
            dst[:n] = src[pos : pos + n]
            dst.release()
            self.buffer_updated(n)
            pos += n
        if self.error is not None and not self._frames:
            raise self.error

    def recycle(self, frame: bytes | memoryview) -> None:
        """The request in ``frame`` is done: its buffer may serve another."""
        if isinstance(frame, memoryview):
            buf = frame.obj
            try:
                frame.release()
            except BufferError:  # something still holds a buffer of this very view
                return
            if isinstance(buf, bytearray):
                self.pool.give(buf)

    def peek_frame(self) -> bytes | memoryview | None:
        """The next whole frame without taking it (None if there is none)."""
        return self._frames[0] if self._frames else None

    def next_frame(self) -> bytes | memoryview | None:
        """The next whole frame's payload (without its size), or None if incomplete.
        A bad size is raised once the frames before it have been taken."""
        if self._frames:
            frame = self._frames.popleft()
            self._queued_bytes -= len(frame) + 4
            return frame
        if self.error is not None:
            raise self.error
        return None

    def _queue(self, frame: bytes | memoryview) -> None:
        self._frames.append(frame)
        self._queued_bytes += len(frame) + 4

    def _split(self) -> None:
        view = self._view
        start, end = self._start, self._end
        while end - start >= 4:
            (size,) = SIZE.unpack_from(view, start)
            if size < 0:
                self.error = FrameError(f"negative frame size {size}", size)
                break
            if size > self.max_frame_bytes:
                self.error = FrameError(
                    f"frame of {size} bytes exceeds socket.request.max.bytes "
                    f"({self.max_frame_bytes})", size
                )
                break
            body = start + 4
            if size > SMALL_FRAME_BYTES:
                got = min(end - body, size)
                big = self.pool.take(max(got, min(size, BIG_FRAME_START_BYTES)))
                big[:got] = view[body : body + got]
                start = body + got
                if got == size:
                    self._queue(memoryview(big)[:size])
                    continue
                self._big, self._big_filled, self._big_size = big, got, size
                break
            if end - body < size:
                break
            self._queue(bytes(view[body : body + size]))
            start = body + size
        if start == end:
            start = end = 0
        self._start, self._end = start, end


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
