"""FindCoordinator (10): which broker coordinates a group or a transactional id.

v0-3 ask for one key, v4-5 for a batch of ``coordinator_keys`` (v5 only tells the client it
may meet KIP-890's TRANSACTION_ABORTABLE); key type 0 is a group, 1 a
transactional id, 2 (v6, KIP-932) a share partition ("group:topicId:partition", asked
by brokers: CLUSTER_ACTION; its coordinator leads its ``__share_group_state``
partition). As in Kafka, a key's coordinator is the leader of its partition of
``__consumer_offsets`` or ``__transaction_state`` (``partition_for``). A single node
leads every partition, so it answers itself for every key: its groups are loaded from
``__consumer_offsets`` and its transactions from ``__transaction_state`` before it
listens (``server/coordinators/groups.py``, ``server/coordinators/transactions.py``),
so there is no loading phase to answer COORDINATOR_NOT_AVAILABLE for; the first lookup
of a transaction coordinator creates ``__transaction_state``, as in Kafka. In a cluster
(``broker.topology``: ``ClusterNode``) the answer is the partition's current leader,
COORDINATOR_NOT_AVAILABLE while it has none.
Serving this API matters beyond groups too: librdkafka enables LZ4 only when the broker
lists FindCoordinator in ApiVersions (it reads that as "a 0.9+ broker")."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)
from odradek.server.handlers.metadata import listener_name

if TYPE_CHECKING:
    from odradek.server.broker import Broker

GROUP, TRANSACTION, SHARE = 0, 1, 2
_TOPICS = {GROUP: OFFSETS_TOPIC, TRANSACTION: TRANSACTION_STATE_TOPIC,
           SHARE: SHARE_GROUP_STATE_TOPIC}


def valid_share_key(key: str) -> bool:
    """Kafka's SharePartitionKey form: "group:topicId:partition", the topic id in
    Kafka's base64 form (22 characters), the partition a number."""
    group, _, rest = key.partition(":")
    topic_id, _, partition = rest.partition(":")
    if not group or len(topic_id) != 22 or not partition.isdigit():
        return False
    try:
        return len(base64.urlsafe_b64decode(topic_id + "==")) == 16
    except ValueError:
        return False


def _no_node(error: int, message: str) -> dict[str, Any]:
    return {"node_id": -1, "host": "", "port": -1, "error_code": error,
            "error_message": message}


def _coordinator(broker: Broker, request: Request, key_type: int, key: str
                 ) -> dict[str, Any]:
    """The node that coordinates ``key`` (its fields of the answer, error included), at
    its address for the listener the request came in on."""
    listener = listener_name(broker, request)
    if key_type == SHARE:
        # A share coordinator is looked up by brokers (KIP-932): CLUSTER_ACTION.
        if not allowed(broker, request, Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                       CLUSTER):
            return _no_node(ErrorCode.cluster_authorization_failed,
                            "Cluster authorization failed.")
        if not valid_share_key(key):
            return _no_node(ErrorCode.invalid_request, f"Invalid share coordinator key {key}")
    elif not allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP
                     if key_type == GROUP else ResourceType.TRANSACTIONAL_ID, key):
        return _no_node(ErrorCode.group_authorization_failed if key_type == GROUP
                        else ErrorCode.transactional_id_authorization_failed,
                        "Group authorization failed." if key_type == GROUP
                        else "Transactional Id authorization failed.")
    runtime = (broker.groups if key_type == GROUP else broker.transactions
               if key_type == TRANSACTION else broker.share_state)
    if runtime is None:
        return _no_node(ErrorCode.coordinator_not_available, "the coordinator is not running")
    partition = runtime.partition_for(key)
    leader = broker.topology.leader_broker(runtime.topic, partition)
    if leader is None:
        # The internal topic does not exist yet, or the partition has no live leader:
        # the client asks again.
        return _no_node(ErrorCode.coordinator_not_available,
                        f"{runtime.topic}-{partition} has no leader")
    address = leader.address(listener)
    if address is None:
        return _no_node(ErrorCode.coordinator_not_available,
                        f"the coordinator (broker {leader.node_id}) has no listener {listener}")
    return {"node_id": leader.node_id, "host": address[0], "port": address[1],
            "error_code": 0, "error_message": None}


async def handle(broker: Broker, request: Request) -> bytes:
    body = request.body
    key_type = getattr(body, "key_type", GROUP)
    keys = getattr(body, "coordinator_keys", None)
    if key_type not in _TOPICS:
        node = _no_node(ErrorCode.invalid_request, f"unknown coordinator key type {key_type}")
        return respond(request, {"throttle_time": 0, **node,
                                 "coordinators": [{"key": key, **node} for key in keys or ()]})
    # Kafka creates the internal topic when a coordinator is first looked for. A single
    # node does at once and loads its (empty) partitions before the answer; in a cluster
    # its partitions get leaders (and those load it) a moment later, and the client,
    # answered COORDINATOR_NOT_AVAILABLE meanwhile, asks again.
    await broker.topology.ensure_internal_topic(_TOPICS[key_type])
    # v0-3 ask for one key; v4 has coordinator_keys instead (the top-level fields are
    # not in its answer).
    node = _coordinator(broker, request, key_type, getattr(body, "key", None) or "")
    return respond(request, {
        "throttle_time": 0, **node,
        "coordinators": [{"key": key, **_coordinator(broker, request, key_type, key)}
                         for key in keys or ()],
    })


API = Api(10, "FindCoordinator", 0, 6, handle)
