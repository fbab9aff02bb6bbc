"""A streams group's state and the coordinator's answers about it (KIP-1071): the group,
its members and target assignment, the broker's group.streams.* settings, and the
results of StreamsGroupHeartbeat and StreamsGroupDescribe. The rules that change them
are ``streams_group.py``'s; the records that persist them ``streams_records.py``'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from odradek.coordinator import streams_descriptions as sd
from odradek.coordinator.consumer_group import MemberState
from odradek.coordinator.group import CommittedOffset
from odradek.coordinator.streams_assignor import Tasks
from odradek.coordinator.streams_topology import (
    ConfiguredTopology,
    InternalTopic,
    Status,
    Topology,
)


class StreamsSettings(NamedTuple):
    """The broker's group.streams.* settings (a group's streams.* configs override the
    first three)."""

    session_timeout_ms: int = 45_000  # group.streams.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.streams.heartbeat.interval.ms
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    max_size: int = 2_147_483_647  # group.streams.max.size
    acceptable_recovery_lag: int = 10_000  # streams.acceptable.recovery.lag
    task_offset_interval_ms: int = 60_000  # streams.task.offset.interval.ms
    # group.streams.topology.description.plugin.class: "" (off) or sd.IN_MEMORY_PLUGIN.
    topology_description_plugin: str = ""


DEFAULT_STREAMS_SETTINGS = StreamsSettings()


@dataclass(slots=True)
class StreamsMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    # Active tasks held, and those to give up (``reconcile``'s names); standby and
    # warm-up tasks are not revoked first.
    assigned: Tasks = field(default_factory=dict)
    pending_revocation: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)
    session_deadline: int | None = None
    rebalance_deadline: int | None = None
    rebalance_deadline_epoch: int = -1

    def tasks(self) -> tuple[Tasks, Tasks, Tasks]:
        return self.assigned, self.standby, self.warmup


@dataclass(slots=True)
class StreamsTarget:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)


class StreamsGroup:
    """One streams group: its topology, epochs, members, target assignment, offsets."""

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.topology: Topology | None = None
        # KIP-1331: the topology epoch whose description the plugin holds (-1 none, -2 a
        # push under way) and the one it refused for good (-1 none).
        self.stored_description_epoch = sd.NONE_STORED
        self.failed_description_epoch = sd.NONE_STORED
        self.configured: ConfiguredTopology | None = None
        # The partition counts of the topology's topics as last configured from: a
        # difference bumps the group epoch.
        self.topic_partitions: dict[str, int] = {}
        self.members: dict[str, StreamsMember] = {}
        self.target: dict[str, StreamsTarget] = {}
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self.state_timestamp: int = now_ms  # when it last became empty
        self.shutdown_requested = False

    @property
    def state(self) -> str:
        """Kafka's StreamsGroupState names."""
        if not self.members:
            return "Empty"
        if self.configured is None or not self.configured.ready:
            return "NotReady"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether the running topology reads ``topic`` (its offsets are in use)."""
        if self.topology is None or not self.members:
            return False
        if self.configured is not None and any(
                topic in ts for ts in self.configured.source_topics.values()):
            return True
        return any(topic in (t.name for t in s.repartition_source_topics)
                   for s in self.topology.subtopologies)

    def active_owned_by_others(self, member_id: str) -> set[tuple[str, int]]:
        """Active tasks another member holds, assigned or still to be revoked."""
        taken: set[tuple[str, int]] = set()
        for mid, m in self.members.items():
            if mid == member_id:
                continue
            for holding in (m.assigned, m.pending_revocation):
                for sid, parts in holding.items():
                    taken.update((sid, p) for p in parts)
        return taken


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatResult:
    """StreamsGroupHeartbeat's answer; the task lists are None when unchanged.
    ``create`` are internal topics the broker is to create (name -> topic)."""

    error_code: int
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # v1's AcceptableRecoveryLag: set on a heartbeat that succeeds, else its default
    # (-1, as Kafka's answers to errors and leaves carry).
    acceptable_recovery_lag: int = -1
    task_offset_interval_ms: int = 0
    statuses: tuple[Status, ...] = ()
    active: Tasks | None = None
    standby: Tasks | None = None
    warmup: Tasks | None = None
    create: dict[str, InternalTopic] = field(default_factory=dict)
    topology_description_required: bool = False  # v1 (KIP-1331)


class StreamsMemberDescription(NamedTuple):
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: dict[str, str]
    assignment: tuple[Tasks, Tasks, Tasks]
    target: tuple[Tasks, Tasks, Tasks]


@dataclass(frozen=True, slots=True)
class StreamsGroupDescription:
    error_code: int
    group_id: str
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    members: list[StreamsMemberDescription] = field(default_factory=list)
    assignor_name: str | None = None  # v1 (KIP-1357)
    # v1 (KIP-1331), when asked for: TopologyDescriptionStatus and the description.
    description_status: int = sd.NOT_REQUESTED
    description: sd.Description | None = None
