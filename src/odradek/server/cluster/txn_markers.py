"""Transaction markers in a cluster: the COMMIT/ABORT markers a transaction coordinator
here has decided, written on each partition's leader — with WriteTxnMarkers to the
brokers that lead them (Kafka's TransactionMarkerChannelManager, one connection per
leader over the inter-broker listener), or appended here where this broker leads
(``write_markers_locally``, also what the WriteTxnMarkers handler reaches for the
markers other brokers send, through ``ClusterNode.append_txn_markers``), retried until
each is written or its partition is gone.

Owned by the broker's ``ClusterNode`` (``node.markers``); the transaction runtime asks
the node (``ClusterNode.write_txn_markers``, the ``Topology`` method).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from odradek.client.aio import KafkaClientError
from odradek.client.codec import WRITE_TXN_MARKERS
from odradek.coordinator import OFFSETS_TOPIC
from odradek.server.cluster.peers import PeerConnections
from odradek.server.errors import error_code

if TYPE_CHECKING:
    from odradek.coordinator.transactions import TxnMarkers
    from odradek.server.cluster.node import ClusterNode
    from odradek.server.replication.partition import Partition

log = logging.getLogger(__name__)

# Retries of a marker write whose partition leader cannot take it yet.
MARKER_RETRY_S = 0.2
# A marker's answers after which it is not sent again: written, or never to be (the
# partition is gone, or a newer producer or coordinator epoch already ended this
# transaction there, as Kafka's TransactionMarkerRequestCompletionHandler decides).
MARKER_DONE = frozenset({ErrorCode.none, ErrorCode.unknown_topic_or_partition,
                         ErrorCode.invalid_producer_epoch,
                         ErrorCode.transaction_coordinator_fenced})


class TxnMarkerWriter:
    """A cluster node's marker writes: to partition leaders elsewhere, or here."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.broker = node.broker
        self.config = node.config
        self.node_id = node.node_id
        self._peers = PeerConnections(node, "txn-markers")

    async def write_txn_markers(self, markers: TxnMarkers) -> None:
        """Write one COMMIT/ABORT marker in every partition of a transaction, each on its
        partition's leader (locally, or with WriteTxnMarkers), retrying until each is
        written or its partition is gone (Kafka's TransactionMarkerChannelManager)."""
        pending = set(markers.partitions)
        while pending:
            if self.node.stopping:
                raise RuntimeError(f"the broker is stopping; markers for producer "
                                   f"{markers.producer_id} not written to {sorted(pending)}")
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(pending):
                if not self.node.metadata.partition_exists(*tp):
                    log.info("no marker for %s-%d: the partition no longer exists", *tp)
                    pending.discard(tp)
                    continue
                state = self.node.metadata.states.get(tp)
                leader = state.leader if state is not None else -1
                by_leader.setdefault(leader, []).append(tp)
            results = await asyncio.gather(*(
                self._markers_to(leader, tps, markers) for leader, tps in by_leader.items()))
            for done in results:
                pending -= done
            if pending:
                await asyncio.sleep(MARKER_RETRY_S)

    async def _markers_to(self, leader: int, tps: list[tuple[str, int]],
                          markers: TxnMarkers) -> set[tuple[str, int]]:
        """The partitions of ``tps`` whose marker ``leader`` wrote."""
        if leader < 0:
            return set()
        if leader == self.node_id:
            codes = await self.write_markers_locally(
                markers.producer_id, markers.producer_epoch, markers.commit,
                markers.coordinator_epoch, tps)
            return {tp for tp, code in codes.items() if code in MARKER_DONE}
        if leader not in self.node.metadata.brokers:
            return set()
        try:
            conn = await self._peers.get(leader)
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            answer = await conn.request(WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": markers.producer_id, "producer_epoch": markers.producer_epoch,
                "transaction_result": markers.commit,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                "coordinator_epoch": markers.coordinator_epoch}]})
        except KafkaClientError as exc:
            log.info("WriteTxnMarkers to broker %d: %s", leader, exc)
            await self._peers.drop(leader)
            return set()
        return {(topic.name, p.partition_index) for result in answer.markers
                for topic in result.topics for p in topic.partitions
                if p.error_code in MARKER_DONE}

    async def write_markers_locally(self, producer_id: int, producer_epoch: int, commit: bool,
                                    coordinator_epoch: int, tps: Sequence[tuple[str, int]]
                                    ) -> dict[tuple[str, int], int]:
        """Append the markers to these partitions where this broker leads them and wait
        until they are replicated (WriteTxnMarkers appends with acks=all); the Kafka
        error code of each partition."""
        codes: dict[tuple[str, int], int] = {}
        waits: list[tuple[Partition, int]] = []
        for tp in tps:
            part = self.node.replicas.leaders.get(tp)
            if part is None:
                codes[tp] = self.broker.missing_partition_error(*tp)
                continue
            try:
                info = part.append_marker_as_leader(producer_id, producer_epoch, commit,
                                                    coordinator_epoch)
            except Exception as exc:
                log.warning("marker for producer %d epoch %d not written to %s-%d: %s",
                            producer_id, producer_epoch, tp[0], tp[1], exc)
                codes[tp] = error_code(exc)
                continue
            if tp[0] == OFFSETS_TOPIC and self.broker.groups is not None:
                self.broker.groups.txn_marker_written(tp[1], producer_id, commit)
            waits.append((part, info.last_offset + 1))
        if waits:
            # Without a timeout, as WriteTxnMarkers' appends in Kafka: the coordinator
            # retries what is not answered; a leadership lost answers at once.
            for (part, _), code in zip(waits, await self.node.replicas.delay_produce(waits, None),
                                       strict=True):
                codes[part.tp] = code
        return codes

    async def close(self) -> None:
        """Close the connections to other brokers (the node's stop)."""
        await self._peers.close()
