"""Coordinators: pure state machines that decide, and leave acting to the server.

``GroupCoordinator`` (classic consumer groups and their committed offsets) returns
``Effects`` — records for ``__consumer_offsets`` and responses keyed by request tokens;
the server appends the records, then answers. No asyncio, sockets or files here; time
comes in as ``now_ms``.

``TransactionCoordinator`` (transactional ids and their transactions) does the same with
``TxnEffects``: records for ``__transaction_state``, responses, and the transaction
markers the server must write before calling ``markers_written``.

``ShareCoordinator`` (share groups' consumed state, KIP-932) keeps
``__share_group_state``.

``INTERNAL_TOPICS`` names the three internal topics the coordinators own: clients read
them but never write them, and Metadata marks them internal.
"""

from odradek.coordinator import results
from odradek.coordinator.coordinator import GroupCoordinator
from odradek.coordinator.group import GroupState
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for
from odradek.coordinator.results import Effects, Record
from odradek.coordinator.share_records import SHARE_GROUP_STATE_TOPIC
from odradek.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.coordinator.transactions import (
    TransactionCoordinator,
    TxnEffects,
    TxnMarkers,
    TxnRecord,
    TxnState,
)

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "SHARE_GROUP_STATE_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "Effects",
    "GroupCoordinator",
    "GroupState",
    "Record",
    "TransactionCoordinator",
    "TxnEffects",
    "TxnMarkers",
    "TxnRecord",
    "TxnState",
    "partition_for",
    "results",
]
