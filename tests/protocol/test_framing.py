"""FrameDecoder on hostile and awkward byte streams: frames split anywhere, many at once,
and sizes a peer should never send (refused as soon as the 4 size bytes are in, before
anything is allocated for the body)."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.framing import (
    BIG_FRAME_START_BYTES,
    DEFAULT_MAX_FRAME_BYTES,
    BufferPool,
    FrameDecoder,
    FrameError,
    frame,
)

PAYLOADS = [b"", b"a", b"hello world", bytes(range(256)) * 3, b"\x00\x00\x00\x05", b"\xff" * 7]


def drain(decoder: FrameDecoder) -> list[bytes]:
    out = []
    while (f := decoder.next_frame()) is not None:
        out.append(f)
        assert len(out) <= 100_000  # bounded
    return out


def feed_in_chunks(decoder: FrameDecoder, data: bytes, cuts: list[int]) -> list[bytes]:
    got: list[bytes] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        decoder.feed(data[start:cut])
        got += drain(decoder)
        start = cut
    return got


def test_frame_helper_prefixes_the_size() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


def test_incomplete_input_gives_no_frame() -> None:
    d = FrameDecoder()
    assert d.next_frame() is None
    d.feed(b"\x00\x00")
    assert d.next_frame() is None
    d.feed(b"\x00\x03ab")
    assert d.next_frame() is None
    assert d.buffered == 6
    d.feed(b"c")
    assert d.next_frame() == b"abc"
    assert d.next_frame() is None
    assert d.buffered == 0


@pytest.mark.parametrize("payload", PAYLOADS)
def test_one_frame_split_at_every_byte_boundary(payload: bytes) -> None:
    data = frame(payload)
    for cut in range(len(data) + 1):
        d = FrameDecoder()
        assert feed_in_chunks(d, data, [cut]) == [payload], cut
        assert d.buffered == 0


def test_stream_of_frames_split_at_every_pair_of_boundaries() -> None:
    stream = b"".join(frame(p) for p in PAYLOADS[:4])
    for a in range(len(stream) + 1):
        for b in range(a, len(stream) + 1, 7):
            d = FrameDecoder()
            assert feed_in_chunks(d, stream, [a, b]) == PAYLOADS[:4], (a, b)
            assert d.buffered == 0


def test_stream_fed_one_byte_at_a_time() -> None:
    stream = b"".join(frame(p) for p in PAYLOADS)
    d = FrameDecoder()
    assert feed_in_chunks(d, stream, list(range(len(stream)))) == PAYLOADS
    assert d.buffered == 0


def test_many_frames_in_one_feed() -> None:
    payloads = [i.to_bytes(4, "big") * (i % 13) for i in range(5000)]
    d = FrameDecoder()
    d.feed(b"".join(frame(p) for p in payloads))
    assert drain(d) == payloads
    assert d.buffered == 0


def test_many_frames_in_one_feed_then_a_partial_one() -> None:
    d = FrameDecoder()
    d.feed(frame(b"one") + frame(b"two") + frame(b"three")[:5])
    assert drain(d) == [b"one", b"two"]
    assert d.buffered == 5
    d.feed(frame(b"three")[5:])
    assert drain(d) == [b"three"]


def test_long_stream_keeps_the_buffer_bounded() -> None:
    """Consumed bytes are let go: streaming 40 MB through in pieces keeps memory small."""
    payload = bytes(1000)
    chunk = frame(payload) * 100 + frame(payload)[:500]
    rest = frame(payload)[500:]
    d = FrameDecoder()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        for i in range(400):
            d.feed((rest if i else b"") + chunk)
            assert len(drain(d)) == (100 if i == 0 else 101)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(chunk) + 1_000_000, peak


def test_frame_of_exactly_the_limit_is_accepted() -> None:
    d = FrameDecoder(max_frame_bytes=1024)
    d.feed(frame(b"x" * 1024))
    assert d.next_frame() == b"x" * 1024


@pytest.mark.parametrize(
    "size", [-1, -2, -(2**31), 1025, 2**31 - 1], ids=lambda s: f"size={s}"
)
def test_bad_size_fails_as_soon_as_its_four_bytes_arrive(size: int) -> None:
    d = FrameDecoder(max_frame_bytes=1024)
    header = struct.pack(">i", size)
    for i in range(3):
        d.feed(header[i : i + 1])  # 3 of 4 bytes: nothing to judge yet
        assert d.next_frame() is None
    with pytest.raises(FrameError):
        d.feed(header[3:])
    assert d.buffered <= 4  # nothing grown for the claimed body


@pytest.mark.parametrize("size", [-1, 2**31 - 1])
def test_bad_size_fails_in_the_same_feed_as_some_body(size: int) -> None:
    d = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(FrameError):
        d.feed(struct.pack(">i", size) + b"\x00" * 100)
    assert d.buffered <= 104


def test_claimed_size_allocates_nothing() -> None:
    """A claimed size of 2 GiB (over the limit) and of 99 MiB (under the default 100 MiB
    limit): the decoder holds no more than BIG_FRAME_START_BYTES (1 MiB) for a claim;
    beyond that, only in proportion to the bytes actually received."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        d = FrameDecoder(max_frame_bytes=1024 * 1024)
        with pytest.raises(FrameError):
            d.feed(struct.pack(">i", 2**31 - 1) + b"abc")
        _, peak_refused = tracemalloc.get_traced_memory()

        tracemalloc.reset_peak()
        d = FrameDecoder(max_frame_bytes=DEFAULT_MAX_FRAME_BYTES)
        d.feed(struct.pack(">i", 99 * 1024 * 1024) + b"abc")
        assert d.next_frame() is None
        d.feed(b"def" * 1000)
        assert d.next_frame() is None
        _, peak_accepted = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_refused < 1_000_000, peak_refused
    assert peak_accepted < BIG_FRAME_START_BYTES + 200_000, peak_accepted
    assert d.buffered == 4 + 3 + 3000


def test_bad_size_after_a_good_frame_in_a_later_feed() -> None:
    d = FrameDecoder(max_frame_bytes=1024)
    d.feed(frame(b"good"))
    assert d.next_frame() == b"good"
    with pytest.raises(FrameError):
        d.feed(struct.pack(">i", -1))


def test_complete_frames_before_a_bad_size_are_still_delivered() -> None:
    d = FrameDecoder(max_frame_bytes=1024)
    d.feed(frame(b"first") + frame(b"second") + struct.pack(">i", 2**31 - 1))
    got = []
    with pytest.raises(FrameError):
        for _ in range(3):
            f = d.next_frame()
            assert f is not None
            got.append(f)
    assert got == [b"first", b"second"]


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=20 * 304), max_size=30),
)
def test_random_chunking_of_random_frames_round_trips(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(frame(p) for p in payloads)
    d = FrameDecoder(max_frame_bytes=300)
    got = feed_in_chunks(d, stream, [min(c, len(stream)) for c in cuts])
    assert got == payloads
    assert d.buffered == 0
    assert d.next_frame() is None


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=64), max_size=5),
    bad=st.one_of(st.integers(-(2**31), -1), st.integers(65, 2**31 - 1)),
    tail=st.binary(max_size=64),
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=10),
)
def test_random_stream_with_a_bad_size_raises_frame_error_and_never_grows(
    payloads: list[bytes], bad: int, tail: bytes, cuts: list[int]
) -> None:
    stream = b"".join(frame(p) for p in payloads) + struct.pack(">i", bad) + tail
    d = FrameDecoder(max_frame_bytes=64)
    with pytest.raises(FrameError):
        feed_in_chunks(d, stream, [min(c, len(stream)) for c in cuts])
    assert d.buffered <= len(stream)


def receive(decoder: FrameDecoder, data: bytes, reads: list[int]) -> list[bytes | bytearray]:
    """Drive the decoder as a BufferedProtocol is driven: the "kernel" writes at most the
    asked-for read size into the view get_buffer() returns."""
    got: list[bytes | bytearray] = []
    pos = 0
    sizes = iter(reads)
    while pos < len(data):
        view = decoder.get_buffer()
        assert len(view) > 0
        n = min(len(view), len(data) - pos, next(sizes, 65536))
        view[:n] = data[pos : pos + n]
        view.release()
        decoder.buffer_updated(n)
        pos += n
        got += drain(decoder)
    return got


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 100, 32 * 1024, 32 * 1024 + 1, 70_000,
                                    256 * 1024, 256 * 1024 + 3, 1_100_000]), max_size=6),
    reads=st.lists(st.integers(min_value=1, max_value=300_000), max_size=40),
)
def test_frames_of_every_size_received_in_place_round_trip(
    sizes: list[int], reads: list[int]
) -> None:
    """Small frames share the receive buffer, large ones get (and grow) their own; any
    split of the stream gives back the same frames."""
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    d = FrameDecoder(max_frame_bytes=2_000_000)
    got = receive(d, b"".join(frame(p) for p in payloads), reads)
    assert got == payloads
    assert d.buffered == 0


def test_a_large_frame_is_handed_out_as_the_buffer_it_was_received_in() -> None:
    """No copy after the kernel's: the frame is a view of the buffer the reads filled,
    and once the request is done the buffer serves the next large frame."""
    payload = bytes(range(256)) * 2000  # 512,000 bytes
    d = FrameDecoder(pool=BufferPool())
    views = []
    data = frame(payload)
    pos = 0
    while pos < len(data):
        view = d.get_buffer()
        n = min(len(view), len(data) - pos, 100_000)
        view[:n] = data[pos : pos + n]
        views.append(view.obj)
        view.release()
        d.buffer_updated(n)
        pos += n
    got = d.next_frame()
    assert isinstance(got, memoryview) and got == payload
    buffer = got.obj
    assert any(obj is buffer for obj in views)
    records = got[100:200]  # a view the "log" still holds: the buffer is not reused yet
    d.recycle(got)
    d.feed(frame(payload))
    again = d.next_frame()
    assert again == payload and again.obj is not buffer
    records.release()
    second = again.obj
    d.recycle(again)
    d.feed(frame(payload))
    assert d.next_frame().obj is second  # nothing viewed it any more: reused


def test_frames_larger_than_the_first_buffer_grow_into_bigger_ones() -> None:
    payload = bytes(range(256)) * (BIG_FRAME_START_BYTES // 256 * 5)  # 5 MiB: grows twice
    d = FrameDecoder(pool=BufferPool())
    assert receive(d, frame(payload) + frame(b"next"), [100_000] * 200) == [payload, b"next"]


def test_bytes_after_a_bad_size_are_dropped_without_end() -> None:
    """A peer that keeps sending after a refused size cannot fill or stall the decoder."""
    d = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(FrameError):
        d.feed(struct.pack(">i", -5))
    for _ in range(100):
        view = d.get_buffer()
        n = len(view)
        assert n > 0
        view.release()
        d.buffer_updated(n)
    assert d.buffered <= 4
