"""The spark tier: the `odradek` data source in one local[2] SparkSession for the whole test
session, against an in-process broker (`odradek.testing.running_broker`).

Spark is heavy (a JVM, Python workers): one session serves every test, with the UI off and
two shuffle partitions; each test uses topics of its own, with a handful of records.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from odradek.spark import register
from odradek.testing import RunningBroker, running_broker
from tests.spark import connector
from tests.spark.pipeline_helpers import SPARK_SOCKET_TIMEOUT


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this tier carries the `spark` marker (`-m spark`, `-m "not spark"`)."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Workers must run this interpreter (the venv's), or they start without pyspark's
    # data source module and fail with "Python worker failed to connect back".
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]")
               .appName("odradek-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "10s")
               .config("spark.python.authenticate.socketTimeout", SPARK_SOCKET_TIMEOUT)
               # Spark's own Kafka connector, for format("kafka") (test_kafka_connector.py),
               # when scripts/fetch_jvm.sh fetched it: jars are fixed at creation.
               .config("spark.jars", ",".join(str(j) for j in connector.jars()))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker() -> Iterator[RunningBroker]:
    with running_broker(**{"num.partitions": 1}) as running:
        yield running


@pytest.fixture
def new_topic(broker: RunningBroker) -> Callable[..., str]:
    """Creates a topic with a unique name (`partitions` of them) and returns its name."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def create(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)
        futures[name].result(timeout=10)
        return name

    return create


def produce(bootstrap: str, topic: str, records: list[dict], timeout: float = 10.0) -> None:
    """Produce records ({"value", "key", "partition", "headers", "timestamp"}) and wait."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors = []
    for record in records:
        kwargs = {k: v for k, v in record.items() if v is not None}
        producer.produce(topic, on_delivery=lambda err, _m: err and errors.append(err),
                         **kwargs)
    assert producer.flush(timeout) == 0, "records not acknowledged"
    assert not errors, errors
