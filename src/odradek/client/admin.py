"""Admin requests a cluster's controller answers, on this package's blocking client:
leader elections (ElectLeaders, KIP-460) and partition reassignments
(AlterPartitionReassignments / ListPartitionReassignments, KIP-455).

librdkafka has no reassignment API, and these three must reach the controller: the
controller is found from a Metadata answer and asked again after NOT_CONTROLLER (the
controller moved meanwhile), as Kafka's admin client does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.codec import (
    ALTER_PARTITION_REASSIGNMENTS,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
    METADATA,
)
from odradek.client.connection import BrokerConnection, Cluster, KafkaClientError

TopicPartition = tuple[str, int]
PREFERRED, UNCLEAN = 0, 1
# (Kafka's error name or None, message) per partition.
Outcome = tuple[str | None, str | None]
RETRY_S = 0.25


def _name(code: Any) -> str | None:
    return None if code in (ErrorCode.none, 0) else ErrorCode(code).name.upper()


def controller_call(bootstrap: str, api_key: int, data: Mapping[str, Any], *,
                    timeout_s: float = 30.0) -> Any:
    """Send a request to the controller; again (after a fresh Metadata) while the answer
    is NOT_CONTROLLER, until ``timeout_s``. KafkaClientError when no controller answers."""
    deadline = time.monotonic() + timeout_s
    cluster = Cluster(bootstrap, client_id="odradek-admin", timeout_s=timeout_s)
    try:
        while True:
            conn = cluster.any_broker()
            meta = conn.request(METADATA, {"topics": [], "allow_auto_topic_creation": False})
            brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
            controller = int(getattr(meta, "controller_id", -1))
            answer = None
            if controller in brokers:
                host, port = brokers[controller]
                target = BrokerConnection(host, port, client_id="odradek-admin",
                                          timeout_s=timeout_s)
                try:
                    answer = target.request(api_key, data)
                finally:
                    target.close()
                if _name(getattr(answer, "error_code", 0)) != "NOT_CONTROLLER":
                    return answer
            if time.monotonic() + RETRY_S > deadline:
                raise KafkaClientError(
                    "no controller answered" if answer is None else
                    f"broker {controller} answered NOT_CONTROLLER until the time was up")
            cluster.forget(conn)
            time.sleep(RETRY_S)
    finally:
        cluster.close()


def _topics(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in tps:
        out.setdefault(topic, []).append(p)
    return out


def _check(answer: Any) -> None:
    error = _name(getattr(answer, "error_code", 0))
    if error is not None:
        raise KafkaClientError(f"{error}: {getattr(answer, 'error_message', '') or ''}".strip())


def elect_leaders(bootstrap: str, election_type: int,
                  partitions: Sequence[TopicPartition] | None, *, timeout_s: float = 30.0
                  ) -> dict[TopicPartition, Outcome]:
    """ElectLeaders: per partition, None (elected) or Kafka's error. ``partitions`` None:
    every partition (only those elected are reported)."""
    topics = None if partitions is None else [
        {"topic": t, "partitions": ps} for t, ps in _topics(partitions).items()]
    answer = controller_call(bootstrap, ELECT_LEADERS, {
        "election_type": election_type, "topic_partitions": topics,
        "timeout": int(timeout_s * 1000)}, timeout_s=timeout_s)
    _check(answer)
    return {(r.topic, int(p.partition_id)): (_name(p.error_code), p.error_message)
            for r in answer.replica_election_results for p in r.partition_result}


def alter_reassignments(bootstrap: str, targets: Mapping[TopicPartition, Sequence[int] | None],
                        *, timeout_s: float = 30.0) -> dict[TopicPartition, Outcome]:
    """AlterPartitionReassignments: move each partition to its replicas (None: cancel
    its reassignment in progress); per partition None (accepted) or Kafka's error."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), replicas in targets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "replicas": None if replicas is None else list(replicas)})
    answer = controller_call(bootstrap, ALTER_PARTITION_REASSIGNMENTS, {
        "timeout": int(timeout_s * 1000),
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
        timeout_s=timeout_s)
    _check(answer)
    return {(t.name, int(p.partition_index)): (_name(p.error_code), p.error_message)
            for t in answer.responses for p in t.partitions}


def list_reassignments(bootstrap: str, partitions: Sequence[TopicPartition] | None = None, *,
                       timeout_s: float = 30.0
                       ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments: (replicas, adding, removing) of each partition being
    moved, among ``partitions`` (None: all)."""
    topics = None if partitions is None else [
        {"name": t, "partition_indexes": ps} for t, ps in _topics(partitions).items()]
    answer = controller_call(bootstrap, LIST_PARTITION_REASSIGNMENTS, {
        "timeout": int(timeout_s * 1000), "topics": topics}, timeout_s=timeout_s)
    _check(answer)
    return {(t.name, int(p.partition_index)): (list(p.replicas), list(p.adding_replicas),
                                               list(p.removing_replicas))
            for t in answer.topics for p in t.partitions}
