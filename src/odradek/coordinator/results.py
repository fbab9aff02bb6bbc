"""What the group coordinator hands back: response values (with kio's ``ErrorCode``s), and
``Effects`` — the records to append to ``__consumer_offsets`` and the responses that may
be sent once they are appended ("decide, then act").

Responses are plain, version-agnostic values; the broker's handlers turn them into the
JoinGroup/SyncGroup/... response of whatever version was asked for.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

UNKNOWN_MEMBER = ""  # JoinGroupRequest.UNKNOWN_MEMBER_ID: "no member id yet"
NO_GENERATION = -1
NO_OFFSET = -1  # OffsetFetch answer for a partition without a committed offset


class Record(NamedTuple):
    """One record for ``__consumer_offsets``: append it to partition
    ``partition_for(group_id)``. ``value`` None is a tombstone."""

    group_id: str
    key: bytes
    value: bytes | None


@dataclass(slots=True)
class Responses:
    """The answers a coordinator call produced: pairs of the opaque token a request came
    with and its answer. Shared by the group and the transaction coordinators' effects."""

    responses: list[tuple[Any, Any]] = field(default_factory=list)

    def respond(self, token: Any, response: Any) -> None:
        self.responses.append((token, response))

    def response_to(self, token: Any) -> Any:
        """The answer to ``token`` in this outcome, or None (tests and simple callers)."""
        for t, response in self.responses:
            if t == token:
                return response
        return None


@dataclass(slots=True)
class Effects(Responses):
    """The outcome of one call: append ``records`` (in order), then send ``responses``.

    ``responses`` may hold answers to requests that were parked by earlier calls
    (JoinGroup waiting for the rebalance, SyncGroup waiting for the leader's
    assignment)."""

    records: list[Record] = field(default_factory=list)
    # TxnOffsetCommit (KIP-98): (producer id, producer epoch) when ``records`` belong to
    # that producer's transaction. They are then appended as one transactional batch of
    # that producer, and count only once its COMMIT marker follows them in the log.
    transactional: tuple[int, int] | None = None
    # Share groups (share_group.py): (group id, member id) of members that left or were
    # removed, whose acquired records the share partitions release; groups deleted,
    # whose share partitions go; and the share partitions (group id, topic id,
    # partition) whose durable state goes (their group or topic deleted).
    share_members_left: list[tuple[str, str]] = field(default_factory=list)
    share_groups_deleted: list[str] = field(default_factory=list)
    share_states_deleted: list[tuple[str, uuid.UUID, int]] = field(default_factory=list)


class JoinMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error_code: int
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = UNKNOWN_MEMBER
    # Only the leader gets the members (with their metadata for the chosen protocol).
    members: list[JoinMember] = field(default_factory=list)
    # JoinGroup v9+ (KIP-814): the leader of a stable group is told not to run its assignor.
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error_code: int


class MemberIdentity(NamedTuple):
    """A member named in a LeaveGroup request (by member id, or by group.instance.id
    with member id "")."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


class LeaveMemberResult(NamedTuple):
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error_code: int
    members: list[LeaveMemberResult] = field(default_factory=list)


class PartitionResult(NamedTuple):
    topic: str
    partition: int
    error_code: int


@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    partitions: list[PartitionResult]


class OffsetCommitRequestPartition(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


class FetchedOffset(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error_code: int = ErrorCode.none


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error_code: int
    partitions: list[FetchedOffset]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error_code: int
    # Empty when there is a group-level error, as in Kafka.
    partitions: list[PartitionResult] = field(default_factory=list)


class DeletedGroup(NamedTuple):
    group_id: str
    error_code: int


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    groups: list[DeletedGroup]


class GroupOverview(NamedTuple):
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # ListGroups v5: "consumer" for KIP-848 groups


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # empty unless the group is Stable
    assignment: bytes  # empty unless the group is Stable


@dataclass(frozen=True, slots=True)
class GroupDescription:
    error_code: int
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: list[MemberDescription] = field(default_factory=list)


# --- KIP-848 consumer groups -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResult:
    """ConsumerGroupHeartbeat's answer. ``assignment`` (topic id -> partitions) is None
    when the member's assignment is unchanged and it did not send a full request."""

    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[uuid.UUID, list[int]] | None = None


class DescribedPartitions(NamedTuple):
    topic_id: uuid.UUID
    topic_name: str
    partitions: list[int]


class ConsumerMemberDescription(NamedTuple):
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: list[DescribedPartitions]
    target_assignment: list[DescribedPartitions]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    error_code: int
    group_id: str
    error_message: str | None = None
    state: str = ""  # of a group not described (an error): the schema's default, as Kafka
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[ConsumerMemberDescription] = field(default_factory=list)
