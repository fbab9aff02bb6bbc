"""Delegation tokens (KIP-48) on an in-process broker with a PLAINTEXT and a SASL_PLAINTEXT
listener (PLAIN users alice, bob, carol and admin; the authorizer on, admin and the
plaintext listener's ANONYMOUS super users): a user creates a token, a client logs in
with it over SCRAM (``tokenauth=true``) as the token's owner, renewers renew it, others
may not, describe shows each principal what Kafka would, and an expired or expired-by-
request token no longer logs in. The same with Kafka's Java client and tools:
tests/interop/test_delegation_tokens.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema

from odradek.client.codec import KafkaClientError
from odradek.client.connection import BrokerConnection
from odradek.protocol.messages import build
from odradek.testing import RunningBroker, running_broker
from tests.server.memory_cluster import MemoryCluster, with_cluster

WAIT = 30.0
SECRET = "token-secret-key"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
USERS = ("alice", "bob", "carol", "admin")
JAAS = f"{PLAIN} required " + " ".join(f'user_{u}="{u}-secret"' for u in USERS) + ";"
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "delegation.token.secret.key": SECRET,
    "delegation.token.max.lifetime.ms": "3600000",
    "delegation.token.expiry.time.ms": "600000",
}
# Token responses' timestamps are int64 ms here: Odradek's client reads them so (Kafka
# sends -1 in refusals, which kio's datetime fields cannot hold).
CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41
LATEST = {CREATE: 3, RENEW: 2, EXPIRE: 2, DESCRIBE: 3}


@pytest.fixture(scope="module")
def broker() -> Iterator[RunningBroker]:
    with running_broker(**SETTINGS) as running:
        yield running


def connect(broker: RunningBroker, user: str | None = None, *,
            token: tuple[str, bytes] | None = None,
            mechanism: str = "SCRAM-SHA-256") -> BrokerConnection:
    """A connection: PLAINTEXT (no user), PLAIN as ``user``, or SCRAM with a token."""
    if user is None and token is None:
        return BrokerConnection("127.0.0.1", broker.port, client_id="t", timeout_s=WAIT)
    port = broker.broker.listener_ports["SASL_PLAINTEXT"]
    security = {"security.protocol": "SASL_PLAINTEXT"}
    if token is not None:
        security.update({"sasl.mechanism": mechanism, "sasl.username": token[0],
                         "sasl.password": base64.b64encode(token[1]).decode(),
                         "sasl.tokenauth": "true"})
    else:
        security.update({"sasl.mechanism": "PLAIN", "sasl.username": str(user),
                         "sasl.password": f"{user}-secret"})
    return BrokerConnection("127.0.0.1", port, client_id="t", timeout_s=WAIT,
                            security=security)


def ask(conn: BrokerConnection, key: int, data: dict[str, Any],
        version: int | None = None) -> Any:
    return conn.call(build(load_request_schema(key, version or LATEST[key]), data))


def create(conn: BrokerConnection, renewers: tuple[str, ...] = (), owner: str | None = None,
           max_lifetime: int = -1, version: int | None = None) -> Any:
    kind, _, name = (owner or ":").partition(":")
    return ask(conn, CREATE, {
        "owner_principal_type": kind or None, "owner_principal_name": name or None,
        "renewers": [{"principal_type": r.partition(":")[0],
                      "principal_name": r.partition(":")[2]} for r in renewers],
        "max_lifetime": max_lifetime}, version)


def describe(conn: BrokerConnection, owners: list[str] | None = None) -> Any:
    return ask(conn, DESCRIBE, {"owners": None if owners is None else [
        {"principal_type": o.partition(":")[0], "principal_name": o.partition(":")[2]}
        for o in owners]})


def token_ids(answer: Any) -> set[str]:
    assert answer.error_code.value == 0, answer
    return {t.token_id for t in answer.tokens}


def sessions(broker: RunningBroker) -> dict[str, Any]:
    return {c.session.principal: c.session for c in broker.broker.connections()
            if c.session is not None and c.session.token_authenticated}


def test_a_token_logs_in_as_its_owner_and_may_not_manage_tokens(broker):
    alice = connect(broker, "alice")
    before = int(time.time() * 1000)
    made = create(alice, renewers=("User:bob",))
    assert made.error_code.value == 0, made
    assert (made.principal_type, made.principal_name) == ("User", "alice")
    assert made.token_requester_principal_name == "alice"
    issued, expiry, most = (made.issue_timestamp, made.expiry_timestamp,
                            made.max_timestamp)
    assert before <= issued <= int(time.time() * 1000)
    assert (expiry - issued, most - issued) == (600000, 3600000)
    # The HMAC is HMAC-SHA512 of the id under the secret key (every broker recomputes it).
    assert made.hmac == hmac.new(SECRET.encode(), made.token_id.encode(),
                                 hashlib.sha512).digest()
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        with_token = connect(broker, token=(made.token_id, made.hmac), mechanism=mechanism)
        session = sessions(broker)["User:alice"]
        # The session lasts until the token expires (it must log in again then).
        assert session.expires_at is not None
        assert 590 < session.expires_at - time.monotonic() <= 600
        refused = create(with_token)
        assert refused.error_code.name == "delegation_token_request_not_allowed"
        assert refused.issue_timestamp == -1
        assert describe(with_token).error_code.name == "delegation_token_request_not_allowed"
        with_token.close()
    # A wrong HMAC, or the token's id as a user name without tokenauth, is refused.
    with pytest.raises(KafkaClientError, match="Authentication failed"):
        connect(broker, token=(made.token_id, b"not the hmac"))
    with pytest.raises(KafkaClientError, match="Authentication failed"):
        BrokerConnection("127.0.0.1", broker.broker.listener_ports["SASL_PLAINTEXT"],
                         client_id="t", timeout_s=WAIT, security={
                             "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256",
                             "sasl.username": made.token_id,
                             "sasl.password": base64.b64encode(made.hmac).decode()})


def test_plaintext_clients_may_not_manage_tokens(broker):
    plain = connect(broker)
    refused = create(plain)
    assert refused.error_code.name == "delegation_token_request_not_allowed"
    assert (refused.principal_type, refused.principal_name) == ("User", "ANONYMOUS")
    assert (refused.issue_timestamp, refused.expiry_timestamp, refused.token_id,
            refused.hmac) == (-1, -1, "", b"")
    for key, data in [(RENEW, {"hmac": b"x", "renew_period": 1}),
                      (EXPIRE, {"hmac": b"x", "expiry_time_period": 1})]:
        answer = ask(plain, key, data)
        assert (answer.error_code.name, answer.expiry_timestamp) == (
            "delegation_token_request_not_allowed", -1)
    assert describe(plain).error_code.name == "delegation_token_request_not_allowed"


def test_renewers_renew_others_may_not_and_describe_shows_what_each_may_see(broker):
    alice, bob, carol = (connect(broker, u) for u in ("alice", "bob", "carol"))
    made = create(alice, renewers=("User:bob",), max_lifetime=1_800_000)
    assert made.max_timestamp - made.issue_timestamp == 1_800_000
    renewed = ask(bob, RENEW, {"hmac": made.hmac, "renew_period": 60_000})
    assert renewed.error_code.value == 0, renewed
    assert 0 < renewed.expiry_timestamp - int(time.time() * 1000) <= 60_000
    assert ask(carol, RENEW, {"hmac": made.hmac, "renew_period": 60_000}
               ).error_code.name == "delegation_token_owner_mismatch"
    assert ask(alice, RENEW, {"hmac": b"unknown", "renew_period": 1}
               ).error_code.name == "delegation_token_not_found"
    # The owner and the renewer see it (with its renewed expiry); carol does not, until
    # she may DESCRIBE_TOKENS of alice's.
    [seen] = [t for t in describe(alice).tokens if t.token_id == made.token_id]
    assert (seen.principal_name, seen.token_requester_principal_name) == ("alice", "alice")
    assert seen.expiry_timestamp == renewed.expiry_timestamp
    assert seen.hmac == made.hmac
    assert [(r.principal_type, r.principal_name) for r in seen.renewers] == [("User", "bob")]
    assert made.token_id in token_ids(describe(bob))
    assert made.token_id not in token_ids(describe(carol))
    assert token_ids(describe(alice, owners=[])) == set()
    assert made.token_id in token_ids(describe(alice, owners=["User:bob"]))
    assert made.token_id not in token_ids(describe(alice, owners=["User:carol"]))
    # (confluent-kafka has no USER resource type: the ACL goes on the wire.)
    made_acl = ask(connect(broker), 30, {"creations": [{
        "resource_type": 7, "resource_name": "User:alice", "resource_pattern_type": 3,
        "principal": "User:carol", "host": "*", "operation": 14, "permission_type": 3}]},
        version=3)
    assert made_acl.results[0].error_code.value == 0, made_acl
    assert made.token_id in token_ids(describe(carol))


def test_an_expired_token_no_longer_logs_in(broker):
    alice, carol = connect(broker, "alice"), connect(broker, "carol")
    made = create(alice)
    assert ask(carol, EXPIRE, {"hmac": made.hmac, "expiry_time_period": -1}
               ).error_code.name == "delegation_token_owner_mismatch"
    connect(broker, token=(made.token_id, made.hmac)).close()
    # A period shortens its life; a negative one ends it now.
    shortened = ask(alice, EXPIRE, {"hmac": made.hmac, "expiry_time_period": 120_000})
    assert shortened.error_code.value == 0, shortened
    assert 0 < shortened.expiry_timestamp - int(time.time() * 1000) <= 120_000
    expired = ask(alice, EXPIRE, {"hmac": made.hmac, "expiry_time_period": -1})
    assert expired.error_code.value == 0, expired
    assert made.token_id not in token_ids(describe(alice))
    with pytest.raises(KafkaClientError, match="Authentication failed"):
        connect(broker, token=(made.token_id, made.hmac))
    assert ask(alice, RENEW, {"hmac": made.hmac, "renew_period": 1}
               ).error_code.name == "delegation_token_not_found"


def test_tokens_for_other_owners_take_create_tokens_and_renewers_are_users(broker):
    alice, admin = connect(broker, "alice"), connect(broker, "admin")
    refused = create(alice, owner="User:dave")
    assert refused.error_code.name == "delegation_token_authorization_failed"
    assert (refused.principal_name, refused.token_requester_principal_name) == (
        "dave", "alice")
    made = create(admin, owner="User:dave")
    assert made.error_code.value == 0, made
    assert (made.principal_name, made.token_requester_principal_name) == ("dave", "admin")
    with_token = connect(broker, token=(made.token_id, made.hmac))
    assert "User:dave" in sessions(broker)  # the owner's, not the requester's
    with_token.close()
    assert create(alice, renewers=("Group:ops",)).error_code.name == "invalid_principal_type"
    # Before v3 the request names no owner: the token is the requester's.
    old = create(alice, version=2)
    assert (old.error_code.value, old.principal_name) == (0, "alice")


def test_tokens_survive_a_restart_and_expired_ones_are_swept(tmp_path):
    settings = {**SETTINGS, "delegation.token.expiry.check.interval.ms": "300"}
    with running_broker(str(tmp_path), **settings) as broker:
        alice = connect(broker, "alice")
        kept, short = create(alice), create(alice)
        assert ask(alice, EXPIRE, {"hmac": short.hmac, "expiry_time_period": 1000}
                   ).error_code.value == 0
    with running_broker(str(tmp_path), **settings) as broker:
        alice = connect(broker, "alice")
        assert kept.token_id in token_ids(describe(alice))
        connect(broker, token=(kept.token_id, kept.hmac)).close()
        deadline = time.monotonic() + WAIT
        while short.token_id in token_ids(describe(alice)):
            assert time.monotonic() < deadline, "the expired token was never swept"
            time.sleep(0.1)
        with pytest.raises(KafkaClientError, match="Authentication failed"):
            connect(broker, token=(short.token_id, short.hmac))
        assert kept.token_id in token_ids(describe(alice))


def test_without_a_secret_key_tokens_are_off():
    with running_broker(**{k: v for k, v in SETTINGS.items()
                           if k != "delegation.token.secret.key"}) as broker:
        alice = connect(broker, "alice")
        assert create(alice).error_code.name == "delegation_token_auth_disabled"
        assert describe(alice).error_code.name == "delegation_token_auth_disabled"
        assert ask(alice, RENEW, {"hmac": b"x", "renew_period": 1}
                   ).error_code.name == "delegation_token_auth_disabled"


class _Port:
    """A broker of the memory cluster as ``connect`` needs it (its SASL listener)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.port = broker.port


def test_a_token_made_through_one_broker_logs_in_on_every_other(tmp_path):
    """In a cluster the tokens are a document every broker follows (a znode): made
    through broker 1, the token logs in on broker 2 at once; expired through broker 3,
    it no longer logs in anywhere."""
    async def body(cluster: MemoryCluster) -> None:
        first, second, third = (_Port(cluster.brokers[n]) for n in (1, 2, 3))
        made = await asyncio.to_thread(lambda: create(connect(first, "alice")))
        assert made.error_code.value == 0, made
        await asyncio.to_thread(
            lambda: connect(second, token=(made.token_id, made.hmac)).close())
        expired = await asyncio.to_thread(lambda: ask(connect(third, "alice"), EXPIRE, {
            "hmac": made.hmac, "expiry_time_period": -1}))
        assert expired.error_code.value == 0, expired
        await cluster.wait_for(lambda: all(
            b.tokens is not None and not b.tokens.tokens() for b in cluster.running()),
            "the token gone from every broker")
        for broker in (first, second):
            with pytest.raises(KafkaClientError, match="Authentication failed"):
                await asyncio.to_thread(
                    lambda b=broker: connect(b, token=(made.token_id, made.hmac)))

    asyncio.run(with_cluster(tmp_path, body, **{
        k: v for k, v in SETTINGS.items() if k not in ("authorizer.class.name",
                                                        "super.users")}))
