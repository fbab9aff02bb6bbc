"""What a fetch asks of a partition and what a read of it gives back: shared by the
fetch handler (consumers' reads, the response's encoding) and the replica manager
(followers' reads on a leader)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.storage.log import BytesRegion, FileRegion
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.server.replication.partition import Partition

# (topic, partition, fetch offset, partition max bytes): what one partition asks for
Wanted = tuple[str, int, int, int]
# Partitions refused before reading (epoch or authorization): (topic, partition) -> code.
Refused = dict[tuple[str, int], int]
# KIP-392: partitions the consumer should fetch from another replica -> its broker id.
Preferred = dict[tuple[str, int], int]
# A consumer's read of a partition this broker follows (None: not a follower of it).
Following = Callable[[str, int], "Partition | None"]
# A follower's read on its leader (Topology.read_for_follower): replica id, wanted,
# max bytes, the request's leader epochs and log starts, the quota wait (out), the
# partitions left unread for want of room (out).
ReadForFollower = Callable[
    [int, list[Wanted], int, dict[tuple[str, int], int], dict[tuple[str, int], int],
     "list[float] | None", "list[tuple[str, int]] | None"],
    "tuple[list[PartitionResult], int]"]


@dataclass(slots=True)
class PartitionResult:
    topic: str
    partition: int
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    region: FileRegion | BytesRegion | None  # bytes: read from the remote tier
    # read_committed: the aborted transactions of what is returned (None: not asked)
    aborted: list[AbortedTxn] | None = None
    preferred_replica: int = -1  # KIP-392: fetch from this broker instead (-1: none)
