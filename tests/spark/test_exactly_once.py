"""Exactly-once topic writes (`exactlyOnce=true`): each Spark write task is one Kafka
transaction that also commits which micro-batch it wrote, so a micro-batch that Spark runs
again after a crash — the one case where Spark's own Kafka sink duplicates — writes nothing
twice; read_committed consumers see each record once.

The crash is made exact by what Spark does after one: a micro-batch whose offsets are in
the checkpoint's `offsets/` but whose `commits/` entry is missing is run again at restart.
Deleting the last `commits/` entry after a run is therefore the state a driver killed
between the tasks' Kafka commits and Spark's own commit leaves behind."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.spark.conftest import produce

QUERY_TIMEOUT = 120  # seconds for an availableNow query to finish


def _relay(spark, broker, source: str, sink: str, checkpoint: Path, **sink_options) -> None:
    """Source to sink, value upper-cased, in micro-batches of at most 4 records, until
    everything available is processed."""
    df = (spark.readStream.format("odradek")
          .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", source)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "4").load())
    writer = (df.selectExpr("key", "upper(cast(value as string)) as value")
              .writeStream.format("odradek")
              .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
              .option("checkpointLocation", str(checkpoint)))
    for name, value in sink_options.items():
        writer = writer.option(name, value)
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not stop"
    assert query.exception() is None, query.exception()


def _forget_last_commit(checkpoint: Path) -> int:
    """Make Spark run the last micro-batch again at the next start; returns its id."""
    last = max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    crc = checkpoint / "commits" / f".{last}.crc"
    crc.unlink(missing_ok=True)
    return last


def _read(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every record of the topic's partition 0 a consumer with this isolation level is
    given: read until two polls in a row bring nothing (the data is all written)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eo-check",
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        idle = 0
        for _ in range(120):
            messages = consumer.consume(100, 1.0)
            for message in messages:
                assert message.error() is None, message.error()
                values.append(message.value())
            idle = 0 if messages else idle + 1
            if idle == 2:
                break
        return values
    finally:
        consumer.close()


def test_a_micro_batch_run_again_after_a_crash_writes_nothing_twice(
        spark, broker, new_topic, tmp_path):
    source, sink = new_topic(partitions=2), new_topic()
    produce(broker.bootstrap, source, [{"value": b"r%d" % i, "partition": i % 2}
                                       for i in range(10)])
    checkpoint = tmp_path / "ckpt"
    _relay(spark, broker, source, sink, checkpoint, exactlyOnce="true")
    expected = sorted(b"R%d" % i for i in range(10))
    assert sorted(_read(broker.bootstrap, sink, "read_committed")) == expected

    rerun = _forget_last_commit(checkpoint)
    _relay(spark, broker, source, sink, checkpoint, exactlyOnce="true")
    assert (checkpoint / "commits" / str(rerun)).exists(), "the batch did not run again"
    assert sorted(_read(broker.bootstrap, sink, "read_committed")) == expected


def test_without_exactly_once_the_same_crash_duplicates(spark, broker, new_topic, tmp_path):
    # The control: the at-least-once sink (Spark's Kafka sink's guarantee) writes the
    # re-run batch again, so the test above shows what exactlyOnce changes.
    source, sink = new_topic(partitions=2), new_topic()
    produce(broker.bootstrap, source, [{"value": b"r%d" % i, "partition": i % 2}
                                       for i in range(10)])
    checkpoint = tmp_path / "ckpt"
    _relay(spark, broker, source, sink, checkpoint)
    _forget_last_commit(checkpoint)
    _relay(spark, broker, source, sink, checkpoint)
    written = _read(broker.bootstrap, sink, "read_committed")
    assert sorted(set(written)) == sorted(b"R%d" % i for i in range(10))
    assert len(written) > 10, "the re-run batch was not written again"


def test_a_batch_write_with_a_prefix_is_written_once_however_often_it_is_saved(
        spark, broker, new_topic):
    # What foreachBatch needs: the same prefix (with the batch id in it) saved again after
    # a crash writes nothing twice; a new prefix is a new write.
    sink = new_topic()
    df = spark.createDataFrame([(b"k%d" % i, b"v%d" % i) for i in range(20)], "key binary, "
                               "value binary").repartition(3)

    def save(prefix: str) -> None:
        (df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", sink).option("exactlyOnce", "true")
         .option("transactionalIdPrefix", prefix).mode("append").save())

    save("orders-load")
    save("orders-load")
    assert sorted(_read(broker.bootstrap, sink, "read_committed")) == sorted(
        b"v%d" % i for i in range(20))
    save("orders-load-2")
    assert len(_read(broker.bootstrap, sink, "read_committed")) == 40
    # One transactional id (and marker group) per task, named after the prefix.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    groups = admin.list_consumer_groups(request_timeout=10).result(timeout=10)
    markers = [g.group_id for g in groups.valid if g.group_id.startswith("orders-load-")]
    assert len(markers) == 6, (groups.valid, groups.errors)
