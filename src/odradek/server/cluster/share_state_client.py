"""Share state across brokers (KIP-932): a share partition's leader keeps its state at
the share coordinator, the leader of the state's ``__share_group_state`` partition, which
is often another broker. This sends it ReadShareGroupState (84), WriteShareGroupState
(85) and DeleteShareGroupState (86) over the inter-broker listener, as Kafka's
PersisterStateManager does, and turns the answers back into the runtime's values.

A coordinator that cannot be reached, or is moving, is COORDINATOR_NOT_AVAILABLE /
NOT_COORDINATOR to the caller (the share fetch answers that partition with it and the
consumer retries); the next request finds the new leader in the metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.client.aio import KafkaClientError
from odradek.coordinator.share_coordinator import ShareKey, ShareState
from odradek.coordinator.share_records import SHARE_GROUP_STATE_TOPIC, StateBatch
from odradek.server.cluster.peers import PeerConnections
from odradek.server.coordinators.coordinator_runtime import CoordinatorUnavailable

if TYPE_CHECKING:
    from odradek.server.cluster.node import ClusterNode

log = logging.getLogger(__name__)

READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE, DELETE_SHARE_GROUP_STATE = 84, 85, 86
VERSIONS = {READ_SHARE_GROUP_STATE: (0, 0), WRITE_SHARE_GROUP_STATE: (0, 1),
            DELETE_SHARE_GROUP_STATE: (0, 0)}


def _batches(batches: Sequence[StateBatch]) -> list[dict[str, int]]:
    return [{"first_offset": b.first_offset, "last_offset": b.last_offset,
             "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
            for b in batches]


class ShareStateClient:
    """A cluster node's share-state requests to share coordinators elsewhere."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self._peers = PeerConnections(node, "share-state", VERSIONS)

    async def _ask(self, partition: int, api_key: int, group_id: str, key: ShareKey,
                   fields: dict[str, Any]) -> Any:
        """The one partition result of a request to the coordinator of ``partition``."""
        leader = self.node.metadata.leader(SHARE_GROUP_STATE_TOPIC, partition)
        if leader is None:
            raise CoordinatorUnavailable(ErrorCode.coordinator_not_available,
                                         f"{SHARE_GROUP_STATE_TOPIC}-{partition} has no leader")
        if leader.node_id == self.node.node_id:
            raise CoordinatorUnavailable(ErrorCode.coordinator_load_in_progress,
                                         f"{SHARE_GROUP_STATE_TOPIC}-{partition} is loading")
        body = {"group_id": group_id, "topics": [{"topic_id": key[1], "partitions": [
            {"partition": key[2], **fields}]}]}
        try:
            conn = await self._peers.get(leader.node_id)
            answer = await conn.request(api_key, body)
        except (KafkaClientError, KeyError) as exc:
            log.info("share state of %s with broker %d: %s", key, leader.node_id, exc)
            await self._peers.drop(leader.node_id)
            raise CoordinatorUnavailable(ErrorCode.coordinator_not_available,
                                         f"the share coordinator (broker {leader.node_id}) "
                                         f"could not be reached: {exc}") from None
        [result] = [p for t in answer.results for p in t.partitions]
        return result

    async def read(self, partition: int, key: ShareKey) -> ShareState | None:
        result = await self._ask(partition, READ_SHARE_GROUP_STATE, key[0], key,
                                 {"leader_epoch": 0})
        if result.error_code:
            raise CoordinatorUnavailable(int(result.error_code), result.error_message or "")
        if result.state_epoch < 0 and result.start_offset < 0:
            return None
        batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                   b.delivery_count) for b in result.state_batches)
        return ShareState(result.state_epoch, 0, result.start_offset, batches, 0, 0)

    async def write(self, partition: int, key: ShareKey, *, state_epoch: int,
                    leader_epoch: int, start_offset: int, batches: Sequence[StateBatch]
                    ) -> tuple[int, str | None]:
        result = await self._ask(partition, WRITE_SHARE_GROUP_STATE, key[0], key, {
            "state_epoch": state_epoch, "leader_epoch": leader_epoch,
            "start_offset": start_offset, "delivery_complete_count": -1,
            "state_batches": _batches(batches)})
        return int(result.error_code), result.error_message

    async def delete(self, partition: int, key: ShareKey) -> None:
        result = await self._ask(partition, DELETE_SHARE_GROUP_STATE, key[0], key, {})
        if result.error_code:
            raise CoordinatorUnavailable(int(result.error_code), result.error_message or "")

    async def close(self) -> None:
        await self._peers.close()
