"""Feature versioning (KIP-584): the versioned behaviours a broker supports and the level
the cluster has finalized for each, listed in ApiVersions (v3+: supported ranges, and the
finalized levels with an epoch that grows with every change) and changed with
UpdateFeatures (``kafka-features.sh upgrade|downgrade``).

Odradek versions three features, Kafka's:

- ``transaction.version`` (KIP-890): level 1 is the partition leaders' verification of
  transactional produces, level 2 an epoch bump at every transaction's end and
  partitions added by the brokers their clients write to (the Java client uses
  transaction version 2 when the finalized level is 2, version 1 below). The broker
  serves both versions whatever the level, as Kafka does: clients choose.
- ``share.version`` (KIP-932): level 1 enables share groups (below it the share-group
  APIs answer UNSUPPORTED_VERSION, as Kafka's do), level 2 also RENEW acknowledgements
  (KIP-1222).
- ``streams.version`` (KIP-1071): level 1 enables streams groups (StreamsGroupHeartbeat
  and StreamsGroupDescribe answer UNSUPPORTED_VERSION below it).

A new cluster finalizes transaction.version 2, share.version 2 and streams.version 1, as
a new Kafka 4.4 cluster does. A data directory or cluster made before share.version
(or streams.version) existed has it at 0: ``kafka-features.sh upgrade --feature
share.version=2`` turns share groups on, as on an upgraded Kafka cluster.

The levels are kept with the cluster's metadata: a single node's in its metadata file
(server/metadata.py), a cluster's in ZooKeeper's ``/feature`` znode, Kafka's
FeatureZNode (server/cluster/metadata.py watches it; any broker writes it).
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"
# name -> (lowest, highest) level this broker supports
SUPPORTED: dict[str, tuple[int, int]] = {
    SHARE_VERSION: (0, 2), STREAMS_VERSION: (0, 1), TRANSACTION_VERSION: (0, 2)}
# What a new cluster finalizes.
DEFAULT_LEVELS: dict[str, int] = {SHARE_VERSION: 2, STREAMS_VERSION: 1, TRANSACTION_VERSION: 2}

# UpdateFeatures' upgrade types (v1+; v0's allow_downgrade is SAFE_DOWNGRADE)
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """The finalized levels (a feature at level 0 is not listed) and their epoch."""

    levels: dict[str, int]
    epoch: int


def check_update(current: dict[str, int], feature: str, level: int,
                 upgrade_type: int) -> tuple[int, str | None]:
    """(error code, message) of one requested change; (0, None) if it may be made. As
    Kafka's FeatureControlManager: a feature this broker does not support, a level out of
    its range, an unknown upgrade type, or a lower level without a downgrade type are
    INVALID_UPDATE_VERSION. ``transaction.version`` keeps no data that a downgrade would
    lose, so a safe downgrade is allowed."""
    supported = SUPPORTED.get(feature)
    if supported is None:
        return (ErrorCode.invalid_update_version,
                f"the broker does not support the feature {feature!r}")
    low, high = supported
    if not low <= level <= high:
        return (ErrorCode.invalid_update_version,
                f"{feature} level {level} is not in the supported range {low}-{high}")
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return ErrorCode.invalid_update_version, f"unknown upgrade type {upgrade_type}"
    if level < current.get(feature, 0) and upgrade_type == UPGRADE:
        return (ErrorCode.invalid_update_version,
                f"{feature} can not be downgraded from {current.get(feature, 0)} to "
                f"{level} without a downgrade type")
    return 0, None


def updated(current: dict[str, int], changes: dict[str, int]) -> dict[str, int]:
    """The levels after ``changes`` (level 0 takes a feature off the finalized list)."""
    levels = {**current, **changes}
    return {name: level for name, level in levels.items() if level > 0}
