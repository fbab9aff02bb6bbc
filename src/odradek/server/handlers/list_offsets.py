"""ListOffsets (2): the earliest, latest or max-timestamp offset, or the first offset at
or after a timestamp (time index lookup), per partition. The latest offset is the high
watermark (on a single node, the log end), for read_committed (v2+) the last stable
offset, and a lookup by timestamp never answers an offset at or past either. In a
cluster only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), and a request naming
another leader epoch (v4+, KIP-320) gets FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.
A tiered log's timestamp lookup searches its remote part first (on a worker thread: it
reads the store), then the local log."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.cluster.replication import epoch_error
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.errors import error_code
from odradek.server.handlers.base import (
    Api,
    allowed,
    respond,
)
from odradek.storage.errors import RemoteStorageError

if TYPE_CHECKING:
    from odradek.server.broker import Broker

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734, v7+
# Tiered storage's specs (Kafka 4.x's kafka-get-offsets offers them as --time -4/-5/-6),
# answered from the tiers (docs/tiered-storage.md); for a topic without remote storage as
# Kafka answers (UnifiedLog.fetchOffsetByTimestamp): the local log start is the log
# start, and there is no tiered offset and no pending upload (offset -1).
EARLIEST_LOCAL = -4  # KIP-405, v8+
LATEST_TIERED = -5  # KIP-1005, v9+ (v10 adds TimeoutMs, for remote reads: unused)
EARLIEST_PENDING_UPLOAD = -6  # KIP-1023, v11+
# The first ListOffsets version of each spec (Kafka's ListOffsetsRequest).
_SPEC_SINCE = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
               EARLIEST_PENDING_UPLOAD: 11}


def lookup(broker: Broker, topic: str, partition: int, timestamp: int,
           read_committed: bool = False, current_leader_epoch: int = -1,
           version: int = 11, remote: tuple[int, int] | None = None) -> dict[str, Any]:
    """One partition's answer; ``remote``: what the remote tier's search found."""
    lg = broker.get_log(topic, partition)
    epoch = broker.topology.leader_epoch(topic, partition)
    if lg is None:
        error = broker.missing_partition_error(topic, partition)
    else:
        error = epoch_error(current_leader_epoch, epoch)
    if lg is None or error:
        return {"partition_index": partition,
                "error_code": error or ErrorCode.unknown_topic_or_partition,
                "timestamp": -1, "offset": -1, "leader_epoch": -1}
    if timestamp < 0 and version < _SPEC_SINCE.get(timestamp, 1 << 15):
        # A spec the request's version does not have yet, or none at all: Kafka answers
        # UNSUPPORTED_VERSION (found by the oracle tier, tests/oracle), not a search by
        # time.
        return {"partition_index": partition, "error_code": ErrorCode.unsupported_version,
                "timestamp": -1, "offset": -1, "leader_epoch": -1}
    found: tuple[int, int] | None
    visible = lg.high_watermark
    if timestamp == LATEST:
        # read_committed (v2+): the end a read_committed consumer can reach is the
        # last stable offset, not the high watermark (KIP-98).
        found = (lg.last_stable_offset if read_committed else visible, -1)
    elif timestamp == EARLIEST:
        found = (lg.log_start_offset, -1)  # a tiered log's remote part included
    elif timestamp == EARLIEST_LOCAL:
        found = (lg.local_log_start_offset, -1)
    elif timestamp == LATEST_TIERED:
        # The last offset in the remote tier; none (-1) while nothing is there or the
        # topic is not tiered, as Kafka answers.
        tiered_end = lg.highest_remote_offset if lg.tiered else -1
        found = (tiered_end, -1) if tiered_end >= 0 else None
    elif timestamp == EARLIEST_PENDING_UPLOAD:
        # KIP-1023: the first offset not yet in the remote tier (tiered topics only).
        found = ((lg.highest_remote_offset + 1 if lg.highest_remote_offset >= 0
                  else lg.log_start_offset), -1) if lg.tiered else None
    else:
        if timestamp == MAX_TIMESTAMP:
            found = lg.offset_of_max_timestamp()
        else:
            found = remote or lg.offset_for_timestamp(timestamp)
        limit = lg.last_stable_offset if read_committed else visible
        if found is not None and found[0] >= limit:
            # A client cannot be pointed past what it may read (Kafka's
            # Partition.fetchOffsetForTimestamp answers "none" then).
            found = None
    offset, ts = found if found is not None else (-1, -1)
    return {"partition_index": partition, "error_code": 0, "timestamp": ts, "offset": offset,
            "leader_epoch": epoch if offset >= 0 else -1}


async def _search_remote(broker: Broker, topic: str, partition: int, timestamp: int
                         ) -> tuple[int, int] | None:
    """A timestamp lookup in a tiered log's remote part (None: not tiered, nothing
    remote, or nothing there at or after ``timestamp``)."""
    tiered = broker.tiered
    if timestamp < 0 or tiered is None:
        return None
    lg = broker.get_log(topic, partition)
    if lg is None or not lg.tiered or lg.local_log_start_offset <= lg.log_start_offset:
        return None
    return await asyncio.get_running_loop().run_in_executor(
        None, tiered.reader.offset_for_timestamp, topic, partition,
        lg.local_log_start_offset, timestamp)


async def handle(broker: Broker, request: Request) -> bytes:
    read_committed = getattr(request.body, "isolation_level", 0) == 1
    topics = []
    for topic in request.body.topics:
        if not allowed(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
            topics.append({"name": topic.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": ErrorCode.topic_authorization_failed,
                 "timestamp": -1, "offset": -1, "leader_epoch": -1} for p in topic.partitions]})
            continue
        partitions = []
        for p in topic.partitions:
            try:
                remote = await _search_remote(broker, topic.name, p.partition_index,
                                              p.timestamp)
            except RemoteStorageError as exc:
                partitions.append({"partition_index": p.partition_index,
                                   "error_code": error_code(exc), "timestamp": -1,
                                   "offset": -1, "leader_epoch": -1})
                continue
            partitions.append(lookup(broker, topic.name, p.partition_index, p.timestamp,
                                     read_committed, getattr(p, "current_leader_epoch", -1),
                                     request.api_version, remote))
        topics.append({"name": topic.name, "partitions": partitions})
    return respond(request, {"throttle_time": 0, "topics": topics})


API = Api(2, "ListOffsets", 1, 11, handle)
