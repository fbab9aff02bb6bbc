"""KIP-890 across brokers: before a partition leader here writes the first batch of a
transaction whose coordinator is another broker, it asks that coordinator whether the
transaction holds the partition (AddPartitionsToTxn v5, verify only, over the
inter-broker listener: Kafka's AddPartitionsToTxnManager), or, for a transaction
version 2 client, has it add the partition (not verify only); a group coordinator does
the same for a TxnOffsetCommit v5's offsets partition. A batch the coordinator
does not vouch for would open a transaction no marker ever ends (a hanging transaction,
holding read_committed consumers at its first offset forever).

The answers are the coordinator's codes; the produce handler maps them
(``coordinator.transaction_errors.produce_verification_error``): a coordinator that cannot be
reached or is moving is NOT_ENOUGH_REPLICAS, which producers retry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.client.aio import KafkaClientError
from odradek.client.codec import ADD_PARTITIONS_TO_TXN
from odradek.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.server.cluster.peers import PeerConnections

if TYPE_CHECKING:
    from odradek.server.cluster.node import ClusterNode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
VERIFY_VERSIONS = {ADD_PARTITIONS_TO_TXN: (5, 5)}  # the brokers' form that knows KIP-890


class TxnVerifier:
    """A cluster node's verifications with transaction coordinators elsewhere."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self._peers = PeerConnections(node, "txn-verification", VERIFY_VERSIONS)

    async def ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                  partitions: Sequence[TopicPartition], *, add: bool
                  ) -> dict[TopicPartition, int]:
        """The coordinator's code for each partition: NONE if the producer's open
        transaction holds it (or, ``add``, now does: transaction version 2)."""
        txns = self.node.broker.transactions
        leader = None if txns is None else self.node.metadata.leader(
            TRANSACTION_STATE_TOPIC, txns.partition_for(transactional_id))
        if leader is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        coordinator = leader.node_id
        topics: dict[str, list[int]] = {}
        for topic, p in partitions:
            topics.setdefault(topic, []).append(p)
        try:
            conn = await self._peers.get(coordinator)
            answer = await conn.request(ADD_PARTITIONS_TO_TXN, {"transactions": [{
                "transactional_id": transactional_id, "producer_id": producer_id,
                "producer_epoch": producer_epoch, "verify_only": not add,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]})
        except KafkaClientError as exc:
            log.info("verifying %r with broker %d: %s", transactional_id, coordinator, exc)
            await self._peers.drop(coordinator)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if answer.error_code:
            return dict.fromkeys(partitions, int(answer.error_code))
        codes = {(t.name, p.partition_index): int(p.partition_error_code)
                 for result in answer.results_by_transaction for t in result.topic_results
                 for p in t.results_by_partition}
        # A partition the answer left out was not verified.
        return {tp: codes.get(tp, ErrorCode.invalid_txn_state) for tp in partitions}

    async def close(self) -> None:
        await self._peers.close()
