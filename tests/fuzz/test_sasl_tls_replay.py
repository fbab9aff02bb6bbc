"""The fuzz tier on secured listeners (issue 21): mutated SASL logins on a SASL_PLAINTEXT
listener, and damaged TLS ClientHellos on an SSL listener, with the properties of
test_mutation_replay: every connection answered or closed within ``ANSWER_BOUND_S``, no
ERROR logged, the broker up and serving real clients throughout, bounded RSS.

SASL: each attempt is a live login (SaslHandshake v0 or v1, then PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512 tokens, in SaslAuthenticate requests or, after a v0 handshake, as bare
frames; then a Metadata request), one of whose frames is mutated with
test_mutation_replay's mutations. SCRAM is computed for real (scramp), so a mutation can
land in the middle of an exchange the broker has accepted so far. The mutated frame is
the last one sent: the client then stops sending and reads until the broker closes (a
mutated frame may claim more bytes than it has, or become a request with no answer).

TLS: a real ClientHello (from ``ssl.MemoryBIO``), truncated, bit-flipped, with its record
or handshake length changed, spliced with random bytes, or replaced by a Kafka request in
clear or by random bytes; then the client stops sending and reads until the broker closes.
Every ``CHECK_EVERY`` attempts (and at the end) a real client is served over each
listener: ApiVersions/Metadata and a confluent-kafka round trip on PLAINTEXT, a PLAIN
login on SASL_PLAINTEXT, and a TLS ApiVersions.

``FUZZ_SASL_MUTATIONS`` (default 600) and ``FUZZ_TLS_MUTATIONS`` (default 300), with
``FUZZ_SEED`` (default 21).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import ssl
import struct
import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.index import load_response_schema
from kio.serial import entity_reader
from scramp import ScramClient, ScramException

from odradek.client.wire import encode_request
from odradek.devcluster.certs import TestCA
from odradek.testing import RunningBroker, running_broker
from tests.fuzz.test_mutation_replay import (
    ANSWER_BOUND_S,
    CHECK_EVERY,
    SEED,
    MiB,
    broker_log_lines,
    mutate,
)
from tests.server.test_bad_input import check_healthy, rss_bytes

SASL_MUTATIONS = int(os.environ.get("FUZZ_SASL_MUTATIONS", "600"))
TLS_MUTATIONS = int(os.environ.get("FUZZ_TLS_MUTATIONS", "300"))
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="fz" password="fz-secret" user_fz="fz-secret";')
USERS = {"PLAIN": "fz", "SCRAM-SHA-256": "fz-256", "SCRAM-SHA-512": "fz-512"}
PASSWORD = "fz-secret"
METADATA = {"topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    ca = TestCA(tmp_path_factory.mktemp("certs"))
    keystore = ca.issue("broker", "CN=localhost", server=True).keystore()
    with running_broker(**{
            "group.initial.rebalance.delay.ms": 0,
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                         "SSL://127.0.0.1:0",
            "ssl.keystore.location": str(keystore),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        for future in admin.alter_user_scram_credentials([
                UserScramCredentialUpsertion(USERS[m], ScramCredentialInfo(
                    getattr(ScramMechanism, m.replace("-", "_")), 4096), PASSWORD.encode())
                for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]).values():
            future.result(30)
        yield running


# --- SASL ---------------------------------------------------------------------------------

# One frame to send (without its size prefix), sent back the answer's payload (None: the
# answer did not come or did not decode; the login then stops).
Login = Generator[bytes, bytes | None, None]


def _request(key: int, version: int, body: dict[str, Any], correlation_id: int) -> bytes:
    return encode_request(key, version, body, correlation_id, "fuzz-sasl")[4:]


def _decode(key: int, version: int, payload: bytes | None) -> Any:
    if payload is None:
        return None
    try:
        schema = load_response_schema(key, version)
        _, used = entity_reader(schema.__header_schema__)(payload, 0)
        return entity_reader(schema)(payload, used)[0]
    except Exception:
        return None


def login(mechanism: str, handshake_version: int, auth_version: int) -> Login:
    """A client's login, frame by frame; then a Metadata request."""
    answer = _decode(17, handshake_version, (yield _request(
        17, handshake_version, {"mechanism": mechanism}, 1)))
    if answer is None or answer.error_code:
        return
    raw = handshake_version == 0  # KIP-43's bare token frames
    correlation = 1

    def token(data: bytes) -> Generator[bytes, bytes | None, bytes | None]:
        nonlocal correlation
        if raw:
            return (yield data)  # the answer is the bare server token
        correlation += 1
        reply = _decode(36, auth_version, (yield _request(
            36, auth_version, {"auth_bytes": data}, correlation)))
        return None if reply is None or reply.error_code else bytes(reply.auth_bytes)

    user = USERS[mechanism]
    if mechanism == "PLAIN":
        if (yield from token(f"\0{user}\0{PASSWORD}".encode())) is None:
            return
    else:
        client = ScramClient([mechanism], user, PASSWORD)
        server_first = yield from token(client.get_client_first().encode())
        if server_first is None:
            return
        try:
            client.set_server_first(server_first.decode())
            final = client.get_client_final()
        except (ScramException, UnicodeDecodeError, ValueError):
            return
        if (yield from token(final.encode())) is None:
            return
    yield _request(3, 12, METADATA, correlation + 1)


def read_frame(sock: socket.socket, deadline: float) -> bytes | None:
    """One answer's payload, or None if the broker closed the connection."""
    out = bytearray()
    need = 4
    while len(out) < need:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            chunk = sock.recv(need - len(out))
        except (ConnectionResetError, BrokenPipeError):
            return None
        except TimeoutError:
            raise AssertionError("neither answered nor closed in time") from None
        if not chunk:
            return None
        out += chunk
        if need == 4 and len(out) == 4:
            need = 4 + struct.unpack(">i", out)[0]
    return bytes(out[4:])


def drain(sock: socket.socket, deadline: float) -> None:
    """Stop sending; read until the broker closes (within the bound)."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        return
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            if not sock.recv(1 << 16):
                return
        except (ConnectionResetError, BrokenPipeError):
            return
        except TimeoutError:
            raise AssertionError("neither answered nor closed in time") from None


def mutated_login(port: int, rng: random.Random, donors: list[bytes]) -> str:
    """One login with one frame mutated; what was done ("MECHANISM KIND@FRAME")."""
    mechanism = rng.choice(sorted(USERS))
    steps = login(mechanism, rng.choice((0, 1, 1, 1)), rng.randint(0, 2))
    target = rng.randrange(3 if mechanism == "PLAIN" else 4)  # the frame to mutate
    kind = "none"  # the login ended (refused, or done) before the frame to mutate
    deadline = time.monotonic() + ANSWER_BOUND_S
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_BOUND_S) as sock:
        try:
            frame = next(steps)
            for i in range(6):
                if i == target:
                    kind, payload = mutate(rng, frame, donors)
                    kind = f"{kind}@{i}"
                    with contextlib.suppress(OSError):
                        sock.sendall(payload)
                    break
                try:
                    sock.sendall(struct.pack(">i", len(frame)) + frame)
                except OSError:
                    break
                answer = read_frame(sock, deadline)
                if answer is None:
                    break
                frame = steps.send(answer)
        except StopIteration:
            pass
        drain(sock, deadline)
    return f"{mechanism} {kind}"


def sasl_donors() -> list[bytes]:
    """Frames of correct logins (the mutations' splice material)."""
    out = []
    for mechanism in USERS:
        steps = login(mechanism, 1, 2)
        out.append(next(steps))
        out.append(_request(36, 2, {"auth_bytes": b"n,,n=fz,r=abc"}, 2))
    return out


def check_sasl_login(port: int) -> None:
    """A correct PLAIN login is accepted and the session then served Metadata."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_BOUND_S) as sock:
        deadline = time.monotonic() + ANSWER_BOUND_S
        steps = login("PLAIN", 1, 2)
        frame = next(steps)
        answers = 0
        try:
            while True:
                sock.sendall(struct.pack(">i", len(frame)) + frame)
                answer = read_frame(sock, deadline)
                assert answer is not None, "a correct PLAIN login was refused"
                answers += 1
                frame = steps.send(answer)
        except StopIteration:
            pass
        assert answers == 3, f"the login stopped after {answers} answers"
        assert _decode(3, 12, answer) is not None, "no Metadata after the login"


def test_mutated_sasl_logins_are_answered_or_refused(broker: RunningBroker) -> None:
    port = broker.broker.listener_ports["SASL_PLAINTEXT"]
    rng = random.Random(SEED)
    donors = sasl_donors()
    kinds: dict[str, int] = {}
    with broker_log_lines() as lines:
        check_sasl_login(port)
        rss_before = rss_bytes()
        for i in range(SASL_MUTATIONS):
            try:
                kind = mutated_login(port, rng, donors)
            except AssertionError as exc:
                raise AssertionError(f"SASL mutation {i} (seed {SEED}): {exc}") from None
            at = kind.rpartition("@")[2] if "@" in kind else "none"
            kinds[at] = kinds.get(at, 0) + 1
            if (i + 1) % CHECK_EVERY == 0:
                check_healthy(broker.port)
                check_sasl_login(port)
                assert not lines.errors, "\n".join(lines.errors[:3])
        check_healthy(broker.port)
        check_sasl_login(port)
        growth = rss_bytes() - rss_before
    assert not lines.errors, "\n".join(lines.errors[:5])
    assert growth < 64 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
    print(f"{SASL_MUTATIONS} SASL mutations (seed {SEED}), by the frame mutated: {kinds}; "
          f"{lines.warnings} warnings; RSS +{growth / MiB:.1f} MiB")


# --- TLS ----------------------------------------------------------------------------------


def client_hello() -> bytes:
    """The bytes a TLS client sends first (one or more TLS records)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def damaged_hello(rng: random.Random, hello: bytes, kafka: bytes) -> tuple[str, bytes]:
    data = bytearray(hello)
    kind = rng.choice(("truncate", "flip", "record-length", "handshake-length", "splice",
                       "kafka", "random", "version"))
    if kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == "record-length":  # TLS record header: type, version, length (uint16)
        data[3:5] = struct.pack(">H", rng.choice((0, 1, 4, 0x3FFF, 0x4000, 0x4001, 0xFFFF)))
    elif kind == "handshake-length":  # handshake header: type, length (uint24)
        data[6:9] = rng.choice((0, 1, 0xFFFF, 0xFFFFFF)).to_bytes(3, "big")
    elif kind == "splice":
        at = rng.randrange(len(data))
        data[at:at + rng.randint(1, 64)] = rng.randbytes(rng.randint(1, 64))
    elif kind == "kafka":
        data = bytearray(kafka)
    elif kind == "random":
        data = bytearray(rng.randbytes(rng.randint(1, 2048)))
    else:  # a record version no TLS speaks
        data[1:3] = rng.choice((b"\x00\x00", b"\x02\x00", b"\x03\x09", b"\xff\xff"))
    return kind, bytes(data)


def check_tls(port: int) -> None:
    """A TLS client completes its handshake and is answered ApiVersions."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_BOUND_S) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as sock:
        sock.sendall(encode_request(18, 3, {"client_software_name": "fuzz",
                                            "client_software_version": "1"}, 7))
        answer = read_frame(sock, time.monotonic() + ANSWER_BOUND_S)
        assert answer is not None and struct.unpack_from(">i", answer)[0] == 7


def test_damaged_tls_client_hellos_are_closed_and_the_next_client_served(
        broker: RunningBroker) -> None:
    port = broker.broker.listener_ports["SSL"]
    rng = random.Random(SEED)
    hello = client_hello()
    kafka = encode_request(18, 3, {"client_software_name": "fuzz",
                                   "client_software_version": "1"}, 1)
    kinds: dict[str, int] = {}
    with broker_log_lines() as lines:
        check_tls(port)
        rss_before = rss_bytes()
        for i in range(TLS_MUTATIONS):
            kind, payload = damaged_hello(rng, hello, kafka)
            kinds[kind] = kinds.get(kind, 0) + 1
            deadline = time.monotonic() + ANSWER_BOUND_S
            with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_BOUND_S) as s:
                try:
                    s.sendall(payload)
                    drain(s, deadline)
                except OSError:
                    pass  # closed by the broker already
                except AssertionError as exc:
                    raise AssertionError(f"TLS mutation {i} ({kind}, seed {SEED}): {exc}: "
                                         f"{payload[:64].hex()}") from None
            if (i + 1) % CHECK_EVERY == 0:
                check_tls(port)
                check_healthy(broker.port)
        check_tls(port)
        check_healthy(broker.port)
        growth = rss_bytes() - rss_before
    assert not lines.errors, "\n".join(lines.errors[:5])
    assert growth < 64 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
    print(f"{TLS_MUTATIONS} damaged ClientHellos (seed {SEED}): {kinds}; "
          f"{lines.warnings} warnings; RSS +{growth / MiB:.1f} MiB")

