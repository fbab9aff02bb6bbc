"""The oracle tier's brokers: one real Apache Kafka 4.x (KRaft, single node, from the jars
scripts/fetch_jvm.sh copies; devcluster/apache_kafka.py) and one ``odradek serve`` process,
each started once per test session and shared by every sequence (each sequence uses
topics, groups and transactional ids of its own).

Kafka's start-up time (format + start to ready) is measured once and printed in the
terminal summary, for the benchmarks' start-up comparison.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.devcluster.apache_kafka import ApacheKafka
from tests.interop.conftest import BrokerProcess, start_broker
from tests.jvm import require_jars

_STARTUP = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def apache_kafka(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    require_jars()
    kafka = ApacheKafka(tmp_path_factory.mktemp("apache-kafka"))
    try:
        kafka.start()
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(f"Apache Kafka did not start: {exc}")
    line = (f"Apache Kafka {kafka.bootstrap}: storage format {kafka.format_seconds:.2f}s, "
            f"start-up to ready {kafka.startup_seconds:.2f}s")
    print(f"\n{line}")
    request.config.stash[_STARTUP] = line
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def odradek(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("odradek-data")) as broker:
        yield broker


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    line = config.stash.get(_STARTUP, None)
    if line:
        terminalreporter.write_line(line)
