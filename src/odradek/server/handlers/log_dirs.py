"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): this broker's log directories,
the partition logs in each (and those being moved into one), and moving a log from one
directory to another (the moves themselves are ``server.log_dirs``'s).

Both need CLUSTER permission, as Kafka's: DESCRIBE to list, ALTER to move.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.handlers.base import CLUSTER, Api, allowed, respond

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.storage import Log


async def describe_log_dirs(broker: Broker, request: Request) -> bytes:
    logs = broker.logs
    assert logs is not None
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
        return respond(request, {"throttle_time": 0,
                                 "error_code": ErrorCode.cluster_authorization_failed,
                                 "results": []})
    requested = request.body.topics
    wanted: set[tuple[str, int]] | None = None
    if requested is not None:
        wanted = {(t.topic, p) for t in requested for p in t.partitions}
    # Per directory: its logs, and the logs being moved into it (Kafka's future
    # replicas, whose lag is how far they are behind the current log's end).
    found: dict[str, list[tuple[str, int, Log, bool]]] = {d: [] for d in logs.log_dirs}
    for (name, partition), lg in sorted(list(logs.logs.items())):
        directory = logs.dir_of(name, partition)
        if directory is not None and (wanted is None or (name, partition) in wanted):
            found[directory].append((name, partition, lg, False))
    for (name, partition), moving in sorted(list(logs.futures.items())):
        directory = logs.future_dir_of(name, partition)
        if directory is not None and (wanted is None or (name, partition) in wanted):
            found[directory].append((name, partition, moving, True))
    results = []
    for directory, entries in found.items():
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, partition, lg, future in entries:
            current = logs.get_log(name, partition)
            by_topic.setdefault(name, []).append({
                "partition_index": partition, "partition_size": lg.size_bytes,
                # Kafka's offset lag: a future log's distance to the current log's end;
                # a replica's, how far its log end is below the high watermark it knows
                # (0 on a leader, and on a single node).
                "offset_lag": (current.log_end_offset - lg.log_end_offset
                               if future and current is not None
                               else max(lg.high_watermark - lg.log_end_offset, 0)),
                "is_future_key": future,
            })
        usage = shutil.disk_usage(directory)
        results.append({
            "error_code": 0,
            "log_dir": directory,
            "is_cordoned": False,  # v5, KIP-1066: this broker cordons no directory
            "topics": [{"name": name, "partitions": parts}
                       for name, parts in by_topic.items()],
            "total_bytes": usage.total,
            "usable_bytes": usage.free,
        })
    return respond(request, {"throttle_time": 0, "error_code": 0, "results": results})


async def alter_replica_log_dirs(broker: Broker, request: Request) -> bytes:
    # Each partition once, to the last directory naming it (Kafka builds a map).
    moves: dict[tuple[str, int], str] = {}
    for d in request.body.dirs:
        for t in d.topics:
            for p in t.partitions:
                moves.pop((t.name, p), None)
                moves[(t.name, p)] = d.path
    if allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER, CLUSTER):
        codes = {tp: broker.log_dir_moves.alter(*tp, path) for tp, path in moves.items()}
    else:
        codes = dict.fromkeys(moves, ErrorCode.cluster_authorization_failed)
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (name, partition), code in codes.items():
        by_topic.setdefault(name, []).append({"partition_index": partition,
                                              "error_code": code})
    return respond(request, {"throttle_time": 0, "results": [
        {"topic_name": name, "partitions": parts} for name, parts in by_topic.items()]})


ALTER_REPLICA_LOG_DIRS = Api(34, "AlterReplicaLogDirs", 1, 2, alter_replica_log_dirs)
DESCRIBE_LOG_DIRS = Api(35, "DescribeLogDirs", 1, 5, describe_log_dirs)
APIS = [ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS]
