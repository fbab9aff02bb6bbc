"""Odradek for your own test suites: a real broker on a free port in a temporary
directory, no Docker, no JVM.

    from odradek.testing import running_broker

    with running_broker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

or, with pytest, the ``odradek_broker`` fixture (registered as a pytest plugin when
Odradek is installed). Settings go by their Kafka names:
``running_broker(**{"num.partitions": 3})``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from odradek.server.broker import Broker
from odradek.server.config import load_config
from odradek.server.run import BrokerThread

TEST_OFFSETS_TOPIC_PARTITIONS = 4
TEST_TRANSACTION_STATE_PARTITIONS = 4


@dataclass(frozen=True)
class RunningBroker:
    bootstrap: str  # "127.0.0.1:PORT", for bootstrap.servers
    host: str
    port: int
    data_dir: str
    broker: Broker


@contextmanager
def running_broker(data_dir: str | None = None, **settings: Any) -> Iterator[RunningBroker]:
    """Start a broker on 127.0.0.1 and a free port; stop it (cleanly) on exit."""
    # A test broker starts and stops fast: __consumer_offsets and __transaction_state get
    # a few partitions rather than Kafka's 50 (each is a log to create, open and close),
    # unless a test asks.
    settings.setdefault("offsets.topic.num.partitions", TEST_OFFSETS_TOPIC_PARTITIONS)
    settings.setdefault("transaction.state.log.num.partitions",
                        TEST_TRANSACTION_STATE_PARTITIONS)
    with tempfile.TemporaryDirectory(prefix="odradek-test-") as tmp:
        config = load_config(listen="127.0.0.1:0", data_dir=data_dir or tmp,
                             overrides=settings, environ={})
        thread = BrokerThread(config)
        broker = thread.start()
        try:
            yield RunningBroker(f"127.0.0.1:{broker.port}", "127.0.0.1", broker.port,
                                config.data_dir, broker)
        finally:
            thread.stop()


try:
    import pytest
except ImportError:  # pragma: no cover - pytest is optional for users of the module
    pass
else:

    @pytest.fixture
    def odradek_broker() -> Iterator[RunningBroker]:
        """A fresh broker for one test."""
        with running_broker() as broker:
            yield broker
