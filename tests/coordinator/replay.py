"""What of a coordinator's state the log must reproduce: offsets always; group metadata
for groups at rest (Stable or Empty) — a group mid-rebalance replays as its last stored
generation, as in Kafka."""

from __future__ import annotations

from typing import Any

from odradek.coordinator import GroupCoordinator, GroupState
from odradek.coordinator.results import Record


def replay(records: list[Record], now_ms: int, **config: Any) -> GroupCoordinator:
    restarted = GroupCoordinator(**config)
    for record in records:
        restarted.load(record.key, record.value)
    restarted.finish_load(now_ms)
    return restarted


def persisted_view(coordinator: GroupCoordinator) -> dict[str, dict[str, Any]]:
    view: dict[str, dict[str, Any]] = {}
    for group_id, g in coordinator.groups.items():
        at_rest = g.state in (GroupState.STABLE, GroupState.EMPTY)
        if not g.offsets and (g.generation_id == 0 or not at_rest):
            continue  # nothing written yet, or only a generation that is being replaced
        entry: dict[str, Any] = {
            "offsets": {
                key: (o.offset, o.leader_epoch, o.metadata, o.commit_timestamp, o.expire_timestamp)
                for key, o in g.offsets.items()
            }
        }
        if at_rest:
            protocol = g.protocol_name
            entry["group"] = (
                g.state, g.generation_id, g.protocol_type, protocol, g.leader_id,
                # The time an Empty group emptied is the base of its offsets' expiry.
                g.state_timestamp if g.is_(GroupState.EMPTY) and g.protocol_type else None,
                [
                    (m.member_id, m.group_instance_id, m.client_id, m.client_host,
                     m.rebalance_timeout_ms, m.session_timeout_ms,
                     m.metadata(protocol) if protocol else None, m.assignment)
                    for m in g.members.values()
                ],
            )
        view[group_id] = entry
    return view


def assert_replay_matches(live: GroupCoordinator, records: list[Record], now_ms: int) -> None:
    restarted = persisted_view(replay(records, now_ms))
    current = persisted_view(live)
    gone = set(restarted) - set(live.groups)
    assert not gone, f"replay resurrects {gone}"
    for group_id, entry in current.items():
        assert group_id in restarted, f"group {group_id} lost by replay"
        assert restarted[group_id]["offsets"] == entry["offsets"], group_id
        if "group" in entry:
            assert restarted[group_id].get("group") == entry["group"], group_id
