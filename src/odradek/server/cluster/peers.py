"""Connections from this broker to the other brokers for one purpose (transaction
markers, transaction verification): one per broker over the inter-broker listener, made
when first needed, dropped after a failure (the next request opens a new one) and closed
at the node's stop. Replication's fetchers keep their own (server/replication).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from odradek.client.aio import AsyncBrokerConnection

if TYPE_CHECKING:
    from odradek.server.cluster.node import ClusterNode


class PeerConnections:
    """``get(node_id)``: the open connection to that broker for ``purpose``."""

    def __init__(self, node: ClusterNode, purpose: str,
                 versions: dict[int, tuple[int, int]] | None = None) -> None:
        self.node = node
        self.client_id = f"broker-{node.node_id}-{purpose}"
        self.versions = versions
        self._conns: dict[int, AsyncBrokerConnection] = {}
        self._lock = asyncio.Lock()

    async def get(self, node_id: int) -> AsyncBrokerConnection:
        """The connection to broker ``node_id`` (KafkaClientError if it cannot be made;
        KeyError if the broker is not registered)."""
        async with self._lock:
            conn = self._conns.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            info = self.node.metadata.brokers[node_id]
            conn = await self.node.inter_broker.open(
                info.host, info.port, client_id=self.client_id,
                timeout_s=self.node.config["replica.socket.timeout.ms"] / 1000,
                versions=self.versions)
            self._conns[node_id] = conn
            return conn

    async def drop(self, node_id: int) -> None:
        """Forget the connection to ``node_id`` after a failure on it."""
        stale = self._conns.pop(node_id, None)
        if stale is not None:
            await stale.close()

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()
