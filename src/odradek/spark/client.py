"""The Kafka side of the `odradek` data source: metadata and offsets on the driver, reading an
offset range into Arrow record batches and producing rows on the executors.

The client is librdkafka (confluent-kafka): a Consumer with `assign()` and no group for
reads, an idempotent Producer for writes. Every call that waits on a broker is bounded
(`kafka.default.api.timeout.ms`, `kafkaConsumer.pollTimeoutMs`) and an error names the
brokers (`kafka.bootstrap.servers`) and the topic-partition concerned.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from odradek.spark.options import (
    EARLIEST,
    LATEST,
    ClientOptions,
    OptionError,
    ReadOptions,
    Starting,
    TopicPartition,
    Topics,
)

log = logging.getLogger("odradek.spark")

POLL_BATCH = 10_000  # records per consume() call, and so at most this many rows per Arrow batch
POLL_WAIT_S = 0.5  # one consume() call waits this long before the stall clock is checked
PRODUCE_QUEUE_WAIT_S = 0.1  # a full local queue (BufferError): serve callbacks this long, retry
# An offsets request (ListOffsets) whose partition leader was just killed: librdkafka
# keeps it queued on the dead broker's connection, and a client that asks nothing else
# may never refresh its metadata, so it times out after the whole timeout however soon a
# new leader is elected (measured on a 3-broker cluster, docs/spark.md "Against a
# cluster": 30 s timeouts one after the other, where the Java consumer Spark uses
# refreshes its metadata and asks the new leader). So an offsets request is asked in
# slices of this long; after a slice without an answer, or an answer a leader change
# gives (LEADER_CHANGE), the partitions' metadata is refreshed and the request asked
# again, within the request's own bound. A live leader answers in milliseconds.
LEADER_WAIT_S = 5.0
RETRY_BACKOFF_S = 0.1  # between two slices (the Java client's retry.backoff.ms)
# What librdkafka answers an offsets request with while a leader dies or moves (all seen
# in that measurement but the last two, of the same family): the dead broker's "handle
# destroyed" once it leaves the metadata, a slice's timeout, a former leader's NOT_LEADER
# and FENCED_LEADER_EPOCH, a lost connection, no leader yet.
LEADER_CHANGE = frozenset({
    KafkaError._DESTROY_BROKER, KafkaError._TIMED_OUT,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError._TRANSPORT, KafkaError.LEADER_NOT_AVAILABLE,
})

# librdkafka's timestamp types -> Kafka's TimestampType ids (the timestampType column):
# CreateTime 0, LogAppendTime 1, none -1.
_TIMESTAMP_TYPES = {1: 0, 2: 1, 0: -1}
T = TypeVar("T")
_INTERNAL_TOPIC = re.compile(r"^__")  # __consumer_offsets etc.: never matched by a pattern


class KafkaSourceError(RuntimeError):
    """The brokers could not answer, or answered that a topic or offset is not there."""


class DataLossError(KafkaSourceError):
    """Offsets a query needs were removed (retention, DeleteRecords) before it read them."""


def where(client: ClientOptions) -> str:
    """The brokers as error messages name them."""
    return f"the broker(s) {client.bootstrap} (kafka.bootstrap.servers)"


def consumer(client: ClientOptions, group_id: str, **extra: Any) -> tuple[Consumer, list[str]]:
    """A consumer that never joins a group (assign() only) and records the client's errors
    (e.g. "Connection refused") so a timeout can say why."""
    errors: list[str] = []

    def on_error(err: KafkaError) -> None:
        errors.append(err.str())

    conf: dict[str, Any] = {
        "group.id": group_id,  # required by the client; no group is ever joined
        "enable.auto.commit": False,  # positions live in Spark's checkpoint, not the group
        "enable.auto.offset.store": False,
        "error_cb": on_error,
        **client.config,
        "bootstrap.servers": client.bootstrap,
        **extra,
    }
    try:
        return Consumer(conf), errors
    except KafkaException as exc:
        raise OptionError(f"a kafka.* option was refused by the Kafka client: {exc}") from None


def _leader_changing(exc: KafkaException) -> bool:
    """Whether an error is one a leader change (or a broker's loss) gives: ask again."""
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and (err.code() in LEADER_CHANGE or err.retriable())


def ask_leaders(reader: Consumer, topics: Iterable[str], call: Callable[[float], T],
                timeout_s: float) -> T:
    """`call(timeout)`, an offsets request to partition leaders, within `timeout_s`, in
    slices of LEADER_WAIT_S with the metadata of `topics` refreshed between them (see
    LEADER_WAIT_S); the last error when the time is spent, or at once if it is not one a
    leader change gives."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return call(max(min(left, LEADER_WAIT_S), 0.001))
        except KafkaException as exc:
            if not _leader_changing(exc) or time.monotonic() + RETRY_BACKOFF_S >= deadline:
                raise
            log.info("asking the leaders of %s again after %s", ", ".join(topics), exc)
        for topic in topics:  # a fresh leader for each partition, as the Java client asks
            with contextlib.suppress(KafkaException):
                reader.list_topics(topic, timeout=max(deadline - time.monotonic(), 0.001))
        time.sleep(RETRY_BACKOFF_S)


def _failed(client: ClientOptions, doing: str, exc: Exception, errors: list[str]) -> str:
    why = f"; last client error: {errors[-1]}" if errors else ""
    return (f"could not {doing} from {where(client)} within {client.api_timeout_s:g}s "
            f"(kafka.default.api.timeout.ms): {exc}{why}")


class Brokers:
    """The driver's view of the cluster: topics, partitions and offsets.

    As in Spark's KafkaOffsetReader, a metadata or offsets request that fails (the broker
    unreachable, or not answering within `kafka.default.api.timeout.ms`) is attempted
    `attempts` times in all (fetchOffset.numRetries), `interval_s` apart
    (fetchOffset.retryIntervalMs), before the query fails. A definite answer (a topic that
    does not exist) is not retried. Within one attempt, an offsets request rides over a
    leader's loss by asking again with fresh metadata (`ask_leaders`), as the Java
    consumer Spark uses does within its timeout."""

    def __init__(self, client: ClientOptions, group_id: str, *, attempts: int = 1,
                 interval_s: float = 0.0) -> None:
        self.client = client
        self.attempts = max(attempts, 1)
        self.interval_s = interval_s
        self._consumer, self._errors = consumer(client, group_id)

    def close(self) -> None:
        self._consumer.close()

    def _retried(self, doing: str, call: Callable[[], T]) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return call()
            except KafkaException as exc:
                if attempt == self.attempts:
                    tries = (f" ({self.attempts} attempts, fetchOffset.numRetries)"
                             if self.attempts > 1 else "")
                    raise KafkaSourceError(_failed(self.client, doing, exc, self._errors)
                                           + tries) from None
                log.warning("could not %s from %s (attempt %d of %d): %s; retrying in %gs",
                            doing, self.client.bootstrap, attempt, self.attempts, exc,
                            self.interval_s)
                time.sleep(self.interval_s)
        raise AssertionError("unreachable")  # the loop returns or raises

    def topics(self) -> dict[str, int]:
        """Every topic (without auto-creating any) and its partition count."""
        meta = self._retried("get metadata", lambda: self._consumer.list_topics(
            timeout=self.client.api_timeout_s))
        return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}

    def partitions(self, topics: Topics) -> list[TopicPartition]:
        """The partitions a read covers now; a topic or partition that does not exist is an
        error naming it (never a silent empty result)."""
        existing = self.topics()
        if topics.kind == "subscribe":
            missing = [t for t in topics.names if t not in existing]
            if missing:
                raise KafkaSourceError(
                    f"topic(s) {', '.join(missing)} (option 'subscribe') do not exist on "
                    f"{where(self.client)}")
            return [(t, p) for t in topics.names for p in range(existing[t])]
        if topics.kind == "pattern":
            regex = re.compile(topics.pattern)
            names = sorted(t for t in existing
                           if regex.fullmatch(t) and not _INTERNAL_TOPIC.match(t))
            if not names:
                raise KafkaSourceError(
                    f"no topic on {where(self.client)} matches option 'subscribePattern' "
                    f"{topics.pattern!r}")
            return [(t, p) for t in names for p in range(existing[t])]
        missing = [f"{t}-{p}" for t, p in topics.partitions if p >= existing.get(t, 0)]
        if missing:
            raise KafkaSourceError(f"partition(s) {', '.join(missing)} (option 'assign') do "
                                   f"not exist on {where(self.client)}")
        return list(dict.fromkeys(topics.partitions))

    def _list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets: a timestamp per partition (or -2 earliest, -1 latest, as in Kafka's
        protocol) -> the offset, -1 where no record is at or after the timestamp."""
        if not wanted:
            return {}
        request = [KafkaTopicPartition(t, p, ts) for (t, p), ts in wanted.items()]
        topics = sorted({t for t, _ in wanted})
        answer = self._retried("list offsets", lambda: ask_leaders(
            self._consumer, topics,
            lambda timeout: self._consumer.offsets_for_times(request, timeout=timeout),
            self.client.api_timeout_s))
        result = {}
        for tp in answer:
            if tp.error is not None:
                raise KafkaSourceError(f"listing offsets of {tp.topic}-{tp.partition} on "
                                       f"{where(self.client)} failed: {tp.error}")
            result[(tp.topic, tp.partition)] = tp.offset
        return result

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets({tp: EARLIEST for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets({tp: LATEST for tp in tps})

    def resolve(self, position: Starting, tps: list[TopicPartition], *, ending: bool,
                strategy: str = "error") -> dict[TopicPartition, int]:
        """Concrete offsets for startingOffsets/endingOffsets and the timestamp options."""
        if position.kind == "earliest":
            return self.earliest(tps)
        if position.kind == "latest":
            return self.latest(tps)
        if position.kind == "offsets":
            given = position.offsets
            missing = [f"{t}-{p}" for t, p in tps if (t, p) not in given]
            extra = [f"{t}-{p}" for t, p in given if (t, p) not in tps]
            if missing or extra:
                raise OptionError(
                    f"option '{position.option}' must give an offset for every partition read "
                    f"and no other: missing {', '.join(missing) or 'none'}, unknown "
                    f"{', '.join(extra) or 'none'}")
            earliest = self.earliest(tp for tp in tps if given[tp] == EARLIEST)
            latest = self.latest(tp for tp in tps if given[tp] == LATEST)
            return {tp: earliest.get(tp, latest.get(tp, given[tp])) for tp in tps}
        if position.kind == "timestamp":
            wanted = {tp: position.timestamp or 0 for tp in tps}
        else:
            missing = [f"{t}-{p}" for t, p in tps if (t, p) not in position.timestamps]
            if missing:
                raise OptionError(f"option '{position.option}' gives no timestamp for "
                                  f"{', '.join(missing)}")
            wanted = {tp: position.timestamps[tp] for tp in tps}
        found = self._list_offsets(wanted)
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched and not ending and strategy == "error":
            names = ", ".join(f"{t}-{p}" for t, p in unmatched)
            raise KafkaSourceError(
                f"no record at or after the timestamp of option '{position.option}' in "
                f"{names}; set startingOffsetsByTimestampStrategy=latest to start at the end")
        latest = self.latest(unmatched)
        return {tp: latest[tp] if offset < 0 else offset for tp, offset in found.items()}


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of Spark's Kafka schema, as Spark's to_arrow_schema(timezone="UTC")
    builds it (the reader's batches must equal it field for field)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def read_range(opts: ReadOptions, topic: str, partition: int, start: int, end: int
               ) -> Iterator[pa.RecordBatch]:
    """The records of topic-partition at offsets [start, end) as Arrow record batches.

    Offsets below the log start (removed by retention or DeleteRecords) are data loss: an
    error naming the partition and offsets with failOnDataLoss=true (the default), else a
    warning and the read goes on from the first offset still there.
    """
    schema = arrow_schema(opts.include_headers)
    reader, errors = consumer(opts.client, opts.group_id, **{
        "enable.partition.eof": True,  # the end of the log ends a range cut short by compaction
        "auto.offset.reset": "error",  # a position that no longer exists is reported, not reset
    })
    try:
        tp = KafkaTopicPartition(topic, partition)
        low, high = _watermarks(opts, reader, tp, errors)
        start = check_loss(opts, topic, partition, start, end, low)
        if end > high:  # the log is shorter than planned: truncated, or deleted and recreated
            ends_early(opts, topic, partition, high, end)
            end = high
        if start >= end:
            return
        reader.assign([KafkaTopicPartition(topic, partition, start)])
        position = start
        last_progress = time.monotonic()
        while position < end:
            messages = reader.consume(num_messages=min(POLL_BATCH, end - position),
                                      timeout=POLL_WAIT_S)
            # The per-record work is done in list comprehensions (about twice the speed of
            # one loop doing everything); errors are rare (end of the partition, an offset
            # reset) and cut the list where the first one is. (Never `errs.count(None)`:
            # comparing a KafkaError with None raises inside confluent-kafka.)
            errs = [m.error() for m in messages]
            failure = None
            failed = [i for i, e in enumerate(errs) if e is not None]
            if failed:
                failure = errs[failed[0]]
                messages = messages[:failed[0]]
            # A consumed record (these are before any error) always has its offset; the
            # stub's None is for a message that has none, like one being produced.
            offsets = cast(list[int], [m.offset() for m in messages])
            done = False
            if offsets and offsets[-1] >= end:  # offsets increase: cut at the range's end
                keep = bisect.bisect_left(offsets, end)
                messages, offsets = messages[:keep], offsets[:keep]
                done = True
            rows = messages
            if rows:
                position = offsets[-1] + 1
                last_progress = time.monotonic()
                yield _to_arrow(rows, offsets, topic, partition, schema, opts.include_headers)
            if failure is not None and not done:
                if failure.code() == KafkaError._PARTITION_EOF:
                    done = True  # nothing at or after `position` below `end` any more
                elif failure.code() in (KafkaError.OFFSET_OUT_OF_RANGE,
                                        KafkaError._AUTO_OFFSET_RESET):
                    low, _ = _watermarks(opts, reader, tp, errors)
                    position = check_loss(opts, topic, partition, position, end, low)
                    reader.seek(KafkaTopicPartition(topic, partition, position))
                else:
                    raise KafkaSourceError(f"reading {topic}-{partition} at offset {position} "
                                           f"from {where(opts.client)} failed: "
                                           f"{failure.str()}")
            if done:
                break
            if not rows and time.monotonic() - last_progress > opts.poll_timeout_s:
                raise stalled(opts, topic, partition, position, end,
                              errors[-1] if errors else "")
    finally:
        reader.close()


def _watermarks(opts: ReadOptions, reader: Consumer, tp: KafkaTopicPartition,
                errors: list[str]) -> tuple[int, int]:
    """The partition's log start and end, riding over a leader change (`ask_leaders`)
    until kafkaConsumer.pollTimeoutMs passes, as the native reader does."""
    try:
        low, high = ask_leaders(
            reader, [tp.topic],
            lambda timeout: reader.get_watermark_offsets(tp, timeout=timeout),
            max(opts.poll_timeout_s, opts.client.api_timeout_s))
        return low, high
    except KafkaException as exc:
        raise KafkaSourceError(_failed(opts.client, f"get the offsets of {tp.topic}-"
                                       f"{tp.partition}", exc, errors)) from None


def lost(opts: ReadOptions, message: str) -> None:
    """Data loss: an error with failOnDataLoss=true (the default), else a warning."""
    if opts.fail_on_data_loss:
        raise DataLossError(f"{message}. Some data may have been lost; set failOnDataLoss=false "
                            "to skip what is gone and go on")
    log.warning("%s; skipping ahead (failOnDataLoss=false)", message)


def check_loss(opts: ReadOptions, topic: str, partition: int, start: int, end: int,
                low: int) -> int:
    """The offset to read from: `start`, or the log start if offsets below it are gone."""
    if start >= low:
        return start
    lost(opts, f"offsets {start} to {min(low, end) - 1} of {topic}-{partition} are no longer "
               f"on {where(opts.client)} (the log starts at offset {low})")
    return low


def ends_early(opts: ReadOptions, topic: str, partition: int, log_end: int, end: int) -> None:
    """Data loss: the log ends before the offsets a read planned (truncated, recreated)."""
    lost(opts, f"{topic}-{partition} ends at offset {log_end}, but offsets up to {end - 1} "
               "were planned: the topic was truncated or recreated")


def stalled(opts: ReadOptions, topic: str, partition: int, position: int, end: int,
            last_error: str) -> KafkaSourceError:
    """The error of a read that got no record for kafkaConsumer.pollTimeoutMs."""
    why = f" (last client error: {last_error})" if last_error else ""
    return KafkaSourceError(
        f"no record of {topic}-{partition} arrived from {where(opts.client)} for "
        f"{opts.poll_timeout_s:g}s (kafkaConsumer.pollTimeoutMs) while reading offsets "
        f"{position} to {end - 1}{why}")


def _to_arrow(rows: list[Any], offsets: list[int], topic: str, partition: int,
              schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    count = len(rows)
    stamps = [m.timestamp() for m in rows]
    kinds = {kind for kind, _ in stamps}
    if len(kinds) == 1 and 0 not in kinds:  # one timestamp type, every record stamped
        millis = pa.array([ms for _, ms in stamps], pa.int64())
        times = pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC"))
        types = pa.array([_TIMESTAMP_TYPES.get(kinds.pop(), -1)] * count, pa.int32())
    else:
        times = pa.array([ms * 1000 if kind else None for kind, ms in stamps],
                         pa.timestamp("us", tz="UTC"))
        types = pa.array([_TIMESTAMP_TYPES.get(kind, -1) for kind, _ in stamps], pa.int32())
    arrays = [
        pa.array([m.key() for m in rows], pa.binary()),
        pa.array([m.value() for m in rows], pa.binary()),
        pa.array([topic] * count, pa.string()),
        pa.array([partition] * count, pa.int32()),
        pa.array(offsets, pa.int64()),
        times,
        types,
    ]
    if include_headers:
        headers = [[{"key": k, "value": v} for k, v in (msg.headers() or [])] for msg in rows]
        arrays.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class ProduceFailed(KafkaSourceError):
    """Records were not acknowledged by the brokers."""


class RecordProducer:
    """An idempotent producer (unless kafka.enable.idempotence says otherwise) that remembers
    the first delivery error, to be raised when the task flushes."""

    def __init__(self, client: ClientOptions, transactional_id: str | None = None) -> None:
        self.client = client
        self.errors: list[str] = []
        self.client_errors: list[str] = []  # e.g. "Connection refused", for a timeout's message
        self.sent = 0
        conf: dict[str, Any] = {
            # Retries cannot duplicate or reorder records (KIP-98); Spark's task retries can
            # still repeat a task's records: the sink is at-least-once, as Spark's Kafka sink.
            "enable.idempotence": True,
            "error_cb": self._on_error,
            **client.config,
            "bootstrap.servers": client.bootstrap,
        }
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
        try:
            self._producer = Producer(conf)
        except KafkaException as exc:
            raise OptionError(f"a kafka.* option was refused by the Kafka client: {exc}") from None

    def _on_error(self, err: KafkaError) -> None:
        self.client_errors.append(err.str())
        if err.fatal():
            self.errors.append(f"fatal producer error: {err.str()}")

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(self.errors) < 10:
            self.errors.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    def send(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None,
             headers: list[tuple[str, bytes | None]] | None) -> None:
        kwargs: dict[str, Any] = {"value": value, "key": key, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self._producer.poll(PRODUCE_QUEUE_WAIT_S)
            except KafkaException as exc:
                raise ProduceFailed(f"producing to {topic} on {where(self.client)} "
                                    f"failed: {exc}") from None
        self.sent += 1
        if self.errors:
            self.raise_errors()
        self._producer.poll(0)

    @property
    def kafka(self) -> Producer:
        """The librdkafka producer (for its transaction calls)."""
        return self._producer

    def flush(self) -> None:
        """Wait for every record's acknowledgement (bounded); raise on any delivery error."""
        left = self._producer.flush(self.client.api_timeout_s)
        if left:
            self.errors.append(f"{left} of {self.sent} records were not acknowledged within "
                               f"{self.client.api_timeout_s:g}s (kafka.default.api.timeout.ms)"
                               + (f", last client error: {self.client_errors[-1]}"
                                  if self.client_errors else ""))
        self.raise_errors()

    def close(self) -> None:
        """Release the client now (its threads and connections) rather than at garbage
        collection: a Python worker runs many tasks."""
        self._producer.close()

    def raise_errors(self) -> None:
        if self.errors:
            raise ProduceFailed(f"writing to {where(self.client)} failed: "
                                + "; ".join(self.errors))
