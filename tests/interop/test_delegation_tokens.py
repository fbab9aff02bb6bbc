"""Delegation tokens (KIP-48) with Kafka 4.4's own tool and Java client against an
``odradek serve`` process (a PLAINTEXT and a SASL_PLAINTEXT listener, PLAIN users alice
and bob, ``delegation.token.secret.key`` set), as a Kafka operator uses them:

- kafka-delegation-tokens (DelegationTokenCommand, Kafka's Admin client) logged in as
  alice creates a token with bob as renewer and prints its id and HMAC;
- the Java producer, consumer and Admin log in with the token (ScramLoginModule,
  ``tokenauth="true"``, the id and HMAC as username and password) and make a round
  trip as alice (tests/interop/java/secure/SecureRoundTrip.java);
- bob describes the tokens of User:bob (he renews this one, so he sees it) and renews
  it; alice expires it; the next
  login with it is refused (SaslAuthenticationException);
- over PLAINTEXT the tool is refused (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, which the
  Java client reports as UnsupportedByAuthenticationException).

The in-process tier (tests/server/test_delegation_tokens.py) covers the rules' corners.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import BrokerProcess, start_broker
from .test_java_secure import RECORDS, assert_round_trip, jaas, java_classes, round_trip  # noqa: F401
from .test_kafka_tools import tool

pytestmark = pytest.mark.interop

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        f'{PLAIN} required user_alice="alice-secret" user_bob="bob-secret";',
    "delegation.token.secret.key": "interop-token-key",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def token_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    args = [a for k, v in SETTINGS.items() for a in ("--override", f"{k}={v}")]
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *args) as broker:
        yield broker


def command_config(tmp_path: Path, user: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    f"sasl.jaas.config={jaas(PLAIN, user, f'{user}-secret')}\n")
    return str(path)


def tokens_tool(broker: BrokerProcess, config: str, *args: str):  # type: ignore[no-untyped-def]
    """kafka-delegation-tokens on the SASL listener, logged in as ``config`` says."""
    return tool("DelegationTokenCommand", "--bootstrap-server",
                broker.listener("SASL_PLAINTEXT"), "--command-config", config, *args)


def test_a_token_made_by_kafkas_tool_logs_the_java_client_in_until_it_is_expired(
        token_broker, java_classes, tmp_path):  # noqa: F811 - java_classes: the fixture
    alice, bob = command_config(tmp_path, "alice"), command_config(tmp_path, "bob")
    made = tokens_tool(token_broker, alice, "--create", "--max-life-time-period", "-1",
                       "--renewer-principal", "User:bob").stdout
    assert "Created delegation token with tokenId" in made, made
    token_id, hmac, owner, requester, renewers = made.strip().splitlines()[-1].split()[:5]
    assert (owner, requester, renewers) == ("User:alice", "User:alice", "[User:bob]")

    login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": f'{SCRAM} required username="{token_id}" '
                                 f'password="{hmac}" tokenauth="true";'}
    assert_round_trip(round_trip(java_classes, token_broker.listener("SASL_PLAINTEXT"),
                                 "token-round-trip", login))

    # (Without --owner-principal the tool asks for an empty owner list, which Kafka
    # answers with no tokens: asked for bob's, it finds the one he renews.)
    described = tokens_tool(token_broker, bob, "--describe", "--owner-principal",
                            "User:bob").stdout
    assert token_id in described and "Total number of tokens : 1" in described, described
    renewed = tokens_tool(token_broker, bob, "--renew", "--hmac", hmac,
                          "--renew-time-period", "600000").stdout
    assert "Completed renew operation" in renewed, renewed
    expired = tokens_tool(token_broker, alice, "--expire", "--hmac", hmac,
                          "--expiry-time-period", "-1").stdout
    assert "Completed expire operation" in expired, expired
    assert "Total number of tokens : 0" in tokens_tool(
        token_broker, alice, "--describe", "--owner-principal", "User:alice").stdout

    refused = round_trip(java_classes, token_broker.listener("SASL_PLAINTEXT"),
                         "token-refused", {**login, "request.timeout.ms": "10000",
                                           "default.api.timeout.ms": "15000"})
    assert "produced" not in refused, refused
    assert "SaslAuthenticationException" in refused["error"], refused["error"]


def test_kafkas_tool_over_plaintext_is_refused(token_broker, tmp_path):
    plaintext = tmp_path / "plaintext.properties"
    plaintext.write_text("security.protocol=PLAINTEXT\n")
    done = tool("DelegationTokenCommand", "--bootstrap-server", token_broker.bootstrap,
                "--command-config", str(plaintext), "--describe", check=False)
    printed = done.stdout + done.stderr
    assert done.returncode != 0, printed
    # DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, as the Java client names it.
    assert "UnsupportedByAuthenticationException" in printed, printed
