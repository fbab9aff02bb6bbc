"""The fuzz tier, coverage-guided (issue 21): atheris (libFuzzer for Python) on the pure
layers, one target per decoder, seeded from the requests real clients sent
(``corpus/requests.bin``).

Each target takes arbitrary bytes. A decoder may refuse them only with its own error
type (``Target.refusals``: the "expected refusals", which the broker maps to an answer
or a closed connection); any other exception, a failed invariant (AssertionError), a
hang (libFuzzer's ``-timeout``) or a memory blow-up (``-rss_limit_mb``) is a finding.

Targets:

- ``decode_request``: ``protocol.codec.decode_request`` on a whole request frame (every
  served API key and version: the hand readers for Produce and Fetch, the claim guard
  and kio for the rest), refusals ProtocolError.
- ``decode_produce``, ``decode_fetch``: the hand readers alone, refusals DecodeError.
- ``framing``: ``FrameDecoder`` fed a byte stream in chunks (both ways in: ``feed`` and
  ``get_buffer``/``buffer_updated``); the frames out must be the stream's frames, the
  bytes it holds what is left; refusals FrameError.
- ``record_batches``: ``records.batch.iter_headers`` + ``check_producer_batch`` (what
  Produce checks), refusals RecordError.
- ``decode_batch``: ``records.builder.decode_batch`` after the length and CRC-32C are
  made right (so the fuzzer gets past the checksum into the records), refusals
  RecordError.
- ``sasl``: the server side of PLAIN, SCRAM-SHA-256/512 (client-first fuzzed, or
  client-final after a correct client-first) and OAUTHBEARER's initial response
  (``security/``), refusals AuthenticationFailed (ValueError from the OAUTHBEARER
  parser).
- ``codecs``: ``records.codecs.decompress`` (first byte picks the codec id) under a
  1 MiB output bound it must keep, and every codec's round trip of the same bytes;
  refusals RecordError.

By hand (long mode; seeds are written into an empty corpus directory first)::

    mkdir -p /tmp/fz-req && nice -n 10 .venv/bin/python -m tests.fuzz.atheris_targets \\
        decode_request -max_total_time=3600 -timeout=10 /tmp/fz-req

CI runs each target for a few thousand inputs (tests/fuzz/test_atheris.py).
"""

from __future__ import annotations

import contextlib
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import atheris
import cramjam

# Instrumented for coverage: the code under test (and kio's readers, which decode every
# request but Produce and Fetch). Modules imported before this point are not instrumented.
with atheris.instrument_imports(include=["odradek.protocol", "odradek.records",
                                         "odradek.security", "kio.serial", "scramp"]):
    import scramp

    from odradek.protocol import codec, fetch, framing, produce
    from odradek.protocol.reader import DecodeError
    from odradek.records import batch, builder, codecs
    from odradek.records.errors import RecordError
    from odradek.security.oauth import parse_initial_response
    from odradek.security.sasl import PlainAuthenticator, ScramAuthenticator
    from odradek.security.scram import AuthenticationFailed, from_password

CORPUS = Path(__file__).parent / "corpus" / "requests.bin"
_SIZE = struct.Struct(">i")


def served_versions() -> dict[int, tuple[int, int]]:
    """API key -> (min, max) versions: what the broker serves (its handler table)."""
    from odradek.server.handlers import HANDLERS

    return {key: (api.min_version, api.max_version) for key, api in HANDLERS.items()}


SERVED: dict[int, tuple[int, int]] = {}


def fuzz_decode_request(data: bytes) -> None:
    with contextlib.suppress(codec.ProtocolError):
        codec.decode_request(data, SERVED)


def fuzz_decode_produce(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        produce.decode_produce(data)


def fuzz_decode_fetch(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        fetch.decode_fetch(data)


FRAMING_MAX = 256 * 1024  # above SMALL_FRAME_BYTES: large frames are received too
FRAMING_CHUNKS = 32


def fuzz_framing(data: bytes) -> None:
    """First byte: the chunk size; the rest: the stream (after ``FRAMING_CHUNKS`` chunks,
    the rest in one: the cost of an input stays bounded)."""
    if not data:
        return
    step, stream = data[0] + 1, data[1:]
    decoder = framing.FrameDecoder(FRAMING_MAX, framing.BufferPool(1 << 20))
    frames: list[bytes] = []
    failed = False
    starts = list(range(0, min(len(stream), step * FRAMING_CHUNKS), step))
    for i, start in enumerate(starts):
        chunk = stream[start:start + step] if i + 1 < len(starts) else stream[start:]
        try:
            if i % 2:
                decoder.feed(chunk)
            else:
                pos = 0
                while pos < len(chunk) and decoder.error is None:
                    dst = decoder.get_buffer()
                    n = min(len(dst), len(chunk) - pos)
                    dst[:n] = chunk[pos:pos + n]
                    dst.release()
                    decoder.buffer_updated(n)
                    pos += n
            while (frame := decoder.next_frame()) is not None:
                frames.append(bytes(frame))
                decoder.recycle(frame)
        except framing.FrameError:
            failed = True
            break
    taken = b"".join(_SIZE.pack(len(f)) + f for f in frames)
    assert stream.startswith(taken), "frames out are not the frames in"
    if not failed:
        assert decoder.error is None or decoder.queued, "an error left unraised"
        left = len(stream) - len(taken)
        assert decoder.buffered == left, f"holds {decoder.buffered} of {left} bytes left"
        rest = stream[len(taken):]
        if len(rest) >= 4:
            (size,) = _SIZE.unpack_from(rest)
            assert 0 <= size <= FRAMING_MAX and len(rest) < 4 + size, "a whole frame kept"


def fuzz_record_batches(data: bytes) -> None:
    try:
        for _, header in batch.iter_headers(data):
            batch.check_producer_batch(header)
    except RecordError:
        pass


def fuzz_decode_batch(data: bytes) -> None:
    if len(data) >= batch.HEADER_SIZE:
        buf = bytearray(data)
        _SIZE.pack_into(buf, batch.LENGTH_AT, len(buf) - batch.LOG_OVERHEAD_SIZE)
        struct.pack_into(">I", buf, batch.CRC_AT, batch.compute_crc(buf))
        data = bytes(buf)
    with contextlib.suppress(RecordError):
        builder.decode_batch(data)


CODECS_MAX = 1024 * 1024  # a low bound, so that inputs reach it (gzip at 1000:1, zstd RLE)


def fuzz_codecs(data: bytes) -> None:
    if not data:
        return
    codec_id, payload = data[0] % 6, data[1:]  # 5: an unknown id
    with contextlib.suppress(RecordError):
        out = codecs.decompress(codec_id, payload, CODECS_MAX)
        assert codec_id == codecs.SNAPPY or len(out) <= CODECS_MAX, "past the bound"
    for c in codecs.NAMES:
        assert codecs.decompress(c, codecs.compress(c, payload)) == payload, codecs.NAMES[c]


SASL_USER, SASL_PASSWORD = "fz", "fz-secret"
SASL_MODES = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "SCRAM-SHA-256 final",
              "SCRAM-SHA-512 final", "OAUTHBEARER")


SCRAM_CREDENTIALS = {m: from_password(m, SASL_PASSWORD, 4096, b"fz-salt-of-16-b")
                     for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


def fuzz_sasl(data: bytes) -> None:
    """The server side of SASL logins. First byte: the mode (``SASL_MODES``); the rest: the
    client's token - for PLAIN, SCRAM's client-first and OAUTHBEARER's initial response -
    or, in the "final" modes, bytes laid over a correct SCRAM client-final (its first byte
    says where) after a correct client-first."""
    if not data:
        return
    mode, token = SASL_MODES[data[0] % len(SASL_MODES)], data[1:]
    mechanism = mode.split()[0]
    try:
        if mode == "PLAIN":
            PlainAuthenticator({SASL_USER: SASL_PASSWORD}).step(token)
        elif mode == "OAUTHBEARER":
            with contextlib.suppress(ValueError):
                parse_initial_response(token)
        elif not mode.endswith("final"):
            server = ScramAuthenticator(mechanism, {SASL_USER: SCRAM_CREDENTIALS[mechanism]}.get)
            server.step(token)
        else:
            server = ScramAuthenticator(mechanism, {SASL_USER: SCRAM_CREDENTIALS[mechanism]}.get)
            client = scramp.ScramClient([mechanism], SASL_USER, SASL_PASSWORD)
            client.set_server_first(server.step(client.get_client_first().encode())[0].decode())
            final = bytearray(client.get_client_final().encode())
            if token:
                at = token[0] % len(final)
                final[at:at + len(token) - 1] = token[1:]
            server.step(bytes(final))
    except AuthenticationFailed:
        pass


@dataclass(frozen=True)
class Target:
    run: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]


def request_frames() -> list[bytes]:
    data = CORPUS.read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames


def request_seeds() -> list[bytes]:
    """The recorded frames, and for each served (key, version) a recorded frame of that
    key relabelled to it (or a bare header): every version's decoder is reached."""
    frames = request_frames()
    by_key: dict[int, bytes] = {}
    for f in frames:
        by_key.setdefault(struct.unpack_from(">h", f)[0], f)
    seeds = list(frames)
    for key, (low, high) in sorted(served_versions().items()):
        base = by_key.get(key, struct.pack(">hhih", key, 0, 1, 2) + b"fz")
        seeds += [struct.pack(">hh", key, v) + base[4:] for v in range(low, high + 1)]
    return seeds


def _key(key: int) -> Callable[[], list[bytes]]:
    return lambda: [f for f in request_frames() if struct.unpack_from(">h", f)[0] == key]


def recorded_batches() -> list[bytes]:
    """Every record section of the recorded Produce requests, and a batch in each codec
    with keys, values and headers (the recording holds few of some codecs)."""
    out = []
    for f in _key(0)():
        for topic in produce.decode_produce(f)[3].topic_data:
            out += [bytes(p.records) for p in topic.partition_data if p.records is not None]
    records = [builder.Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * i, [("h", b"x")])
               for i in range(5)]
    out += [builder.build_batch(records, codec=c) for c in codecs.NAMES]
    return out


def codec_seeds() -> list[bytes]:
    out = []
    for records in recorded_batches():
        for pos, header in batch.iter_headers(records):
            payload = records[pos + batch.HEADER_SIZE:pos + header.size]
            out.append(bytes([header.compression]) + payload)
    # librdkafka's raw snappy block (no xerial framing)
    out.append(bytes([codecs.SNAPPY]) + bytes(cramjam.snappy.compress_raw(b"fz" * 40)))
    return out


def sasl_seeds() -> list[bytes]:
    client = scramp.ScramClient(["SCRAM-SHA-256"], SASL_USER, SASL_PASSWORD)
    first = client.get_client_first().encode()
    return [b"\0\0fz\0fz-secret", b"\0fz\0fz\0wrong", b"\1" + first, b"\2" + first,
            b"\3\0", b"\4\x10p=AAAA", b"\5n,a=fz,\x01auth=Bearer a.b.c\x01\x01"]


def framing_seeds() -> list[bytes]:
    data = CORPUS.read_bytes()
    return [bytes([step]) + data[:4096] for step in (0, 3, 63, 255)]


TARGETS: dict[str, Target] = {
    "decode_request": Target(fuzz_decode_request, request_seeds),
    "decode_produce": Target(fuzz_decode_produce, _key(0)),
    "decode_fetch": Target(fuzz_decode_fetch, _key(1)),
    "framing": Target(fuzz_framing, framing_seeds),
    "record_batches": Target(fuzz_record_batches, recorded_batches),
    "decode_batch": Target(fuzz_decode_batch, recorded_batches),
    "codecs": Target(fuzz_codecs, codec_seeds),
    "sasl": Target(fuzz_sasl, lambda: sasl_seeds()),
}


def write_seeds(name: str, directory: Path) -> int:
    """Write the target's seeds into an empty (or missing) corpus directory."""
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        return 0
    seeds = TARGETS[name].seeds()
    for i, seed in enumerate(seeds):
        (directory / f"seed-{i:04d}").write_bytes(seed)
    return len(seeds)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags] [corpus dir]")
    name = argv[1]
    for arg in argv[2:]:
        if not arg.startswith("-"):
            write_seeds(name, Path(arg))
    SERVED.update(served_versions())
    atheris.Setup([argv[0], *argv[2:]], TARGETS[name].run)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
