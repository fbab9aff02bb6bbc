"""Reading an offset range of one partition on an executor: Fetch requests from odradek's
own client, record batches decoded straight into Arrow (``arrow_records``).

This is the default reader (option `reader`: `auto` or `native`). It speaks plain TCP
only, so `reader=auto` hands a read with security settings (`kafka.security.protocol`
other than PLAINTEXT, `kafka.sasl.*`, `kafka.ssl.*`) to the librdkafka reader
(``client.read_range``), as does `reader=librdkafka`. Both give the same rows, with the
same data-loss rules and the same errors naming the broker and the partition.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from kio.schema.errors import ErrorCode

from odradek.client.connection import (
    FETCH,
    LIST_OFFSETS,
    RETRIABLE,
    BrokerConnection,
    Cluster,
    KafkaClientError,
    wait_before_retry,
)
from odradek.records.errors import CorruptRecordError
from odradek.spark import client
from odradek.spark.arrow_records import AbortedTxn, decode, walk
from odradek.spark.client import KafkaSourceError, arrow_schema
from odradek.spark.options import ReadOptions

# Bytes asked for per Fetch (kafka.max.partition.fetch.bytes overrides): large enough that
# per-request costs (a round trip, one decode call) are small beside the records' own.
DEFAULT_FETCH_BYTES = 8 * 1024 * 1024
MAX_FETCH_BYTES = 256 * 1024 * 1024  # a batch larger than this is refused, not chased
FETCH_WAIT_MS = 500  # the broker holds an empty fetch this long before answering
RETRY_BACKOFF_S = 0.2  # between attempts after a leader change or a lost connection
_SECURE_PREFIXES = ("sasl.", "ssl.")
_UTC_MICROS = pa.timestamp("us", tz="UTC")


def uses_native(opts: ReadOptions) -> bool:
    """Whether this read goes through the native reader (option `reader`)."""
    if opts.reader != "auto":
        return opts.reader == "native"
    config = opts.client.config
    if config.get("security.protocol", "plaintext").lower() != "plaintext":
        return False
    return not any(key.startswith(_SECURE_PREFIXES) for key in config)


def read_range(opts: ReadOptions, topic: str, partition: int, start: int, end: int
               ) -> Iterator[pa.RecordBatch]:
    """The records of topic-partition at offsets [start, end) as Arrow record batches.

    Offsets below the log start are data loss (an error with failOnDataLoss=true, else a
    warning and the read goes on from the log start); so is a log that ends before `end`.
    """
    if not uses_native(opts):
        yield from client.read_range(opts, topic, partition, start, end)
        return
    reader = _RangeReader(opts, topic, partition)
    try:
        yield from reader.read(start, end)
    finally:
        reader.cluster.close()


class _RangeReader:
    def __init__(self, opts: ReadOptions, topic: str, partition: int) -> None:
        config = opts.client.config
        self.opts = opts
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self.read_committed = config.get("isolation.level",
                                         "read_committed") == "read_committed"
        self.max_bytes = int(config.get("max.partition.fetch.bytes", DEFAULT_FETCH_BYTES))
        # A fetch waits up to FETCH_WAIT_MS at the broker: the socket must wait longer.
        self.cluster = Cluster(opts.client.bootstrap,
                               client_id=config.get("client.id", "odradek-spark"),
                               timeout_s=opts.client.api_timeout_s + FETCH_WAIT_MS / 1000)
        self.schema = arrow_schema(opts.include_headers)
        self.leader: BrokerConnection | None = None
        self.last_error = ""

    def read(self, start: int, end: int) -> Iterator[pa.RecordBatch]:
        position = start
        deadline = time.monotonic() + self.opts.poll_timeout_s
        while position < end:
            answer = self._fetch(position)
            if answer is None:  # no answer this time: a leader change, a lost connection
                self._wait(deadline, position, end)
                continue
            code = answer.error_code
            if code == ErrorCode.offset_out_of_range:
                position = self._out_of_range(position, end)
                continue
            if code in RETRIABLE:
                self.last_error = code.name
                self.leader = None  # ask for the leader again
                self._wait(deadline, position, end)
                continue
            if code != ErrorCode.none:
                raise KafkaSourceError(f"reading {self.name} at offset {position} from "
                                       f"{self._where()} failed: {code.name}")
            records = answer.records or b""
            try:
                batches = walk(records, position, read_committed=self.read_committed,
                               aborted=[AbortedTxn(int(a.producer_id), a.first_offset)
                                        for a in answer.aborted_transactions or ()])
                columns = decode(batches, with_headers=self.opts.include_headers)
            except CorruptRecordError as exc:
                raise KafkaSourceError(f"{self.name} at offset {position} on "
                                       f"{self._where()}: {exc}") from None
            if batches.next_offset > position:
                if columns is not None:
                    batch = self._rows(columns, position, end)
                    if batch is not None:
                        yield batch
                position = batches.next_offset
                deadline = time.monotonic() + self.opts.poll_timeout_s
                continue
            if records:  # bytes but no whole batch: one batch is larger than asked for
                if self.max_bytes >= MAX_FETCH_BYTES:
                    raise KafkaSourceError(
                        f"the record batch of {self.name} at offset {position} is larger "
                        f"than {MAX_FETCH_BYTES} bytes")
                self.max_bytes = min(self.max_bytes * 2, MAX_FETCH_BYTES)
                continue
            log_end = (answer.last_stable_offset if self.read_committed
                       and answer.last_stable_offset >= 0 else answer.high_watermark)
            if position >= log_end and log_end < end:
                client.ends_early(self.opts, self.topic, self.partition, log_end, end)
                return
            self._wait(deadline, position, end)

    def _to_leader(self, api_key: int, data: dict[str, Any]) -> Any:
        """A request to the partition's leader (looked up when not known); None when no
        answer came (the connection is dropped: the next call looks the leader up)."""
        try:
            if self.leader is None:
                self.leader = self.cluster.leader(self.topic, self.partition)
            return self.leader.request(api_key, data)
        except KafkaClientError as exc:
            self.last_error = str(exc)
            if self.leader is not None:
                self.cluster.forget(self.leader)
                self.leader = None
            return None

    def _fetch(self, position: int) -> Any:
        """The partition's part of one Fetch answer; None when it could not be had."""
        answer = self._to_leader(FETCH, {
            "replica_id": -1, "max_wait": FETCH_WAIT_MS, "min_bytes": 1,
            "max_bytes": self.max_bytes, "isolation_level": int(self.read_committed),
            "session_id": 0, "session_epoch": -1,  # a full fetch, no session (KIP-227)
            "topics": [{"topic": self.topic, "partitions": [{
                "partition": self.partition, "current_leader_epoch": -1,
                "fetch_offset": position, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": self.max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        if answer is None:
            return None
        if answer.error_code != ErrorCode.none:  # the whole request refused
            raise KafkaSourceError(f"fetching {self.name} from {self._where()} failed: "
                                   f"{answer.error_code.name}")
        for topic in answer.responses:
            for part in topic.partitions:
                if topic.topic == self.topic and part.partition_index == self.partition:
                    return part
        raise KafkaSourceError(f"{self._where()} answered a fetch of {self.name} without it")

    def _out_of_range(self, position: int, end: int) -> int:
        """Where to go on after OFFSET_OUT_OF_RANGE: the log start if the position fell
        below it (data loss), else (the log ends before the position) the range's end."""
        low, high = self._list_offset(-2), self._list_offset(-1)
        if position < low:
            return client.check_loss(self.opts, self.topic, self.partition, position, end,
                                     low)
        client.ends_early(self.opts, self.topic, self.partition, high, end)
        return end

    def _list_offset(self, timestamp: int) -> int:
        deadline = time.monotonic() + self.opts.client.api_timeout_s
        while True:
            answer = self._to_leader(LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": int(self.read_committed),
                "topics": [{"name": self.topic, "partitions": [{
                    "partition_index": self.partition, "current_leader_epoch": -1,
                    "timestamp": timestamp}]}]})
            parts = [p for t in answer.topics for p in t.partitions] if answer else []
            if answer is not None and not parts:
                self.last_error = "a ListOffsets answer without the partition"
            elif parts and parts[0].error_code == ErrorCode.none:
                return int(parts[0].offset)
            elif parts:
                self.last_error = parts[0].error_code.name
                if parts[0].error_code not in RETRIABLE:
                    raise KafkaSourceError(f"listing offsets of {self.name} on "
                                           f"{self._where()} failed: {self.last_error}")
                self.leader = None  # ask for the leader again
            if not wait_before_retry(deadline, RETRY_BACKOFF_S):
                raise KafkaSourceError(f"listing offsets of {self.name} on {self._where()} "
                                       f"failed: {self.last_error}")

    def _wait(self, deadline: float, position: int, end: int) -> None:
        if not wait_before_retry(deadline, RETRY_BACKOFF_S):
            raise client.stalled(self.opts, self.topic, self.partition, position, end,
                                 self.last_error)

    def _where(self) -> str:
        return client.where(self.opts.client)

    def _rows(self, columns: Any, start: int, end: int) -> pa.RecordBatch | None:
        """The rows at offsets [start, end): a fetch starts at the batch that holds
        `start`, and may run past `end`."""
        offsets = columns.offset
        low, high = np.searchsorted(offsets, [start, end]).tolist()
        n = high - low
        if n <= 0:
            return None
        if (low, high) != (0, len(offsets)):
            columns = columns._replace(
                key=columns.key.slice(low, n), value=columns.value.slice(low, n),
                offset=offsets[low:high], timestamp=columns.timestamp[low:high],
                timestamp_type=columns.timestamp_type[low:high],
                headers=None if columns.headers is None else columns.headers[low:high])
        name = self.topic.encode()
        topic = pa.Array.from_buffers(pa.string(), n, [
            None, pa.py_buffer(np.arange(0, (n + 1) * len(name), len(name), dtype=np.int32)),
            pa.py_buffer(name * n)])
        arrays = [
            columns.key, columns.value, topic,
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(columns.offset),
            pa.array(columns.timestamp * 1000, _UTC_MICROS),
            pa.array(columns.timestamp_type),
        ]
        if columns.headers is not None:
            arrays.append(pa.array(
                [[{"key": k, "value": v} for k, v in record] for record in columns.headers],
                self.schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
