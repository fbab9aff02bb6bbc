"""ListOffsets (2): the earliest, latest or max-timestamp offset, or the first offset at
or after a timestamp (time index lookup), per partition. For read_committed (v2+) the
latest offset is the last stable offset, and a lookup by timestamp never answers an
offset at or past it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.protocol.codec import Request
from odradek.server.handlers.base import LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, Api, respond

if TYPE_CHECKING:
    from odradek.server.broker import Broker

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734, v7+


def lookup(broker: Broker, topic: str, partition: int, timestamp: int,
           read_committed: bool = False) -> dict[str, Any]:
    lg = broker.get_log(topic, partition)
    if lg is None:
        return {"partition_index": partition, "error_code": UNKNOWN_TOPIC_OR_PARTITION,
                "timestamp": -1, "offset": -1, "leader_epoch": -1}
    found: tuple[int, int] | None
    if timestamp == LATEST:
        # read_committed (v2+): the end a read_committed consumer can reach is the
        # last stable offset, not the log end (KIP-98).
        found = (lg.last_stable_offset if read_committed else lg.log_end_offset, -1)
    elif timestamp == EARLIEST:
        found = (lg.log_start_offset, -1)
    else:
        if timestamp == MAX_TIMESTAMP:
            found = lg.offset_of_max_timestamp()
        else:
            found = lg.offset_for_timestamp(timestamp)
        if found is not None and read_committed and found[0] >= lg.last_stable_offset:
            # A read_committed client cannot be pointed past what it may read
            # (Kafka's Partition.fetchOffsetForTimestamp answers "none" then).
            found = None
    offset, ts = found if found is not None else (-1, -1)
    return {"partition_index": partition, "error_code": 0, "timestamp": ts, "offset": offset,
            "leader_epoch": LEADER_EPOCH if offset >= 0 else -1}


async def handle(broker: Broker, request: Request) -> bytes:
    read_committed = getattr(request.body, "isolation_level", 0) == 1
    topics = []
    for topic in request.body.topics:
        topics.append({
            "name": topic.name,
            "partitions": [lookup(broker, topic.name, p.partition_index, p.timestamp,
                                  read_committed)
                           for p in topic.partitions],
        })
    return respond(request, {"throttle_time": 0, "topics": topics})


API = Api(2, "ListOffsets", 1, 7, handle)
