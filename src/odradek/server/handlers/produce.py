"""Produce (0): append each partition's batches, answer with their first offsets.

The batches stay opaque bytes: the log checks their headers and CRCs and writes them
with the assigned offsets (no per-record work). ``acks=0`` gets no response at all, and a
failure then closes the connection, which is how Kafka tells such a producer. On a single
node acks 1 and -1 are the same (the leader is the whole ISR). In a cluster only the
partition's leader appends (others answer NOT_LEADER_OR_FOLLOWER), with one call per
partition: ``Partition.append_as_leader`` (server/replication/partition.py) checks
``min.insync.replicas`` for acks=-1 (NOT_ENOUGH_REPLICAS, nothing appended), appends
with its leader epoch, wakes fetches and steps the high watermark; acks=-1 then waits
in the produce purgatory, one ``DelayedProduce`` for the request, until the high
watermark has passed each partition's batches (or NOT_ENOUGH_REPLICAS_AFTER_APPEND if
the ISR shrank below that meanwhile, REQUEST_TIMED_OUT after the request's timeout,
NOT_LEADER_OR_FOLLOWER if leadership moved). Appends wake long-polling fetches of the
same partitions. With
``flush.messages`` set, the answer waits for the fsync, shared with the other requests it
covers (server/group_commit.py).

Kafka 4's versions: from v10 a partition answered NOT_LEADER_OR_FOLLOWER carries its
current leader and the answer those leaders' endpoints (KIP-951, handlers/hints.py); v11
says TRANSACTION_ABORTABLE where older versions hear INVALID_TXN_STATE (a transactional
batch for a partition not in its transaction, KIP-890); v13 names topics by id (KIP-516:
an id this broker does not know is answered UNKNOWN_TOPIC_ID).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeAlias

from kio.schema.errors import ErrorCode

from odradek.coordinator.transaction_errors import error_for_version
from odradek.protocol.codec import Request
from odradek.protocol.framing import encode_uvarint
from odradek.protocol.produce import TOPIC_IDS_FROM, ProduceRequestBody, TopicProduceData
from odradek.records import batch as rb
from odradek.records.errors import RecordValidationError
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.transactions import verification_refusal
from odradek.server.errors import error_code, message
from odradek.server.handlers.base import (
    Api,
    allowed,
    throttle,
)
from odradek.server.handlers.hints import (
    AnswerNames,
    current_leader_field,
    node_endpoints_section,
)
from odradek.server.network.connection import ConnectionClosed
from odradek.server.replication.partition import ReplicationError
from odradek.server.replication.purgatory import DelayedProduce
from odradek.server.topic_ids import is_unknown, name_for

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.replication.partition import Partition
    from odradek.storage import Log

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_ERROR_TEXT = {
    6: "this broker is not the leader of the partition (any more)",
    7: "not replicated to the in-sync replicas within the request's timeout",
    19: "fewer in-sync replicas than min.insync.replicas: nothing was written",
    20: "written, but the in-sync replicas fell below min.insync.replicas meanwhile",
    100: "this broker knows no topic with that id",
    29: "Topic authorization failed.",  # Kafka's messages for these two
    53: "Transactional Id authorization failed.",
}


def _not_in_transaction(broker: Broker, transactional_id: str | None, part: Partition,
                        records: bytes | memoryview, remote: _TxnCheck | None
                        ) -> tuple[int, str] | None:
    """(error code, message) if a transactional batch may not be written here: its
    transaction must be open with this partition added (KIP-890's verification: answered
    by this node's own coordinator, ``TxnRuntime.check_produce``, or by one elsewhere,
    asked before, ``remote``). Storage checks the rest (epochs, sequences) under the
    log's lock. Called only for records of at least a header whose attributes say
    transactional (the caller's one-byte check)."""
    header = rb.read_header(records)
    if header.is_control:
        return None  # the log refuses produced control batches itself
    if transactional_id is None:
        return (ErrorCode.invalid_txn_state,
                "a transactional batch needs the request's transactional id")
    topic, partition = part.tp
    if remote is not None:
        return remote.refusal(part, transactional_id, header.producer_id,
                              header.producer_epoch)
    txns = broker.transactions
    if txns is None:
        return None
    return txns.check_produce(transactional_id, header.producer_id, header.producer_epoch,
                              topic, partition)


class _TxnCheck:
    """What a request's transactional batches need from their coordinator before they
    are written, asked asynchronously (``TxnRuntime.check_transaction``): verification
    when the coordinator is another broker's, or (Produce v12+, transaction version 2)
    the partitions added to the transaction wherever it is coordinated; the
    coordinator's answers once awaited, and each partition's guard."""

    __slots__ = ("adding", "answers", "guards", "transactional_id", "wanted")

    def __init__(self, transactional_id: str, adding: bool) -> None:
        self.transactional_id = transactional_id
        self.adding = adding
        # (producer id, epoch) -> partitions to verify, each with its guard
        self.wanted: dict[tuple[int, int], list[tuple[Partition, object]]] = {}
        self.answers: dict[tuple[TopicPartition, int], int] = {}
        self.guards: dict[tuple[TopicPartition, int], object] = {}

    def add(self, part: Partition, producer_id: int, producer_epoch: int) -> None:
        guard = part.begin_verification(producer_id)
        self.wanted.setdefault((producer_id, producer_epoch), []).append((part, guard))
        self.guards[(part.tp, producer_id)] = guard

    async def ask(self, broker: Broker) -> None:
        txns = broker.transactions
        assert txns is not None
        for (producer_id, epoch), parts in self.wanted.items():
            codes = await txns.check_transaction(
                self.transactional_id, producer_id, epoch, [p.tp for p, _ in parts],
                add=self.adding)
            for part, _ in parts:
                self.answers[(part.tp, producer_id)] = codes[part.tp]

    def refusal(self, part: Partition, transactional_id: str, producer_id: int,
                producer_epoch: int) -> tuple[int, str] | None:
        key = (part.tp, producer_id)
        code = self.answers.get(key)
        if code is None:  # its transaction was open here already: nothing was asked
            return None
        guard = self.guards[key]
        refused = verification_refusal(code, transactional_id, producer_id, producer_epoch,
                                       *part.tp)
        held = part.end_verification(producer_id, guard)
        if refused is None and not held and not part.log.producer_state.in_transaction(
                producer_id, producer_epoch):
            return (ErrorCode.invalid_txn_state,
                    f"the transaction of {transactional_id!r} ended while "
                    f"{part.tp[0]}-{part.tp[1]} was verified")
        return refused


def _txn_check(broker: Broker, body: ProduceRequestBody, leaders: Any, version: int
               ) -> _TxnCheck | None:
    """What a transactional request must ask its coordinator before its batches are
    written (None: nothing, or the local coordinator's answer now, ``check_produce``).
    A partition where the producer's transaction is open already needs nothing (Kafka
    asks for a transaction's first batch on each partition)."""
    transactional_id = body.transactional_id
    txns = broker.transactions
    if transactional_id is None or txns is None:
        return None
    add = version >= ADDS_TO_TRANSACTION_FROM
    if not add and (not txns.verify_partitions or txns.coordinated_here(transactional_id)):
        return None
    remote = _TxnCheck(transactional_id, add)
    for topic_data in body.topic_data:
        for index, records in topic_data.partition_data:
            part = leaders.get((topic_data.name, index))
            if (part is None or records is None or len(records) < rb.HEADER_SIZE
                    or not records[22] & rb.TRANSACTIONAL_BIT):
                continue
            header = rb.read_header(records)
            if header.is_control or part.log.producer_state.in_transaction(
                    header.producer_id, header.producer_epoch):
                continue
            remote.add(part, header.producer_id, header.producer_epoch)
    return remote if remote.wanted else None


# A partition's answer: (index, error code, base offset, log append time, log start
# offset, error message, record errors). A plain tuple: one is made per partition of
# every request. Record errors (KIP-467) are (index of the record in its batch, message).
RecordErrors = list[tuple[int, str]] | tuple[()]
PartitionAnswer = tuple[int, int, int, int, int, str | None, RecordErrors]


# Refusals by the producer state (out-of-order sequence, duplicate sequence, invalid
# epoch, unknown producer) name the log start offset, as Kafka's ReplicaManager does for
# errors outside its list of request/storage errors (found by the oracle tier).
_WITH_LOG_START = frozenset({45, 46, 47, 59})


def _failed(index: int, code: int, text: str) -> PartitionAnswer:
    return index, code, -1, -1, -1, text, ()


def handle_now(broker: Broker, request: Request
               ) -> bytes | Coroutine[Any, Any, bytes | None] | _Replicating | None:
    """The answer (None for acks=0) if no append has to wait, else an awaitable of it:
    a coroutine that waits for the fsyncs, or (acks=all in a cluster) the wait for
    the followers; the connection calls this when the request arrives (see
    server.network.connection), ``handle`` awaits it."""
    steps = _produce(broker, request)
    try:
        wait = steps.send(None)
    except StopIteration as done:
        return done.value
    if isinstance(wait, DelayedProduce):
        return _Replicating(steps, wait)
    return _after_fsyncs(broker, steps, wait)


class _Replicating:
    """An acks=all produce waiting for its followers (its DelayedProduce), answered from
    the call that settles that: the follower's fetch that moves the high watermark, or
    the timeout. The connection that parks it gives a ``sender`` and an ``on_done``, as
    for a long poll (handlers/fetch.py's _DelayedFetch): the answer goes out from there
    and the request is finished there, where awaiting a coroutine woke the request loop
    twice per replicated produce. Awaitable for the answer otherwise (None once
    ``sender`` took it)."""

    __slots__ = ("future", "on_done", "sender", "steps")

    def __init__(self, steps: _Steps, delayed: DelayedProduce) -> None:
        self.steps = steps
        self.sender: Callable[[bytes], bool] | None = None
        self.on_done: Callable[[bool], None] | None = None
        self.future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        delayed.settled = self._settled

    def __await__(self) -> Generator[Any, None, bytes | None]:
        return self.future.__await__()

    def _settled(self, codes: list[int]) -> None:
        future = self.future
        if future.done():  # closed: its connection ended
            return
        sent = False
        try:
            self.steps.send(codes)
        except StopIteration as done:
            response = done.value
            sender = self.sender
            sent = sender is not None and response is not None and sender(response)
            future.set_result(None if sent else response)
        except Exception as exc:  # this request fails, not the fetch that settled it
            future.set_exception(exc)
        else:
            future.set_exception(RuntimeError("a produce waited again after its acks"))
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done(sent)

    def close(self) -> None:
        """Never to be awaited (its connection ended)."""
        if not self.future.done():
            self.future.cancel()


async def handle(broker: Broker, request: Request) -> bytes | None:
    response = handle_now(broker, request)
    if response is None or isinstance(response, bytes):
        return response
    return await response


async def _after_fsyncs(broker: Broker, steps: _Steps, wait: _Wait) -> bytes | None:
    """Drive ``_produce`` on: wait for each fsync (or, last, the replication) it asks
    for, hand it the outcome."""
    while True:
        outcome: Exception | list[int] | None = None
        if isinstance(wait, DelayedProduce):
            outcome = await wait
        elif isinstance(wait, _TxnCheck):
            await wait.ask(broker)
        else:
            try:
                await broker.group_commit.durable(*wait)
            except Exception as exc:
                outcome = exc
        try:
            wait = steps.send(outcome)
        except StopIteration as done:
            return done.value


# _produce yields first, in a cluster, the transaction verification to ask a coordinator
# on another broker (sent back None once answered); (log, end offset) when an append
# must be on disk before the answer (flush.messages), and is sent back None or the
# exception the fsync raised; then, in a cluster with acks=-1, the request's
# DelayedProduce, and is sent back its codes.
_Wait: TypeAlias = "tuple[Log, int] | DelayedProduce | _TxnCheck"
_Steps: TypeAlias = Generator[_Wait, "Exception | list[int] | None", bytes | None]


def _denied(broker: Broker, request: Request, body: ProduceRequestBody
            ) -> Callable[[str], int]:
    """With the authorizer on: the error code refusing a topic's partitions (0: none), as
    Kafka's handleProduceRequest checks - WRITE on the transactional id for a
    transactional request (else every partition is refused), WRITE on each topic."""
    txn = body.transactional_id
    if txn is not None and not allowed(broker, request, Operation.WRITE,
                                       ResourceType.TRANSACTIONAL_ID, txn):
        return lambda _name: ErrorCode.transactional_id_authorization_failed
    refused = {t.name for t in body.topic_data if not is_unknown(t.name) and not allowed(
        broker, request, Operation.WRITE, ResourceType.TOPIC, t.name)}
    return lambda name: ErrorCode.topic_authorization_failed if name in refused else 0


def _named(broker: Broker, body: ProduceRequestBody) -> ProduceRequestBody:
    """A v13+ request with its topic ids turned into names (or stand-ins), built field
    by field as Fetch's (NamedTuple._replace was most of what ids cost a fetch)."""
    metadata = broker.metadata
    assert metadata is not None
    return ProduceRequestBody(
        body.transactional_id, body.acks, body.timeout_ms,
        [TopicProduceData(name_for(metadata, t.topic_id), t.partition_data, t.topic_id)
         for t in body.topic_data])


def _produce(broker: Broker, request: Request) -> _Steps:
    body = request.body
    version = request.api_version
    if version >= TOPIC_IDS_FROM:
        body = _named(broker, body)
    acks = body.acks
    bad_acks = acks not in (-1, 0, 1)
    transactional_id = body.transactional_id
    # The partitions this broker leads (server/replication/partition.py): a single
    # node's every partition, a cluster's where it is the leader.
    topology = broker.topology
    leaders = topology.leaders
    acks_all = acks == -1
    waits: list[tuple[Partition, int]] = []  # acks=-1: what to wait for
    waiting: list[tuple[list[PartitionAnswer], int]] = []  # (answers, index) of each wait
    responses: list[tuple[str, list[PartitionAnswer]]] = []
    failures = []
    denied = _denied(broker, request, body) if broker.authorizer is not None else None
    quotas = broker.quotas
    # producer_byte_rate: the request's bytes count whatever becomes of them (Kafka's).
    throttle_ms = (throttle(request, quotas.produce(request, request.size))
                   if quotas is not None and quotas.active else 0)
    stats = broker.stats
    # A transactional request whose coordinator must be asked (elsewhere, or to add
    # partitions for a transaction version 2 client): asked first.
    remote = _txn_check(broker, body, leaders, version) if not bad_acks else None
    if remote is not None:
        yield remote
    for topic_data in body.topic_data:
        name = topic_data.name
        partitions: list[PartitionAnswer] = []
        # metrics.listen (no series for an unknown id's stand-in)
        tstats = stats.topic(name) if stats is not None and not is_unknown(name) else None
        for index, records in topic_data.partition_data:
            part = leaders.get((name, index)) or topology.lead(name, index)
            lg = part.log if part is not None else None
            if bad_acks:
                entry = _failed(index, ErrorCode.invalid_required_acks,
                                f"acks must be -1, 0 or 1, not {acks}")
            elif lg is None and is_unknown(name):  # before authorization, as Kafka's
                entry = _failed(index, ErrorCode.unknown_topic_id, _ERROR_TEXT[100])
            elif denied and (code := denied(name)):
                entry = _failed(index, code, _ERROR_TEXT[code])
            elif part is None or lg is None:
                code = broker.missing_partition_error(name, index)
                entry = _failed(index, code, _ERROR_TEXT.get(code)
                                or f"{name}-{index} does not exist on this broker")
            elif records is None:
                entry = _failed(index, ErrorCode.corrupt_message, "a produce request needs records")
            # One byte (the low byte of the attributes, @22) says "not transactional"
            # without decoding the header: the common case skips the check's call.
            elif (len(records) >= rb.HEADER_SIZE and records[22] & rb.TRANSACTIONAL_BIT
                  and (refused := _not_in_transaction(broker, transactional_id, part,
                                                      records, remote)) is not None):
                code, text = refused
                entry = _failed(index, error_for_version(code, 0, version), text)
            else:
                assert part is not None
                try:
                    # The min-ISR check (acks=all), the append with the leader epoch, the
                    # wake-ups and the high-watermark step, in one place.
                    info = part.append_as_leader(records, require_min_isr=acks_all)
                    if lg.flush_due:  # flush.messages: answered once on disk, fsyncs shared
                        failure = yield lg, info.last_offset + 1
                        if failure is not None:
                            # an fsync's outcome (a list of codes answers a DelayedProduce)
                            assert isinstance(failure, Exception)
                            raise failure
                        part.after_append(info)
                except ReplicationError as exc:  # not this replica's to take: no log line
                    entry = _failed(index, error_code(exc), message(exc))
                except Exception as exc:
                    code = error_code(exc)
                    log.info("produce to %s-%d from %s refused: %s", name, index,
                             request.client_id, exc)
                    entry = _failed(index, code, message(exc))
                    if isinstance(exc, RecordValidationError):  # KIP-467, Kafka's
                        entry = (index, code, -1, -1, lg.log_start_offset, entry[5],
                                 exc.record_errors)
                    elif code in _WITH_LOG_START:
                        entry = (*entry[:4], lg.log_start_offset, *entry[5:])
                else:
                    if not info.duplicate and tstats is not None:
                        tstats.messages_in += info.last_offset - info.first_offset + 1
                        tstats.bytes_in += len(records)
                    entry = (index, 0, info.first_offset, info.log_append_time,
                             info.log_start_offset, None, ())
                    # acks=all: answered now if committed already (an ISR of one), else
                    # once the followers have it (the produce purgatory, below).
                    if acks_all and (acked := part.acked(info.last_offset + 1)) != 0:
                        if acked is None:
                            waiting.append((partitions, len(partitions)))
                            waits.append((part, info.last_offset + 1))
                        else:
                            entry = _failed(index, acked, _ERROR_TEXT.get(acked, ""))
            if entry[1]:
                failures.append(f"{name}-{index}: {entry[5]}")
            if tstats is not None:
                tstats.produces += 1
                if entry[1]:
                    tstats.failed_produce += 1
            partitions.append(entry)
        responses.append((name, partitions))
    if waits:
        delayed = topology.delay_produce(waits, body.timeout_ms)
        # Settled at once (followers already there meanwhile): no wait.
        codes = delayed.codes if delayed.done else (yield delayed)
        assert isinstance(codes, list)
        for (answers, i), code in zip(waiting, codes, strict=True):
            if code:
                answers[i] = _failed(answers[i][0], code, _ERROR_TEXT.get(code, ""))
    if acks == 0:
        if failures:
            raise ConnectionClosed("acks=0 produce failed: " + "; ".join(failures))
        return None
    return encode_produce_response(
        request, responses, throttle_ms,
        AnswerNames(broker, request) if version >= _HINTS_FROM else None)


# --- the response, by hand ---------------------------------------------------------------
# Produce is the hottest request: kio's Python writer and the generic builder cost ~100 us
# per response, more than the append itself. Same layout as ProduceResponse.json v3-13;
# tests/server/test_produce_fetch.py checks it byte for byte against kio's encoder.

_HINTS_FROM = 10  # KIP-951: CurrentLeader (a partition's tag 0), NodeEndpoints (tag 0)
# KIP-890 part 2: a transaction version 2 client's Produce adds its partitions to the
# transaction (the broker asks the coordinator) instead of AddPartitionsToTxn first.
ADDS_TO_TRANSACTION_FROM = 12
_CURRENT_LEADER_TAG = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset


def _string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = text.encode()
    return (encode_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _record_errors(errors: RecordErrors, flexible: bool) -> bytes:
    """The ``record_errors`` array: (batch_index, batch_index_error_message) each."""
    out = bytearray(encode_uvarint(len(errors) + 1) if flexible else _I32.pack(len(errors)))
    for index, text in errors:
        out += _I32.pack(index)
        out += _string(text, flexible)
        if flexible:
            out += b"\x00"
    return bytes(out)


def encode_produce_response(request: Request,
                            responses: list[tuple[str, list[PartitionAnswer]]],
                            throttle_ms: int = 0, names: AnswerNames | None = None) -> bytes:
    """The response to ``request``: each topic's name (v13+: its id) and its partitions'
    answers; ``names`` (v10+) says topic ids and where refused partitions' leaders are."""
    version = request.api_version
    flexible = version >= 9
    by_id = version >= TOPIC_IDS_FROM
    hints = names if version >= _HINTS_FROM else None
    leaders: set[int] = set()
    out = bytearray(_I32.pack(request.correlation_id))
    if flexible:
        out += b"\x00"  # response header v1: no tagged fields
    out += encode_uvarint(len(responses) + 1) if flexible else _I32.pack(len(responses))
    for name, partitions in responses:
        if by_id:
            assert names is not None
            out += names.topic_id(name)
        else:
            out += _string(name, flexible)
        out += encode_uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for index, code, base_offset, append_time, start_offset, text, errors in partitions:
            if version >= 5:
                out += _PARTITION_V5.pack(index, code, base_offset, append_time, start_offset)
            else:
                out += _PARTITION_V3.pack(index, code, base_offset, append_time)
            if version >= 8:
                if errors:
                    out += _record_errors(errors, flexible)
                else:
                    out += b"\x01" if flexible else _I32.pack(0)  # record_errors: none
                out += _string(text, flexible)
            if hints is not None and code == ErrorCode.not_leader_or_follower:
                leader, epoch = hints.current_leader(name, index)
                out += current_leader_field(_CURRENT_LEADER_TAG, leader, epoch)
                if leader >= 0:
                    leaders.add(leader)
            elif flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(throttle_ms)
    if leaders:
        assert hints is not None
        out += node_endpoints_section(hints.endpoints(leaders))
    elif flexible:
        out += b"\x00"
    return _I32.pack(len(out)) + bytes(out)


# Advertised from v0 although only v3+ (record batches, magic 2) is decoded: librdkafka
# before 2.11 enables gzip, snappy and lz4 only if the broker lists Produce v0 (its check
# of the codec's minimum version reads the range v0..v0), and Debian's kcat is built on
# librdkafka 2.0.2. A client that really sends v0-2 has its connection closed with a
# message saying so; every client of the last seven years sends v3 or later.
API = Api(0, "Produce", 0, 13, handle, handle_now)
