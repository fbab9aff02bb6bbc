"""Coordinators: pure state machines that decide, and leave acting to the server.

``GroupCoordinator`` (classic consumer groups and their committed offsets) returns
``Effects`` — records for ``__consumer_offsets`` and responses keyed by request tokens;
the server appends the records, then answers. No asyncio, sockets or files here; time
comes in as ``now_ms``.
"""

from odradek.coordinator import results
from odradek.coordinator.coordinator import GroupCoordinator
from odradek.coordinator.group import GroupState
from odradek.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for
from odradek.coordinator.results import Effects, Record

__all__ = [
    "OFFSETS_TOPIC",
    "Effects",
    "GroupCoordinator",
    "GroupState",
    "Record",
    "partition_for",
    "results",
]
