"""Producer ids in a cluster: blocks of ids reserved in ZooKeeper
(``/latest_producer_id_block``, Kafka's ZooKeeper-era ProducerIdManager), so that no two
brokers ever hand out the same id. A block is reserved at start and the next one in the
background when half of the current one is used; while none is reserved (ZooKeeper
unreachable, or the znode unreadable), InitProducerId answers "retry".

Owned by the broker's ``ClusterNode`` (``node.producer_ids``); the metadata cache hands
``next_producer_id`` to the transaction runtime and the InitProducerId handler.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from odradek.cluster import state as zk
from odradek.server.cluster.store import BadVersionError, NodeExistsError, NoNodeError, StoreError

if TYPE_CHECKING:
    from odradek.server.cluster.node import ClusterNode

log = logging.getLogger(__name__)

# Producer ids are reserved from ZooKeeper this many at a time (Kafka's block size).
PRODUCER_ID_BLOCK = 1000
# How often a broker retries reserving producer ids while the last block's znode does
# not parse: a few ERROR lines a minute, not one per second.
PRODUCER_ID_FORMAT_RETRY_S = 15.0


class ProducerIdsUnavailable(Exception):
    """No producer id block is reserved right now (ZooKeeper unreachable): retriable."""

    kafka_error = "COORDINATOR_LOAD_IN_PROGRESS"


class ProducerIds:
    """A cluster node's producer id allocator (blocks reserved in ZooKeeper)."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.node_id = node.node_id
        self.store = node.store
        self._pid_block: tuple[int, int] | None = None  # [next, end]
        self._next_block: tuple[int, int] | None = None
        self._pid_fetch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Reserve the first block (the node's start, once the metadata is loaded)."""
        try:
            self._pid_block = await self._reserve_block()
        except zk.ZnodeFormatError as exc:
            # Serve without producer ids (InitProducerId answers "retry") rather than
            # not at all; the background reservation keeps trying.
            log.error("cannot reserve producer ids: %s: %s", zk.PRODUCER_ID_BLOCK_PATH, exc)
            self._prefetch_block()

    @property
    def fetching(self) -> asyncio.Task[None] | None:
        """The background reservation of the next block, while one runs (the node's stop
        cancels it with its own tasks)."""
        return self._pid_fetch

    async def _reserve_block(self) -> tuple[int, int]:
        """Kafka's ZooKeeper-era ProducerIdManager: read the last block handed out, write
        the next one conditionally on the version read; the winner of a race keeps it."""
        while True:
            try:
                data, version = await self.store.get(zk.PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                data, version = b"", -1
            last = zk.producer_id_block_from_json(data)
            start = 0 if last is None else last[1] + 1
            end = start + PRODUCER_ID_BLOCK - 1
            block = zk.producer_id_block_to_json(self.node_id, start, end)
            try:
                if version < 0:
                    await self.store.create(zk.PRODUCER_ID_BLOCK_PATH, block)
                else:
                    await self.store.set(zk.PRODUCER_ID_BLOCK_PATH, block, version)
            except (BadVersionError, NodeExistsError):
                continue
            return start, end

    def next_producer_id(self) -> int:
        """A producer id never handed out by any broker. The next block is reserved in
        the background when half of this one is used."""
        block = self._pid_block
        if block is None or block[0] > block[1]:
            block = self._pid_block = self._next_block
            self._next_block = None
            if block is None:
                self._prefetch_block()
                raise ProducerIdsUnavailable("no producer ids reserved yet; retry")
        pid = block[0]
        self._pid_block = (pid + 1, block[1])
        if self._next_block is None and block[1] - pid < PRODUCER_ID_BLOCK // 2:
            self._prefetch_block()
        return pid

    def _prefetch_block(self) -> None:
        if self._pid_fetch is not None and not self._pid_fetch.done():
            return

        async def fetch() -> None:
            while self._next_block is None and not self.node.stopping:
                try:
                    self._next_block = await self._reserve_block()
                except StoreError as exc:
                    log.warning("cannot reserve producer ids: %s; retrying", exc)
                    await asyncio.sleep(1)
                except zk.ZnodeFormatError as exc:
                    # Handing out ids without knowing the last block could reuse some:
                    # wait for an operator to fix the znode, one ERROR line a while.
                    log.error("cannot reserve producer ids: %s: %s; retrying in %.0f s",
                              zk.PRODUCER_ID_BLOCK_PATH, exc, PRODUCER_ID_FORMAT_RETRY_S)
                    await asyncio.sleep(PRODUCER_ID_FORMAT_RETRY_S)

        self._pid_fetch = asyncio.get_running_loop().create_task(fetch())
