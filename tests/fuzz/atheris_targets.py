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

What a broker reads from other brokers:

- ``fetch_response``: ``client.codec.decode_response`` on a Fetch answer body of the
  versions the replica fetcher speaks (4-12; first byte picks), seeded with answers
  kio encodes around the recorded batches; what decodes must hold records as bytes (a
  view of the frame from the hand decoder) or null; refusals KafkaClientError.
- ``follower_batches``: a follower's append of a leader's ``records``
  (``Log.append(assign_offsets=False)``, as ``ReplicaManager.follower_append`` calls
  it, on one log in /dev/shm emptied after each input; first byte: make the CRCs
  right first or not); what is taken must end the log at its last batch's end and be
  kept byte for byte, a refusal must leave the log end alone; refusals RecordError
  and InvalidOffsetError.
- ``znodes``: every znode parser of ``cluster.state`` (broker registration, topic
  assignment, partition state, topic/broker configs, producer id block, cluster id,
  controller, controller epoch; first byte picks) and ``broker_id`` on the same bytes
  as a child name, seeded with what Odradek's ``to_json`` and Kafka write; what parses
  must round-trip through ``to_json``; refusals ZnodeFormatError.

By hand (long mode; seeds are written into an empty corpus directory first)::

    mkdir -p /tmp/fz-req && nice -n 10 .venv/bin/python -m tests.fuzz.atheris_targets \\
        decode_request -max_total_time=3600 -timeout=10 /tmp/fz-req

CI runs each target for a few thousand inputs (tests/fuzz/test_atheris.py).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import struct
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import atheris
import cramjam

# Instrumented for coverage: the code under test (and kio's readers, which decode every
# request but Produce and Fetch). Modules imported before this point are not instrumented.
with atheris.instrument_imports(include=["odradek.protocol", "odradek.records",
                                         "odradek.security", "odradek.client.codec",
                                         "odradek.cluster.state", "odradek.storage.log",
                                         "odradek.storage.segment",
                                         "kio.serial", "scramp"]):
    import scramp

    from odradek.client.codec import FETCH, KafkaClientError, decode_response, writer
    from odradek.cluster import state as zk
    from odradek.protocol import codec, fetch, framing, produce, replica_fetch
    from odradek.protocol.reader import DecodeError
    from odradek.records import batch, builder, codecs
    from odradek.records.errors import RecordError
    from odradek.security.oauth import parse_initial_response
    from odradek.security.sasl import PlainAuthenticator, ScramAuthenticator, TokenLogin
    from odradek.security.scram import AuthenticationFailed, from_password
    from odradek.storage.config import LogConfig
    from odradek.storage.errors import InvalidOffsetError
    from odradek.storage.log import Log

from kio.index import load_response_schema

from odradek.protocol.messages import build

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


def scram_server(mechanism: str) -> ScramAuthenticator:
    """SCRAM for user SASL_USER, and a delegation token of the same name and password."""
    credential = SCRAM_CREDENTIALS[mechanism]
    return ScramAuthenticator(mechanism, {SASL_USER: credential}.get, {
        SASL_USER: TokenLogin(credential, "fz-owner", 2**62)}.get)


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
            scram_server(mechanism).step(token)  # tokenauth=true in it: the token path
        else:
            server = scram_server(mechanism)
            client = scramp.ScramClient([mechanism], SASL_USER, SASL_PASSWORD)
            client.set_server_first(server.step(client.get_client_first().encode())[0].decode())
            final = bytearray(client.get_client_final().encode())
            if token:
                at = token[0] % len(final)
                final[at:at + len(token) - 1] = token[1:]
            server.step(bytes(final))
    except AuthenticationFailed:
        pass


# --- what a follower reads from its leader ---------------------------------------------

# The Fetch versions the replica fetcher speaks (client/aio.py, DEFAULT_VERSIONS): the
# one used is the highest the leader serves, 12 between Odradek brokers.
FETCH_VERSIONS = range(4, 14)  # to v13, what followers read by hand


def fuzz_fetch_response(data: bytes) -> None:
    """First byte: the Fetch version; the rest: a response frame's body as the fetcher's
    connection reads it (size prefix removed; ``check_response_size`` lets no body under
    4 bytes through). The correlation id is taken from the body, as if it matched: the
    decoder is what is fuzzed, not the mismatch check. Whatever decodes must be what the
    fetcher reads: records as bytes or a view of the frame (or null) for
    ``follower_append``."""
    if len(data) < 5:
        return
    version = FETCH_VERSIONS[data[0] % len(FETCH_VERSIONS)]
    body = data[1:]
    correlation = _SIZE.unpack_from(body)[0]
    answers = []
    if version == replica_fetch.VERSION:  # what Odradek brokers read by hand
        with contextlib.suppress(replica_fetch.FetchResponseError):
            answers.append(replica_fetch.decode_fetch_response(body, correlation))
    with contextlib.suppress(KafkaClientError):
        answers.append(decode_response(body, FETCH, version, correlation, "fuzz:0"))
    for answer in answers:
        for topic in answer.responses:
            # Named by the fetcher's decoder ("" for an id it does not know); kio's v13+
            # answers have only the id.
            if isinstance(answer, replica_fetch.FetchAnswer) or version < 13:
                assert isinstance(topic.topic, str)
            for p in topic.partitions:
                assert p.records is None or isinstance(p.records, (bytes, memoryview)), \
                    type(p.records)


FOLLOWER_LOG: list[Log] = []


def _follower_log() -> Log:
    """One log for the whole run, emptied after each input (opening one per input
    would be most of the cost). In /dev/shm where there is one: no disk writes."""
    if not FOLLOWER_LOG:
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
        # libFuzzer ends the process with exit(), past Python's atexit: the directories
        # of earlier runs (named by their pid) are removed here once that pid is gone.
        for old in base.glob("odradek-fz-follower-*-*"):
            pid = old.name.split("-")[3]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(old, ignore_errors=True)
        directory = tempfile.mkdtemp(prefix=f"odradek-fz-follower-{os.getpid()}-", dir=base)
        atexit.register(shutil.rmtree, directory, True)
        FOLLOWER_LOG.append(Log.open(str(Path(directory) / "fz-0"), LogConfig()))
    return FOLLOWER_LOG[0]


def _with_crcs(data: bytes) -> bytes:
    """``data`` with the CRC-32C of every batch its length fields frame made right, so
    that mutations of the fields under the CRC (counts, offset deltas, attributes) reach
    the checks after it."""
    buf = bytearray(data)
    pos = 0
    while pos + batch.HEADER_SIZE <= len(buf):
        size = _SIZE.unpack_from(buf, pos + batch.LENGTH_AT)[0] + batch.LOG_OVERHEAD_SIZE
        if size < batch.HEADER_SIZE or pos + size > len(buf):
            break
        struct.pack_into(">I", buf, pos + batch.CRC_AT, batch.compute_crc(buf[pos:pos + size]))
        pos += size
    return bytes(buf)


def fuzz_follower_batches(data: bytes) -> None:
    """First byte: bit 0 set, the batches' CRCs are made right first (``_with_crcs``);
    the rest: arbitrary bytes as a Fetch answer's ``records`` for a follower whose log
    ends at offset 0: ``Log.append(assign_offsets=False)``, the append and its checks that
    ``ReplicaManager.follower_append`` runs. Refusals: RecordError (framing, CRC, size),
    InvalidOffsetError (offsets that do not continue the log). What is taken must be
    kept byte for byte (every replica's log is byte-identical below the high
    watermark) and end the log where its last batch ends."""
    if not data:
        return
    data = _with_crcs(data[1:]) if data[0] & 1 else data[1:]
    lg = _follower_log()
    try:
        try:
            info = lg.append(data, assign_offsets=False, flush=False)
        except (RecordError, InvalidOffsetError):
            assert lg.log_end_offset == 0, "a refused append moved the log end"
            return
        last = info.batches[-1]
        assert lg.log_end_offset == last.next_offset == info.last_offset + 1, (
            f"log end {lg.log_end_offset} after a batch ending at {last.last_offset}")
        region = lg.read(info.first_offset, len(data)).region
        assert region is not None and region.read() == data, "not kept byte for byte"
    finally:
        lg.truncate_fully_and_start_at(0)
        # Retired segments keep their files open for file.delete.delay.ms (a read's
        # region may still be sent); the broker's background task closes them later.
        lg.close_retired(everything=True)


# --- znodes: what other brokers wrote into ZooKeeper --------------------------------------

ZNODE_PARSERS: tuple[Callable[[bytes], object], ...] = (
    lambda raw: zk.BrokerInfo.from_json(1, raw),
    lambda raw: zk.TopicAssignment.from_json("fz", raw),
    lambda raw: zk.PartitionState.from_json(raw, 0),
    zk.config_from_json,
    zk.producer_id_block_from_json,
    zk.cluster_id_from_json,
    zk.controller_from_json,
    zk.controller_epoch_from_json,
)


def fuzz_znodes(data: bytes) -> None:
    """First byte: the parser (``ZNODE_PARSERS``); the rest: the znode's bytes (also as
    a child name of /brokers/ids, decoded as ZooKeeper names are: ``broker_id`` says
    None or an id, never raises). Refusal: ZnodeFormatError; anything else is a
    finding. What parses must be what the broker can use: it round-trips through the
    ``to_json`` Odradek writes."""
    if not data:
        return
    raw = data[1:]
    zk.broker_id(raw.decode("utf-8", "replace"))
    parser = ZNODE_PARSERS[data[0] % len(ZNODE_PARSERS)]
    try:
        value = parser(raw)
    except zk.ZnodeFormatError as exc:
        assert str(exc), "a refusal must say what was wrong"
        return
    if isinstance(value, zk.BrokerInfo):
        again = zk.BrokerInfo.from_json(1, value.to_json(0))
        assert again.address(None) == value.address(None), (again, value)
    elif isinstance(value, zk.TopicAssignment):
        assert zk.TopicAssignment.from_json("fz", value.to_json()) == value
    elif isinstance(value, zk.PartitionState):
        assert zk.PartitionState.from_json(value.to_json(), 0) == value
    elif isinstance(value, dict):
        assert zk.config_from_json(zk.config_to_json(value)) == value


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


def _fetch_response(version: int, correlation: int, records: list[bytes | None]) -> bytes:
    """A Fetch response body as a leader sends it to a follower (kio's encoder, the
    same layout Odradek's hand-built answer has)."""
    schema = load_response_schema(FETCH, version)
    answer = build(schema, {
        "throttle_time": 0, "error_code": 0, "session_id": 7,
        "responses": [{"topic": "fz", "partitions": [
            {"partition_index": i, "error_code": 0, "high_watermark": 5,
             "last_stable_offset": 5, "log_start_offset": 0, "aborted_transactions": [],
             "preferred_read_replica": -1, "records": r} for i, r in enumerate(records)]}]})
    buf = io.BytesIO()
    header = schema.__header_schema__
    writer(header)(buf, header(correlation_id=correlation))
    writer(schema)(buf, answer)
    return buf.getvalue()


def follower_records() -> list[bytes]:
    """Record sections as a leader's log holds them: the recorded batches with offsets
    from 0 and a leader epoch set (both outside the CRC), one by one and all in a row."""
    out, row, offset = [], bytearray(), 0
    for records in recorded_batches():
        buf = bytearray(records)
        start = offset
        for pos, header in batch.iter_headers(records):
            batch.set_base_offset(buf, offset, pos)
            batch.set_partition_leader_epoch(buf, 3, pos)
            offset += header.last_offset_delta + 1
        row += buf
        for pos, _ in batch.iter_headers(buf):
            batch.set_base_offset(buf, batch.read_header(buf, pos).base_offset - start, pos)
        out.append(bytes(buf))
    return [*out, bytes(row)]


def follower_seeds() -> list[bytes]:
    return [bytes([mode]) + r for r in follower_records() for mode in (0, 1)]


def fetch_response_seeds() -> list[bytes]:
    records = follower_records()
    seeds = []
    for i, version in enumerate(FETCH_VERSIONS):
        body = _fetch_response(version, 1000 + i, [records[i % len(records)], None, b""])
        seeds.append(bytes([i]) + body)
    return seeds


def znode_seeds() -> list[bytes]:
    """Each parser's input as Odradek writes it, and as Kafka 2.x/3.x wrote it."""
    topic_id = uuid.UUID("7b3f8c2e-0d1a-4f5e-9a6b-2c3d4e5f6a7b")
    by_parser: list[list[bytes]] = [
        [zk.BrokerInfo(1, "h1", 9092, "r1", 5, (("PLAINTEXT", "PLAINTEXT", "h1", 9092),
                                                ("SSL", "SSL", "h1", 9093))).to_json(1),
         b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":'
         b'["PLAINTEXT://[::1]:9092"],"jmx_port":-1,"features":{},"host":"::1",'
         b'"timestamp":"1700000000000","port":9092,"version":5}'],
        [zk.TopicAssignment("fz", topic_id, ((1, 2), (2, 3)), {1: (3,)}, {1: (1,)}).to_json(),
         b'{"version":1,"partitions":{"0":[0,1],"1":[1,0]}}'],
        [zk.PartitionState(1, 4, (1, 2), 3, 99).to_json(),
         b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'],
        [zk.config_to_json({"retention.ms": "1000", "cleanup.policy": "compact"})],
        [zk.producer_id_block_to_json(1, 1000, 1999)],
        [zk.cluster_id_to_json("q0HE0WQfRxGpw6x8d5ue5Q")],
        [zk.controller_to_json(2, 1),
         b'{"version":2,"brokerid":2,"timestamp":"1","kraftControllerEpoch":-1}'],
        [zk.controller_epoch_to_json(12), b"2147483646"],
    ]
    assert len(by_parser) == len(ZNODE_PARSERS)
    return [bytes([i]) + raw for i, raws in enumerate(by_parser) for raw in raws]


TARGETS: dict[str, Target] = {
    "decode_request": Target(fuzz_decode_request, request_seeds),
    "decode_produce": Target(fuzz_decode_produce, _key(0)),
    "decode_fetch": Target(fuzz_decode_fetch, _key(1)),
    "framing": Target(fuzz_framing, framing_seeds),
    "record_batches": Target(fuzz_record_batches, recorded_batches),
    "decode_batch": Target(fuzz_decode_batch, recorded_batches),
    "codecs": Target(fuzz_codecs, codec_seeds),
    "sasl": Target(fuzz_sasl, lambda: sasl_seeds()),
    "fetch_response": Target(fuzz_fetch_response, fetch_response_seeds),
    "follower_batches": Target(fuzz_follower_batches, follower_seeds),
    "znodes": Target(fuzz_znodes, znode_seeds),
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
