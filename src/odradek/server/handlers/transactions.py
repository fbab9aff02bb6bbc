"""Transactions (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66), DescribeProducers
(61); InitProducerId (22) with a transactional id is in ``producer_id.py`` and comes here
too.

Each handler maps its request onto the transaction coordinator's (or, for
TxnOffsetCommit, the group coordinator's) version-agnostic arguments, has the runtime
(``server/coordinators/transactions.py``, ``server/coordinators/groups.py``) run it, and
describes the answer once.

Routing: a transactional id is served by the coordinator of its ``__transaction_state``
partition, a group (TxnOffsetCommit) by that of its ``__consumer_offsets`` partition;
one not coordinated here is answered NOT_COORDINATOR (the client looks it up again).
DescribeTransactions answers per id; ListTransactions lists every partition coordinated
here.

Versions, from Kafka's request schemas:

- AddPartitionsToTxn v0-3 (one transaction per request; v2+ may be told
  PRODUCER_FENCED, KIP-588; v3 is flexible). v4-5 are KIP-890's broker-to-broker
  batches (CLUSTER_ACTION): a partition leader verifies its producer's transaction holds
  the partition (verify_only; what the produce handler asks a coordinator on another
  broker, ``TxnRuntime.check_produce`` answering for one here), or adds partitions for
  it; v5 may be told TRANSACTION_ABORTABLE.
- AddOffsetsToTxn and EndTxn v0-3 (PRODUCER_FENCED from v2; v3 flexible).
- TxnOffsetCommit v0-3 (v2 adds leader epochs, v3 KIP-447's member id, generation and
  group.instance.id, so a consumer-group member's commit is fenced like OffsetCommit's).
- KIP-890 part 1's versions: InitProducerId v5, AddOffsetsToTxn/EndTxn/TxnOffsetCommit
  v4 may be told TRANSACTION_ABORTABLE (a TxnOffsetCommit for a group whose offsets
  partition is not in the transaction; older versions hear INVALID_TXN_STATE,
  ``error_for_version``); the Java client 4.4 sends them.
- Not served: transaction version 2 (KIP-890 part 2: EndTxn v5's epoch bump per
  transaction, TxnOffsetCommit v5 and Produce v12 adding to the transaction themselves).
  Clients keep to transaction version 1, which the broker does not advertise past.
- DescribeTransactions v0, ListTransactions v0-1 (v1: KIP-994's duration filter),
  DescribeProducers v0 (KIP-664).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import results as r
from odradek.coordinator import transactions as tx
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC
from odradek.coordinator.transaction_errors import error_for_version
from odradek.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.protocol.codec import Request
from odradek.protocol.messages import ms
from odradek.security.acls import Operation, ResourceType
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)
from odradek.server.handlers.groups import (
    by_name,
    commit_response,
    group_runtime,
    offsets_to_commit,
)

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.coordinators.transactions import TxnRuntime

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def runtime(broker: Broker) -> TxnRuntime:
    if broker.transactions is None:
        raise CoordinatorUnavailable(ErrorCode.coordinator_not_available,
                                     "the transaction coordinator is not running")
    return broker.transactions


def _may_write(broker: Broker, request: Request, transactional_id: str) -> bool:
    return allowed(broker, request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                   transactional_id)


def _error(code: int, request: Request) -> int:
    return error_for_version(code, request.api_key, request.api_version)


# --- InitProducerId (called from producer_id.py) ------------------------------------------


async def init_producer_id(broker: Broker, request: Request) -> bytes:
    body = request.body
    if not _may_write(broker, request, body.transactional_id):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.transactional_id_authorization_failed,
                                 "producer_id": -1, "producer_epoch": -1})
    try:
        rt = runtime(broker)
        broker.topology.open_internal_topic(TRANSACTION_STATE_TOPIC)
        result: tx.InitProducerIdResult = await rt.call(
            body.transactional_id, lambda coordinator, token, now: coordinator.init_producer_id(
                body.transactional_id, ms(body.transaction_timeout),
                getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1),
                token=token, now_ms=now))
    except CoordinatorUnavailable as exc:
        result = tx.InitProducerIdResult(exc.error_code)
    return respond(request, {"throttle_time": 0, "error_code": _error(result.error_code, request),
                             "producer_id": result.producer_id,
                             "producer_epoch": result.producer_epoch})


# --- AddPartitionsToTxn -------------------------------------------------------------------


async def add_partitions_to_txn(broker: Broker, request: Request) -> bytes:
    body = request.body
    if request.api_version >= BROKER_BATCHES_FROM:
        return await _add_partitions_for_brokers(broker, request)
    wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    codes = await _add_or_verify(broker, request, body.v3_and_below_transactional_id,
                                 body.v3_and_below_producer_id,
                                 body.v3_and_below_producer_epoch, wanted, verify_only=False)
    return respond(request, {"throttle_time": 0,
                             "results_by_topic_v3_and_below": _by_topic(codes)})


BROKER_BATCHES_FROM = 4  # AddPartitionsToTxn v4+: brokers' batches of transactions


async def _add_partitions_for_brokers(broker: Broker, request: Request) -> bytes:
    """v4+ (KIP-890): a partition leader verifies that its producer's transaction holds
    the partitions it writes (verify_only), or adds them for it (transaction version 2),
    for several transactions at once. Brokers only: CLUSTER_ACTION on the cluster."""
    body = request.body
    if not allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.cluster_authorization_failed,
                                 "results_by_transaction": []})
    results = []
    for t in body.transactions:
        wanted = [(topic.name, p) for topic in t.topics for p in topic.partitions]
        codes = await _add_or_verify(broker, request, t.transactional_id, t.producer_id,
                                     t.producer_epoch, wanted, verify_only=t.verify_only)
        results.append({"transactional_id": t.transactional_id,
                        "topic_results": _by_topic(codes)})
    return respond(request, {"throttle_time": 0, "error_code": 0,
                             "results_by_transaction": results})


async def _add_or_verify(broker: Broker, request: Request, transactional_id: str,
                         producer_id: int, producer_epoch: int,
                         wanted: list[tuple[str, int]], *, verify_only: bool
                         ) -> dict[tuple[str, int], int]:
    """Each partition's answer: added to (or, ``verify_only``, found in) the
    transaction. As Kafka's KafkaApis: partitions that do not exist (or are internal)
    fail, and then nothing is added, the others answered OPERATION_NOT_ATTEMPTED; only
    clients' requests (v0-3) need WRITE on the topics."""
    errors: dict[tuple[str, int], int] = {}
    from_client = request.api_version < BROKER_BATCHES_FROM
    txn_refused = from_client and not _may_write(broker, request, transactional_id)
    for name, p in wanted:
        topic = broker.topic(name)
        if txn_refused:
            errors[(name, p)] = ErrorCode.transactional_id_authorization_failed
        elif from_client and not allowed(broker, request, Operation.WRITE,
                                         ResourceType.TOPIC, name):
            errors[(name, p)] = ErrorCode.topic_authorization_failed
        elif topic is None or not 0 <= p < topic.partitions:
            errors[(name, p)] = ErrorCode.unknown_topic_or_partition
        elif topic.internal and from_client:
            errors[(name, p)] = ErrorCode.invalid_topic_exception
    if errors:
        return {tp: errors.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    try:
        rt = runtime(broker)
    except CoordinatorUnavailable as exc:
        return dict.fromkeys(wanted, exc.error_code)
    # A broker's add (v4+) is for a transaction version 2 client.
    codes = await rt.add_or_verify(transactional_id, producer_id, producer_epoch, wanted,
                                   add=not verify_only,
                                   client_version=tx.TV_1 if from_client else tx.TV_2)
    return {tp: _error(code, request) for tp, code in codes.items()}


def _by_topic(codes: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, p), code in codes.items():
        topics.setdefault(name, []).append({"partition_index": p,
                                            "partition_error_code": code})
    return [{"name": name, "results_by_partition": parts} for name, parts in topics.items()]


# --- AddOffsetsToTxn, EndTxn ---------------------------------------------------------------


async def _error_only(
        broker: Broker, request: Request, transactional_id: str,
        operation: Callable[[tx.TransactionCoordinator, int, int], tx.TxnEffects]) -> bytes:
    """Run an operation whose answer is only an error code on the coordinator of
    ``transactional_id``, and answer it."""
    try:
        result: tx.TxnResult = await runtime(broker).call(transactional_id, operation)
        code = result.error_code
    except CoordinatorUnavailable as exc:
        code = exc.error_code
    return respond(request, {"throttle_time": 0, "error_code": _error(code, request)})


async def add_offsets_to_txn(broker: Broker, request: Request) -> bytes:
    body = request.body
    if not _may_write(broker, request, body.transactional_id):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.transactional_id_authorization_failed})
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.group_authorization_failed})
    return await _error_only(
        broker, request, body.transactional_id,
        lambda coordinator, token, now: coordinator.add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id,
            token=token, now_ms=now))


END_TXN_BUMPS_FROM = 5  # EndTxn v5: transaction version 2, an epoch bump per end


async def end_txn(broker: Broker, request: Request) -> bytes:
    body = request.body
    if not _may_write(broker, request, body.transactional_id):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.transactional_id_authorization_failed})
    client_version = tx.TV_2 if request.api_version >= END_TXN_BUMPS_FROM else tx.TV_1
    try:
        result: tx.TxnResult = await runtime(broker).call(
            body.transactional_id, lambda coordinator, token, now: coordinator.end_txn(
                body.transactional_id, body.producer_id, body.producer_epoch,
                body.committed, token=token, now_ms=now, client_version=client_version))
    except CoordinatorUnavailable as exc:
        result = tx.TxnResult(exc.error_code)
    # v5: the producer id and epoch to go on with (-1 with an error).
    return respond(request, {"throttle_time": 0,
                             "error_code": _error(result.error_code, request),
                             "producer_id": result.producer_id,
                             "producer_epoch": result.producer_epoch})


# --- TxnOffsetCommit -----------------------------------------------------------------------


TXN_OFFSETS_ADD_FROM = 5  # TxnOffsetCommit v5: transaction version 2 (no AddOffsetsToTxn)
# A transaction coordinator's answer as a TxnOffsetCommit's (what its clients handle).
_TXN_OFFSETS_ERRORS: dict[int, int] = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.network_exception: ErrorCode.coordinator_not_available}


async def _txn_offsets_error(broker: Broker, request: Request) -> int | None:
    """What the transaction coordinator says of this producer writing offsets of this
    group: its transaction must be open under this producer id and epoch and hold the
    group's ``__consumer_offsets`` partition (AddOffsetsToTxn came first), or from v5
    (transaction version 2) the partition is added to it now. The coordinator here
    answers at once; one on another broker is asked (AddPartitionsToTxn v5)."""
    body = request.body
    rt = runtime(broker)
    partition = (OFFSETS_TOPIC, group_runtime(broker).partition_for(body.group_id))
    adding = request.api_version >= TXN_OFFSETS_ADD_FROM
    if adding or not rt.coordinated_here(body.transactional_id):
        codes = await rt.check_transaction(body.transactional_id, body.producer_id,
                                           body.producer_epoch, [partition], add=adding)
        code = codes[partition]
        return _TXN_OFFSETS_ERRORS.get(code, code) if code else None
    coordinator = rt.coordinators[rt.partition_for(body.transactional_id)]
    txn = coordinator.transactions.get(body.transactional_id)
    if txn is None or txn.producer_id != body.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if txn.producer_epoch != body.producer_epoch:
        # What Kafka's append to __consumer_offsets answers a stale epoch.
        return ErrorCode.invalid_producer_epoch
    if txn.state != tx.TxnState.ONGOING or partition not in txn.partitions:
        return ErrorCode.transaction_abortable  # before v4: INVALID_TXN_STATE (_error)
    return None


TXN_TOPIC_IDS_FROM = 6  # TxnOffsetCommit names topics by id (KIP-1319)


async def txn_offset_commit(broker: Broker, request: Request) -> bytes:
    """TxnOffsetCommit goes to the group coordinator of its group (in a cluster, the
    client found it with FindCoordinator for the group). v6 (KIP-1319, Kafka 4.4) names
    topics by id, an id this broker does not know answered UNKNOWN_TOPIC_ID, and may
    answer GROUP_ID_NOT_FOUND and STALE_MEMBER_EPOCH where older versions say
    ILLEGAL_GENERATION."""
    body = request.body
    v6 = request.api_version >= TXN_TOPIC_IDS_FROM
    topics = by_name(broker, body.topics) if v6 else body.topics
    by_id = broker.metadata if v6 else None
    whole = (ErrorCode.transactional_id_authorization_failed
             if not _may_write(broker, request, body.transactional_id)
             else ErrorCode.group_authorization_failed
             if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id)
             else 0)
    if whole:
        return commit_response(request, [r.PartitionResult(t.name, p.partition_index, whole)
                                         for t in topics for p in t.partitions], by_id)
    refused = {t.name for t in topics
               if not allowed(broker, request, Operation.READ, ResourceType.TOPIC, t.name)}
    offsets, unknown = offsets_to_commit(broker, topics, refused)
    try:
        error = await _txn_offsets_error(broker, request)
        if error is not None:
            answered = [r.PartitionResult(p.topic, p.partition, _error(error, request))
                        for p in offsets]
        else:
            result: r.OffsetCommitResult = await group_runtime(broker).call(
                body.group_id, lambda coordinator, token, now: coordinator.commit_txn_offsets(
                    body.group_id, body.producer_id, body.producer_epoch,
                    getattr(body, "member_id", r.UNKNOWN_MEMBER),  # v3+
                    getattr(body, "generation_id", r.NO_GENERATION),
                    getattr(body, "group_instance_id", None), offsets,
                    token=token, now_ms=now, group_id_not_found=v6, stale_member_epoch=v6))
            answered = result.partitions
    except CoordinatorUnavailable as exc:
        answered = [r.PartitionResult(p.topic, p.partition, exc.error_code) for p in offsets]
    # Refused partitions first, as Kafka's handleTxnOffsetCommitRequest adds them to its
    # answer before the coordinator's.
    return commit_response(request, [*unknown, *answered], by_id)


# --- DescribeTransactions, ListTransactions -------------------------------------------------


def _timestamp(ms_since_epoch: int) -> datetime.datetime:
    # kio's datetime fields cannot say -1 ("not started") with None; the same instant as
    # a datetime writes -1 on the wire, as Kafka does.
    return _EPOCH + datetime.timedelta(milliseconds=ms_since_epoch)


def _describe(broker: Broker, transactional_id: str) -> tx.TransactionDescription:
    """One transactional id, by the coordinator of its partition (NOT_COORDINATOR if
    that partition is not coordinated here)."""
    try:
        [described] = runtime(broker).coordinator_for(transactional_id).describe_transactions(
            [transactional_id])
    except CoordinatorUnavailable as exc:
        return tx.TransactionDescription(transactional_id, exc.error_code)
    return described


async def describe_transactions(broker: Broker, request: Request) -> bytes:
    described = [_describe(broker, tid) if allowed(
        broker, request, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
        else tx.TransactionDescription(tid, ErrorCode.transactional_id_authorization_failed)
        for tid in request.body.transactional_ids]
    return respond(request, {"throttle_time": 0, "transaction_states": [
        {"error_code": d.error_code, "transactional_id": d.transactional_id,
         "transaction_state": d.state, "transaction_timeout": d.transaction_timeout_ms,
         "transaction_start_time": _timestamp(d.transaction_start_time_ms),
         "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
         "topics": [{"topic": topic, "partitions": parts} for topic, parts in d.topics]}
        for d in described]})


async def list_transactions(broker: Broker, request: Request) -> bytes:
    """ListTransactions: the transactional ids of every ``__transaction_state``
    partition coordinated here (the admin client asks every broker), by id; v1 filters
    by how long a transaction has been open, v2 by a regular expression the whole id
    must match (KIP-1152; one that does not compile is INVALID_REGULAR_EXPRESSION)."""
    body = request.body
    duration = getattr(body, "duration_filter", -1)
    pattern = getattr(body, "transactional_id_pattern", None)
    try:
        matches = re.compile(pattern).fullmatch if pattern else None
    except re.error:
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.invalid_regular_expression,
                                 "unknown_state_filters": [], "transaction_states": []})
    try:
        rt = runtime(broker)
        now = rt.clock()
        # A broker coordinating nothing still answers which state filters it does not
        # know: an empty coordinator says so.
        coordinators = list(rt.coordinators.values()) or [tx.TransactionCoordinator()]
        results = [c.list_transactions(body.state_filters, body.producer_id_filters,
                                       duration, now_ms=now) for c in coordinators]
    except CoordinatorUnavailable as exc:
        return respond(request, {"throttle_time": 0, "error_code": exc.error_code,
                                 "unknown_state_filters": [], "transaction_states": []})
    # As Kafka: the transactional ids the principal may describe.
    listed = sorted((t for result in results for t in result.transactions
                     if (matches is None or matches(t.transactional_id)) and allowed(
                         broker, request, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                         t.transactional_id)), key=lambda t: t.transactional_id)
    return respond(request, {
        "throttle_time": 0, "error_code": 0,
        "unknown_state_filters": results[0].unknown_state_filters,
        "transaction_states": [
            {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
             "transaction_state": t.state} for t in listed]})


# --- DescribeProducers --------------------------------------------------------------------


def _active_producers(lg: Any) -> list[dict[str, Any]]:
    with lg.lock:  # appends change the entries on the event loop; the cleaner does not
        entries = list(lg.producer_state.producers.items())
    out = []
    for producer_id, entry in sorted(entries):
        last = entry.batches[-1] if entry.batches else None
        out.append({"producer_id": producer_id, "producer_epoch": entry.epoch,
                    "last_sequence": entry.last_seq,
                    "last_timestamp": last.timestamp if last is not None else -1,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": entry.txn_first_offset})
    return out


async def describe_producers(broker: Broker, request: Request) -> bytes:
    """DescribeProducers (61, KIP-664): each partition's producers as its log knows them
    (epoch, last sequence and timestamp, the first offset of an open transaction), what
    ``kafka-transactions.sh describe-producers`` and ``find-hanging`` read."""
    topics = []
    for t in request.body.topics:
        partitions = []
        readable = allowed(broker, request, Operation.READ, ResourceType.TOPIC, t.name)
        for index in t.partition_indexes:
            lg = broker.get_log(t.name, index)
            if not readable:
                partitions.append({"partition_index": index,
                                   "error_code": ErrorCode.topic_authorization_failed,
                                   "error_message": "Topic authorization failed.",
                                   "active_producers": []})
                continue
            if lg is None:
                partitions.append({"partition_index": index,
                                   "error_code": ErrorCode.unknown_topic_or_partition,
                                   "error_message": f"{t.name}-{index} does not exist",
                                   "active_producers": []})
                continue
            partitions.append({"partition_index": index, "error_code": 0,
                               "error_message": None,
                               "active_producers": _active_producers(lg)})
        topics.append({"name": t.name, "partitions": partitions})
    return respond(request, {"throttle_time": 0, "topics": topics})


ADD_PARTITIONS_TO_TXN = Api(24, "AddPartitionsToTxn", 0, 5, add_partitions_to_txn)
ADD_OFFSETS_TO_TXN = Api(25, "AddOffsetsToTxn", 0, 4, add_offsets_to_txn)
END_TXN = Api(26, "EndTxn", 0, 5, end_txn)
TXN_OFFSET_COMMIT = Api(28, "TxnOffsetCommit", 0, 6, txn_offset_commit)
DESCRIBE_TRANSACTIONS = Api(65, "DescribeTransactions", 0, 0, describe_transactions)
LIST_TRANSACTIONS = Api(66, "ListTransactions", 0, 2, list_transactions)
DESCRIBE_PRODUCERS = Api(61, "DescribeProducers", 0, 0, describe_producers)

APIS = (ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT,
        DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS, DESCRIBE_PRODUCERS)
