"""The share partitions' side of ShareFetch (78) and ShareAcknowledge (79): a member's
acknowledgements applied to a share partition, and records acquired for it from the
partitions of its share session (the request handling and answers are
``server/handlers/share_fetch.py``'s).

- acknowledgements, per partition, all or nothing (``SharePartition.acknowledge``): an
  offset the member does not hold is INVALID_RECORD_STATE in that partition's
  AcknowledgeErrorCode; the state is written (``partitions.py``) before the answer;
- acquisition: from each partition of the session in turn, the log is read from the
  share partition's next fetch offset up to the high watermark (read_committed: the last
  stable offset, aborted transactions' records archived at once), and the available
  offsets of the batches read are acquired for the member, up to MaxRecords in all
  (whole batches, or exactly MaxRecords with ShareAcquireMode 1) and MaxBytes. The
  records section holds whole batches; a client keeps the records of the acquired
  ranges and acknowledges the other offsets of an acquired range (control records,
  compacted gaps) as GAP.

A partition this broker does not lead is NOT_LEADER_OR_FOLLOWER; an unknown topic id
UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.coordinator.share_partition import REJECT, RENEW, AcquiredRange, SharePartition
from odradek.server.dynamic_configs import (
    SHARE_ISOLATION_LEVEL,
    SHARE_RENEW_ACKNOWLEDGE_ENABLE,
)
from odradek.server.features import SHARE_VERSION
from odradek.server.share.partitions import ShareError, ShareGroupPartition
from odradek.server.share.sessions import ShareSession
from odradek.server.tiered import read_remote
from odradek.server.topic_ids import is_unknown
from odradek.storage.errors import (
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
)
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

SHARE_GROUPS_DISABLED = "Share groups are not enabled (the finalized share.version is 0)."
_HEADER = struct.Struct(">qi")  # base offset, batch length (after these 12 bytes)
_LAST_DELTA = struct.Struct(">i")  # at byte 23 of a batch
_ATTRIBUTES = struct.Struct(">h")  # at byte 21
_PRODUCER_ID = struct.Struct(">q")  # at byte 43
_TRANSACTIONAL, _CONTROL = 0x10, 0x20
Acks = list[tuple[int, int, list[int]]]
Tp = tuple[str, int]


def batch_spans(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, end position) of each whole batch in ``data``."""
    out = []
    pos, size = 0, len(data)
    while pos + 27 <= size:
        base, length = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > size:
            break
        out.append((base, base + _LAST_DELTA.unpack_from(data, pos + 23)[0], end))
        pos = end
    return out


class PartitionAnswer:
    """One partition of a request's answer."""

    __slots__ = (
        "ack_error",
        "ack_message",
        "acquired",
        "error",
        "message",
        "partition",
        "records",
        "topic",
        "topic_id",
    )

    def __init__(self, topic: str, topic_id: uuid.UUID, partition: int) -> None:
        self.topic, self.topic_id, self.partition = topic, topic_id, partition
        self.error = 0
        self.message: str | None = None
        self.ack_error = 0
        self.ack_message: str | None = None
        self.records: bytes | None = None
        self.acquired: list[AcquiredRange] = []


def share_level(broker: Broker) -> int:
    """The finalized ``share.version``: 0 disables share groups, 2 adds RENEW."""
    return broker.topology.features().levels.get(SHARE_VERSION, 0)


class ShareFetcher:
    """What the two handlers share: the broker's share partitions and sessions."""

    def __init__(self, broker: Broker, group_id: str) -> None:
        self.broker = broker
        # RENEW acknowledgements (KIP-1222): share.version 2 and the group's
        # share.renew.acknowledge.enable.
        self.renew = share_level(broker) >= 2 and broker.share_partitions.config(
            group_id, SHARE_RENEW_ACKNOWLEDGE_ENABLE) == "true"

    # --- looking partitions up ---------------------------------------------------------

    async def _share_partition(self, group_id: str, out: PartitionAnswer
                               ) -> ShareGroupPartition | None:
        """The share partition, or None with ``out``'s error set."""
        broker = self.broker
        if is_unknown(out.topic):
            out.error, out.message = ErrorCode.unknown_topic_id, "Unknown topic id."
            return None
        lg = broker.get_log(out.topic, out.partition)
        if lg is None:
            out.error = broker.missing_partition_error(out.topic, out.partition)
            return None
        try:
            return await broker.share_partitions.get(group_id, out.topic, out.topic_id,
                                                     out.partition, lg)
        except ShareError as exc:
            out.error, out.message = exc.error_code, str(exc)
            return None

    # --- acknowledging -----------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str, out: PartitionAnswer,
                          acks: Acks) -> None:
        if not self.renew and any(RENEW in types for _, _, types in acks):
            out.ack_error = ErrorCode.invalid_request
            out.ack_message = "RENEW acknowledgements are not enabled."
            return
        sp = await self._share_partition(group_id, out)
        if sp is None:
            out.ack_error, out.ack_message = out.error, out.message
            return
        now = self.broker.clock()
        async with sp.lock:
            code = sp.state.acknowledge(member_id, acks, now)
            if code:
                out.ack_error = code
                out.ack_message = ("The record state is invalid: not acquired by this "
                                   "member." if code == ErrorCode.invalid_record_state
                                   else "Invalid acknowledgement batches.")
                return
            renewed = any(RENEW in types for _, _, types in acks)
            if renewed or any(types != [RENEW] for _, _, types in acks):
                self.broker.share_partitions.arm(sp)
            code = await self.broker.share_partitions.persist(sp)
        if code:
            out.ack_error, out.ack_message = code, "The acknowledgement could not be stored."
        # Released records may be wanted by another member's waiting fetch.
        self.broker.purgatory.notify((sp.topic, sp.partition))

    # --- acquiring ---------------------------------------------------------------------

    async def acquire(self, session: ShareSession, max_records: int, max_bytes: int,
                      record_limit: bool, outs: dict[Tp, PartitionAnswer]) -> int:
        """Acquire records for the session's member from its partitions, in turn; the
        number of offsets acquired."""
        broker = self.broker
        taken = 0
        budget = max_bytes
        lock_ms = broker.share_partitions.lock_ms(session.group_id)
        read_committed = broker.share_partitions.config(
            session.group_id, SHARE_ISOLATION_LEVEL) == "read_committed"
        for (topic, partition), topic_id in list(session.partitions.items()):
            if taken >= max_records or budget <= 0:
                break
            out = outs.get((topic, partition))
            if out is None:
                out = PartitionAnswer(topic, topic_id, partition)
            sp = await self._share_partition(session.group_id, out)
            if sp is None:
                if out.error != ErrorCode.none:
                    outs[(topic, partition)] = out
                continue
            lg = broker.get_log(topic, partition)
            if lg is None:
                continue
            async with sp.lock:
                state = sp.state
                if state.start_offset < lg.log_start_offset:
                    # Retention or DeleteRecords removed records the group had not done.
                    state.advance_to(lg.log_start_offset)
                offset = state.next_fetch_offset()
                limit = lg.high_watermark if lg.replicated else lg.log_end_offset
                aborted: list[AbortedTxn] = []
                try:
                    if read_committed:
                        committed = lg.read_committed(offset, budget, min_one=True)
                        read, aborted = committed.result, committed.aborted
                    elif offset < limit:
                        read = lg.read(offset, budget, max_offset=limit, min_one=True)
                    else:
                        continue
                except OffsetMovedToTieredStorageError:
                    # In the remote tier (KIP-405): from the reader's cache, or nothing
                    # this time while it fetches (the member asks again).
                    remote = read_remote(broker, topic, partition, offset, budget,
                                         read_committed=read_committed)
                    if remote.data is None:
                        continue
                    data, aborted = remote.data, remote.aborted
                except OffsetOutOfRangeError:
                    state.advance_to(lg.log_start_offset)
                    continue
                else:
                    if read.region is None:
                        continue
                    data = read.region.read()
                spans = batch_spans(data)
                got = state.acquire(session.member_id, [(b, last) for b, last, _ in spans],
                                    max_records - taken, lock_ms, broker.clock(),
                                    record_limit=record_limit)
                if got and aborted:
                    got = _archive_aborted(state, session.member_id, data, spans, aborted,
                                           got, broker.clock())
            if not got:
                continue
            # Only the batches holding acquired offsets go back.
            first, last_acquired = got[0].first_offset, got[-1].last_offset
            begin, end = 0, len(data)
            for _, last, after in spans:
                if last < first:
                    begin = after
                if last >= last_acquired:
                    end = after
                    break
            out.records = data[begin:end]
            out.acquired = got
            outs[(topic, partition)] = out
            taken += sum(r.last_offset - r.first_offset + 1 for r in got)
            budget -= end - begin
            broker.share_partitions.arm(sp)
        return taken


def _archive_aborted(state: SharePartition, member_id: str, data: bytes,
                     spans: list[tuple[int, int, int]], aborted: list[AbortedTxn],
                     got: list[AcquiredRange], now_ms: int) -> list[AcquiredRange]:
    """read_committed: the acquired batches of aborted transactions are archived at once
    (never delivered, as Kafka's SharePartition archives them); what is left."""
    cut: list[tuple[int, int]] = []
    pos = 0
    for base, last, after in spans:
        attributes = _ATTRIBUTES.unpack_from(data, pos + 21)[0]
        if attributes & _TRANSACTIONAL and not attributes & _CONTROL:
            producer_id = _PRODUCER_ID.unpack_from(data, pos + 43)[0]
            if any(a.producer_id == producer_id and a.first_offset <= base <= a.last_offset
                   for a in aborted):
                cut.append((base, last))
        pos = after
    if not cut:
        return got
    kept: list[AcquiredRange] = []
    rejects: Acks = []
    for r in got:
        pieces = [(r.first_offset, r.last_offset)]
        for lo, hi in cut:
            nxt = []
            for a, b in pieces:
                if hi < a or lo > b:
                    nxt.append((a, b))
                    continue
                rejects.append((max(a, lo), min(b, hi), [REJECT]))
                if a < lo:
                    nxt.append((a, lo - 1))
                if b > hi:
                    nxt.append((hi + 1, b))
            pieces = nxt
        kept.extend(AcquiredRange(a, b, r.delivery_count) for a, b in pieces)
    rejects.sort()
    state.acknowledge(member_id, rejects, now_ms)
    return kept

