"""The Go clients franz-go and sarama over SASL_SSL with SCRAM (issue 18) against an
``odradek serve`` process set up as tests/interop/test_sasl.py's broker is (its
``broker_args``, ``add_scram_users`` and ``ca``).

The programs are test_go_clients.py's (tests/interop/go, built by scripts/fetch_go.sh),
given ``-tls-ca`` (the test CA's PEM certificate) and ``-sasl-mechanism``,
``-sasl-user``, ``-sasl-password``, which every client of the scenario uses:

- the produce scenario (every codec, read back by partition) over SASL_SSL with
  SCRAM-SHA-512 (dave), checked as test_go_clients.py checks it over PLAINTEXT;
- a wrong password: the program fails with an authentication error, the broker refuses
  the login and serves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from .conftest import BrokerProcess, run_tool, start_broker
from .test_go_clients import RUN_TIMEOUT, check_produce, require_program, run_go
from .test_sasl import add_scram_users, broker_args, ca  # noqa: F401 - ca: the fixture

pytestmark = pytest.mark.interop

PROGRAMS = ["franz", "sarama"]


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory,
                  ca) -> Iterator[BrokerProcess]:  # noqa: F811 - the fixture
    with start_broker(tmp_path_factory.mktemp("odradek-data"), *broker_args(ca[1])) as broker:
        add_scram_users(broker.bootstrap)
        yield broker


def scram_flags(ca, user: str, password: str) -> list[str]:  # noqa: F811 - the fixture's value
    return ["-tls-ca", str(ca[0].cert), "-sasl-mechanism", "SCRAM-SHA-512",
            "-sasl-user", user, "-sasl-password", password]


@pytest.mark.parametrize("program", PROGRAMS)
def test_go_client_produces_and_reads_back_over_sasl_ssl_with_scram_sha_512(
        secure_broker, ca, program):  # noqa: F811 - the fixture
    topic = f"go-secure-{program}"
    result = run_go(program, "produce", secure_broker, topic,
                    bootstrap=secure_broker.listener("SASL_SSL"),
                    extra=scram_flags(ca, "dave", "dave-secret"))
    check_produce(result, secure_broker, topic, program)


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
