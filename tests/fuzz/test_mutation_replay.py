"""The fuzz tier, mutation replay (issue 21): requests real clients sent
(``corpus/requests.bin``, recorded by ``record_corpus.py``: every API key the broker
serves, from confluent-kafka, kafka-python, aiokafka, this repository's client and the
test suite's wire client) are mutated and sent to an in-process broker, each on a fresh
connection, and the broker must:

- answer or close every such connection within ``ANSWER_BOUND_S``;
- log no ERROR (a traceback is an unexpected error: every bad input has a known path);
- stay up, and serve a real client (ApiVersions, Metadata, a confluent-kafka round
  trip) every ``CHECK_EVERY`` mutations and at the end;
- not grow without bound (RSS).

Mutations: bit flips, a truncation, an extreme int16 or int32 written at a random
offset, a slice replaced by random bytes or by a slice of another frame, a random API
version, and a size prefix that claims more or fewer bytes than are sent.

CI runs ``FUZZ_MUTATIONS`` (default 3,000) with ``FUZZ_SEED`` (default 21); a long run by
hand: ``FUZZ_MUTATIONS=1000000 FUZZ_SEED=$RANDOM .venv/bin/python -m pytest --timeout 0
tests/fuzz/test_mutation_replay.py`` (docs/operations.md, "Robustness").
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from odradek.protocol.codec import ProtocolError, decode_request
from odradek.server.handlers import HANDLERS
from odradek.testing import running_broker
from tests.server.test_bad_input import check_healthy, rss_bytes

CORPUS = Path(__file__).parent / "corpus" / "requests.bin"
MUTATIONS = int(os.environ.get("FUZZ_MUTATIONS", "3000"))
SEED = int(os.environ.get("FUZZ_SEED", "21"))
CHECK_EVERY = 500
ANSWER_BOUND_S = 10.0
EXTREMES_16 = (0, 1, -1, 0x7FFF, -0x8000)
EXTREMES_32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x10000, 2**20)
MiB = 1024 * 1024


def corpus() -> list[bytes]:
    data = CORPUS.read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames


def mutate(rng: random.Random, frame: bytes, frames: list[bytes]) -> tuple[str, bytes]:
    """(what was done, the bytes to send: size prefix included)."""
    data = bytearray(frame)
    kind = rng.choice(("flip", "truncate", "int16", "int32", "splice", "version", "size"))
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind in ("int16", "int32"):
        width, values = (2, EXTREMES_16) if kind == "int16" else (4, EXTREMES_32)
        if len(data) > width:
            at = rng.randrange(len(data) - width + 1)
            data[at:at + width] = struct.pack(">h" if width == 2 else ">i",
                                              rng.choice(values))
    elif kind == "splice":
        at = rng.randrange(len(data))
        end = min(len(data), at + rng.randint(1, 32))
        donor = rng.choice(frames)
        start = rng.randrange(len(donor))
        piece = (bytes(rng.getrandbits(8) for _ in range(end - at)) if rng.random() < 0.5
                 else donor[start:start + rng.randint(1, 32)])
        data[at:end] = piece
    elif kind == "version" and len(data) >= 4:
        data[2:4] = struct.pack(">h", rng.choice((-1, 0, 1, 3, 13, 100, 0x7FFF)))
    if kind == "size":
        claimed = len(data) + rng.choice((-4, -1, 1, 100, 2**20))
        return kind, struct.pack(">i", max(claimed, 0)) + bytes(data)
    return kind, struct.pack(">i", len(data)) + bytes(data)


# Requests that make the broker create more partitions than this are not sent (counted
# as "heavy"): a mutated CreateTopics/CreatePartitions may ask for thousands (up to
# Kafka's 10,000 per request, accepted), each holding file descriptors, and a long run
# would exhaust the process's limit as it would Kafka's - a known limit
# (docs/operations.md, "Robustness"), not something to find again and again. (The stall
# such a request once caused is fixed: logs are made in slices.)
HEAVY_PARTITIONS = 1000


def heavy(payload: bytes) -> bool:
    """A CreateTopics or CreatePartitions asking for over HEAVY_PARTITIONS partitions."""
    frame = payload[4:]
    if len(frame) < 4 or struct.unpack_from(">h", frame)[0] not in (19, 37):
        return False
    try:
        request = decode_request(frame, {19: (0, 0x7FFF), 37: (0, 0x7FFF)})
    except ProtocolError:
        return False
    if request.api_key == 19:
        return sum(max(t.num_partitions, 0) for t in request.body.topics) > HEAVY_PARTITIONS
    return sum(max(t.count, 0) for t in request.body.topics) > HEAVY_PARTITIONS


def send_one(port: int, payload: bytes) -> None:
    """Send, stop sending, and read until the broker closes (within the bound)."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_BOUND_S) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)  # the broker sees the end: answer, then close
        except OSError:
            return  # closed by the broker already (a refused frame)
        deadline = time.monotonic() + ANSWER_BOUND_S
        while True:
            if time.monotonic() > deadline:
                raise AssertionError("neither answered nor closed in time")
            try:
                if not sock.recv(1 << 16):
                    return
            except (ConnectionResetError, BrokenPipeError):
                return


class ErrorLines(logging.Handler):
    """Keeps the text of ERROR lines only and counts WARNING ones. The broker's and
    asyncio's loggers send here only while the test runs (not on to pytest's log
    capture, which keeps every record, and with them their exceptions, tracebacks and
    the frames' buffers: the RSS check would measure the test, and thousands of kept
    records ran the process out of file descriptors)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[str] = []
        self.warnings = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors.append(self.format(record))
        else:
            self.warnings += 1


@contextlib.contextmanager
def broker_log_lines() -> Iterator[ErrorLines]:
    """The broker's and asyncio's WARNING+ lines go to an ErrorLines while inside."""
    lines = ErrorLines()
    loggers = [logging.getLogger(name) for name in ("odradek", "asyncio")]
    saved = [(lg.propagate, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(lines)
        lg.propagate = False
        lg.setLevel(logging.WARNING)
    try:
        yield lines
    finally:
        for lg, (propagate, level) in zip(loggers, saved, strict=True):
            lg.removeHandler(lines)
            lg.propagate = propagate
            lg.setLevel(level)


def test_mutated_client_requests_are_answered_or_refused_and_nothing_breaks() -> None:
    frames = corpus()
    # Every API the broker serves is in the corpus (record_corpus.py records them all).
    missing = set(HANDLERS) - {struct.unpack_from(">h", f)[0] for f in frames}
    assert not missing, (f"API keys {sorted(missing)} are served but not in the corpus: "
                         "record them in tests/fuzz/record_corpus.py and run it")
    rng = random.Random(SEED)
    kinds: dict[str, int] = {}
    with broker_log_lines() as lines:
        growth = run_mutations(frames, rng, kinds, lines)
    assert not lines.errors, "\n".join(lines.errors[:5])
    assert growth < 64 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
    print(f"{MUTATIONS} mutations (seed {SEED}): {kinds}; {lines.warnings} warnings; "
          f"RSS +{growth / MiB:.1f} MiB")


def run_mutations(frames: list[bytes], rng: random.Random, kinds: dict[str, int],
                  lines: ErrorLines) -> int:
    """Send the mutations; the broker process's RSS growth over them."""
    with running_broker(**{"group.initial.rebalance.delay.ms": 0}) as broker:
        check_healthy(broker.port)
        rss_before = rss_bytes()
        for i in range(MUTATIONS):
            kind, payload = mutate(rng, rng.choice(frames), frames)
            if heavy(payload):
                kind = "heavy"
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "heavy":
                continue
            try:
                send_one(broker.port, payload)
            except AssertionError as exc:
                raise AssertionError(f"mutation {i} ({kind}, seed {SEED}): {exc}: "
                                     f"{payload[:64].hex()}") from None
            if (i + 1) % CHECK_EVERY == 0:
                check_healthy(broker.port)
                assert not lines.errors, (f"after mutation {i} (seed {SEED}): "
                                          + "\n".join(lines.errors[:3]))
        check_healthy(broker.port)
        return rss_bytes() - rss_before
