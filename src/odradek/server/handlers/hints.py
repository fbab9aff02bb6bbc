"""What a data-path answer says beyond its results: each topic's id (KIP-516), and for a
partition refused because this broker does not lead it, where its leader is now (KIP-951:
a CurrentLeader per partition and the NodeEndpoints of those leaders, Fetch v16+ and
Produce v10+), so that a client moves to the new leader without asking Metadata first.

Fetch and Produce encode their answers by hand (handlers/fetch.py, handlers/produce.py);
this is the one place both ask the broker for those names and the one encoding of the
parts they share.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from odradek.protocol.framing import encode_uvarint
from odradek.server.handlers.metadata import brokers
from odradek.server.topic_ids import id_for, is_unknown

if TYPE_CHECKING:
    from odradek.protocol.codec import Request
    from odradek.server.broker import Broker

# A partition's tagged section holding one CurrentLeader (LeaderIdAndEpoch): the field
# count (1), its tag (Fetch 1, Produce 0), its size (9): the leader id, its epoch and the
# struct's own (empty) tagged fields.
_CURRENT_LEADER = struct.Struct(">bbbiib")
_I32 = struct.Struct(">i")


class AnswerNames:
    """A request's view of the names its answer gives: topic ids and current leaders."""

    __slots__ = ("broker", "request")

    def __init__(self, broker: Broker, request: Request) -> None:
        self.broker = broker
        self.request = request

    def topic_id(self, name: str) -> bytes:
        """The 16 bytes of the topic's id (an unknown id's own, the zero id for a name
        no longer known)."""
        metadata = self.broker.metadata
        assert metadata is not None
        return id_for(metadata, name).bytes

    def current_leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch); -1 for what is not known."""
        if is_unknown(topic):
            return -1, -1
        view = self.broker.topology.partition_view(topic, partition)
        return view.leader, view.leader_epoch

    def endpoints(self, node_ids: set[int]) -> list[dict[str, Any]]:
        """Those nodes' endpoints on the listener the request came in on."""
        return [b for b in brokers(self.broker, self.request) if b["node_id"] in node_ids]


def current_leader_field(tag: int, leader: int, epoch: int) -> bytes:
    """A partition's tagged section with its CurrentLeader under ``tag``; empty when
    neither is known, as Kafka leaves a tagged field at its default (-1, -1) out."""
    if leader < 0 and epoch < 0:
        return b"\x00"
    return _CURRENT_LEADER.pack(1, tag, 9, leader, epoch, 0)


def node_endpoints_section(nodes: list[dict[str, Any]]) -> bytes:
    """A response's tagged section holding NodeEndpoints (tag 0 in Fetch and Produce):
    each leader named in a CurrentLeader, with its host, port and rack."""
    field = [encode_uvarint(len(nodes) + 1)]
    for n in nodes:
        host = n["host"].encode()
        rack = n["rack"]
        field += [_I32.pack(n["node_id"]), encode_uvarint(len(host) + 1), host,
                  _I32.pack(n["port"])]
        if rack is None:
            field.append(b"\x00")
        else:
            raw = rack.encode()
            field += [encode_uvarint(len(raw) + 1), raw]
        field.append(b"\x00")  # the endpoint's tagged fields
    data = b"".join(field)
    return b"\x01\x00" + encode_uvarint(len(data)) + data  # one field: tag 0, its size, it
