"""Exactly-once topic writes for the `odradek` sink (option `exactlyOnce=true`), with Kafka
transactions.

Spark's own Kafka sink is at-least-once: a retried task or a re-run micro-batch writes its
records again. Here each write task runs one Kafka transaction under a transactional id
that is the same for every attempt of that task, and records in the same transaction which
write it belongs to:

- **The transactional id** is `<prefix>-<Spark partition id>`. The prefix is the option
  `transactionalIdPrefix` when given; otherwise `odradek-spark-<query id>` in a streaming
  query (the query id is kept in the checkpoint, so it survives restarts) and
  `odradek-spark-<random id>` in a batch write (a fresh one per `save()`). A batch write
  with a prefix is therefore idempotent by name: a second `save()` with the same prefix
  (and the same partitioning) finds every task's marker and writes nothing — what
  `foreachBatch` needs, with the batch id in the prefix.
  `init_transactions` by a new attempt fences every older attempt of the same task and
  aborts its open transaction, so a zombie's records never become visible.
- **The write marker**: inside the transaction the task also commits, as the consumer
  offset of a group named after the transactional id, `batch id + 1` (the micro-batch id
  that Spark gives every task of a streaming write as the local property
  `streaming.sql.batchId`; 0 for a batch write). It commits atomically with the records.
  Before writing, an attempt reads that offset (stable, KIP-447): if its batch is already
  there, an earlier attempt committed this task's records, and it writes nothing.

So a task retried after its commit, a micro-batch re-run after a driver crash (Spark
re-runs the last batch it had not marked done in its checkpoint), and speculative twins
all leave each record in the topic once, visible to `isolation.level=read_committed`
consumers. What Spark does not allow, and so what this cannot give (docs/spark.md):

- a batch write is atomic per task, not per job: a job that fails after some tasks
  committed leaves their records (Spark has no job-level commit a Kafka transaction could
  join without a broker-side "resume transaction", which clients do not offer);
- a re-run must give each task the same rows: true for a deterministic query over the
  same source offsets (Spark's requirement for exactly-once sinks too), not for one using
  `rand()`, `uuid()` or the current time;
- records are visible to read_uncommitted consumers at once, aborted ones included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from odradek.spark.client import ProduceFailed, RecordProducer, where
from odradek.spark.options import ClientOptions

log = logging.getLogger("odradek.spark")

# The local properties Spark sets on every task of a micro-batch (StreamExecution).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def transactional_id(prefix: str, partition_id: int) -> str:
    """The transactional id (and marker group) of one Spark task's writes."""
    return f"{prefix}-{partition_id}"


def task_identity(prefix: str | None, write_id: str) -> tuple[str, int]:
    """The transactional id of the running task and the id of the write it belongs to:
    the micro-batch id in a streaming query, 0 in a batch write."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("exactly-once writes run inside a Spark task")
    batch = context.getLocalProperty(BATCH_ID_PROPERTY)
    if batch is not None:
        query = context.getLocalProperty(QUERY_ID_PROPERTY)
        base = prefix or f"odradek-spark-{query}"
        return transactional_id(base, context.partitionId()), int(batch)
    return transactional_id(prefix or f"odradek-spark-{write_id}", context.partitionId()), 0


def committed_batch(client: ClientOptions, group: str) -> int:
    """The write marker of ``group``: the highest committed offset it holds, minus one
    (the id of the last batch committed), or -1 if none. Asked with require_stable, so an
    offset still pending in an open transaction is waited for rather than skipped."""
    admin = AdminClient({**_admin_config(client), "bootstrap.servers": client.bootstrap})
    request = [ConsumerGroupTopicPartitions(group)]
    try:
        future = admin.list_consumer_group_offsets(request, require_stable=True,
                                                   request_timeout=client.api_timeout_s)
        answer = future[group].result(timeout=client.api_timeout_s)
    except KafkaException as exc:
        raise ProduceFailed(f"reading the write marker of {group!r} from "
                            f"{where(client)} failed: {exc}") from None
    offsets = [tp.offset for tp in answer.topic_partitions or () if tp.offset >= 0]
    return max(offsets, default=0) - 1


def _admin_config(client: ClientOptions) -> dict[str, str]:
    # Settings that only producers take (librdkafka refuses unknown ones per client type).
    producer_only = ("transactional.id", "transaction.timeout.ms", "enable.idempotence",
                     "acks", "linger.ms", "batch.size", "compression.type",
                     "compression.codec", "retries", "max.in.flight")
    return {k: v for k, v in client.config.items() if k not in producer_only}


def write_task(client: ClientOptions, prefix: str | None, write_id: str,
               produce_rows: Callable[[RecordProducer], str | None]) -> int:
    """Run this task's writes as one transaction; returns how many records it committed
    (0 when an earlier attempt had committed them). ``produce_rows`` sends every row
    through the producer it is given and returns the first topic written (None if the
    task had no rows)."""
    tid, batch = task_identity(prefix, write_id)
    producer = RecordProducer(client, transactional_id=tid)
    kafka = producer.kafka
    timeout = client.api_timeout_s
    try:
        try:
            kafka.init_transactions(timeout)
        except KafkaException as exc:
            raise ProduceFailed(f"init_transactions({tid!r}) on {where(client)} failed: "
                                f"{exc}") from None
        done = committed_batch(client, tid)
        if done >= batch:
            log.info("%s: batch %d is already committed (marker %d): nothing to write",
                     tid, batch, done)
            return 0
        kafka.begin_transaction()
        committed = False
        try:
            topic = produce_rows(producer)
            if topic is None:
                return 0  # no rows: the abort below writes nothing
            producer.flush()
            _commit_with_marker(kafka, client, tid, topic, batch)
            committed = True
            return producer.sent
        finally:
            if not committed:
                _abort(kafka, tid, timeout)
    finally:
        producer.close()


def _commit_with_marker(kafka: Any, client: ClientOptions, tid: str, topic: str,
                        batch: int) -> None:
    # The marker is an offset of a group named after the transactional id. It must name
    # an existing partition (Kafka checks), so it uses partition 0 of a topic the task
    # wrote; only the offset means anything.
    group_client = Consumer({**_admin_config(client), "bootstrap.servers": client.bootstrap,
                             "group.id": tid})
    try:
        metadata = group_client.consumer_group_metadata()
    finally:
        group_client.close()
    try:
        kafka.send_offsets_to_transaction([TopicPartition(topic, 0, batch + 1)], metadata,
                                          client.api_timeout_s)
        kafka.commit_transaction(client.api_timeout_s)
    except KafkaException as exc:
        raise ProduceFailed(f"committing the transaction of {tid!r} on {where(client)} "
                            f"failed: {exc}") from None


def _abort(kafka: Any, tid: str, timeout: float) -> None:
    """Abort the open transaction so read_committed consumers are not held at its first
    offset until it times out; a failure here only logs (the next attempt's
    init_transactions, or the transaction timeout, aborts it anyway)."""
    try:
        kafka.abort_transaction(timeout)
    except KafkaException as exc:
        log.warning("%s: aborting the transaction failed: %s", tid, exc)
