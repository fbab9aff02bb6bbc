"""The Go clients franz-go and sarama over TLS and SASL (issue 18) against an
``odradek serve`` process set up as tests/interop/test_sasl.py's broker is (its
``broker_args``, ``add_scram_users`` and ``ca``).

The programs are test_go_clients.py's (tests/interop/go, built by scripts/fetch_go.sh),
given ``-tls-ca`` (the test CA's PEM certificate), ``-tls-cert``/``-tls-key`` and
``-sasl-mechanism``, ``-sasl-user``, ``-sasl-password``, which every client of the
scenario uses:

- the produce scenario (every codec, read back by partition), checked as
  test_go_clients.py checks it over PLAINTEXT, over mutual TLS (``-tls-cert``,
  ``-tls-key``: a certificate from the test CA), SASL_PLAINTEXT with PLAIN (alice) and
  SASL_SSL with SCRAM-SHA-256 (carol) and SCRAM-SHA-512 (dave), and OAUTHBEARER with a
  JWT the test signed (``-sasl-token``; tests/interop/test_oauthbearer.py's broker);
- a wrong password: the program fails with an authentication error, the broker refuses
  the login and serves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from .conftest import BrokerProcess, run_tool, start_broker
from .test_go_clients import RUN_TIMEOUT, check_produce, require_program, run_go
from .test_oauthbearer import idp, jwks, oauth_broker  # noqa: F401 - fixtures
from .test_sasl import add_scram_users, ca, mutual_tls_args  # noqa: F401 - ca: the fixture

pytestmark = pytest.mark.interop

PROGRAMS = ["franz", "sarama"]


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory,
                  ca) -> Iterator[BrokerProcess]:  # noqa: F811 - the fixture
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *mutual_tls_args(ca)) as broker:
        add_scram_users(broker.bootstrap)
        yield broker


def scram_flags(ca, user: str, password: str) -> list[str]:  # noqa: F811 - the fixture's value
    return ["-tls-ca", str(ca[0].cert), "-sasl-mechanism", "SCRAM-SHA-512",
            "-sasl-user", user, "-sasl-password", password]


def security_flags(ca, kind: str) -> tuple[str, list[str]]:  # noqa: F811 - its value
    """(listener, program flags) of one way to connect."""
    trust = ["-tls-ca", str(ca[0].cert)]
    if kind == "mtls":
        client = ca[0].issue("go-client", "CN=go-client,O=tests")
        return "MTLS", [*trust, "-tls-cert", str(client.cert), "-tls-key", str(client.key)]
    if kind == "plain":
        return "SASL_PLAINTEXT", ["-sasl-mechanism", "PLAIN", "-sasl-user", "alice",
                                  "-sasl-password", "alice-secret"]
    if kind == "scram-sha-256":
        return "SASL_SSL", [*trust, "-sasl-mechanism", "SCRAM-SHA-256", "-sasl-user", "carol",
                            "-sasl-password", "carol-secret"]
    return "SASL_SSL", scram_flags(ca, "dave", "dave-secret")


@pytest.mark.parametrize("kind", ["mtls", "plain", "scram-sha-256", "scram-sha-512"])
@pytest.mark.parametrize("program", PROGRAMS)
def test_go_client_produces_and_reads_back_securely(secure_broker, ca,  # noqa: F811
                                                    program, kind):
    topic = f"go-secure-{program}-{kind}"
    listener, flags = security_flags(ca, kind)
    result = run_go(program, "produce", secure_broker, topic,
                    bootstrap=secure_broker.listener(listener), extra=flags)
    check_produce(result, secure_broker, topic, program)


@pytest.mark.parametrize("program", PROGRAMS)
def test_go_client_logs_in_with_oauthbearer(oauth_broker, idp, program):  # noqa: F811
    """A JWT the test signed (tests/interop/test_oauthbearer.py's broker and identity
    provider) as franz-go's oauth.Auth and sarama's AccessTokenProvider."""
    topic = f"go-oauth-{program}"
    result = run_go(program, "produce", oauth_broker, topic,
                    bootstrap=oauth_broker.listener("SASL_PLAINTEXT"),
                    extra=["-sasl-mechanism", "OAUTHBEARER", "-sasl-token", idp.token(program)])
    check_produce(result, oauth_broker, topic, program)


@pytest.mark.parametrize("program", PROGRAMS)
def test_go_client_with_a_wrong_scram_password_fails_and_gets_nothing(
        secure_broker, ca, program):  # noqa: F811 - the fixture
    seen = len(secure_broker.stderr_lines)
    topic = f"go-secure-refused-{program}"
    done = run_tool([str(require_program(program)), "-bootstrap",
                     secure_broker.listener("SASL_SSL"), "-topic", topic, "-wait", "15s",
                     *scram_flags(ca, "dave", "wrong"), "produce"],
                    timeout=RUN_TIMEOUT, check=False)
    assert done.returncode != 0, done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert "error" in last and "auth" in last.lower(), f"{last}\n{done.stderr}"
    deadline = time.monotonic() + 10.0  # the broker's log line may come after the exit
    while not any("closing connection: SASL SCRAM-SHA-512: Authentication failed" in line
                  for line in secure_broker.stderr_lines[seen:]):
        assert time.monotonic() < deadline, secure_broker.output()[-2000:]
        time.sleep(0.1)
    assert not (secure_broker.data_dir / f"{topic}-0").exists()  # the topic was not created
    secure_broker.assert_alive()
