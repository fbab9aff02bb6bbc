"""Feature versioning (KIP-584) over the wire: ApiVersions lists transaction.version,
share.version (each supported 0-2, finalized 2 on a new broker, as on a new Kafka 4.4
cluster) and streams.version (0-1, finalized 1), UpdateFeatures
changes it all or nothing, and the level outlives a restart (a single node's metadata
file) and reaches every broker of a cluster (ZooKeeper's /feature). Kafka's own answers
are compared in tests/oracle (``seq_features_and_transactions_v2``), kafka-features.sh
runs in tests/interop/test_kafka_tools.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.aio import AsyncBrokerConnection
from odradek.client.wire import WireClient
from odradek.testing import running_broker
from tests.server.memory_cluster import MemoryCluster, with_cluster

HELLO = {"client_software_name": "t", "client_software_version": "1"}


def features(answer: Any) -> tuple[dict[str, tuple[int, int]], dict[str, int], int]:
    """(supported ranges, finalized levels, epoch) of an ApiVersions v4 answer."""
    return ({f.name: (f.min_version, f.max_version) for f in answer.supported_features},
            {f.name: f.max_version_level for f in answer.finalized_features},
            answer.finalized_features_epoch)


def update(level: int, upgrade_type: int = 1, feature: str = "transaction.version",
           validate_only: bool = False) -> dict[str, Any]:
    return {"timeout": 10_000, "validate_only": validate_only, "feature_updates": [
        {"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}]}


def test_update_features_changes_transaction_version_and_it_outlives_a_restart(
        tmp_path: Path) -> None:
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        supported, finalized, epoch = features(c.request(18, 4, HELLO))
        assert supported == {"share.version": (0, 2), "streams.version": (0, 1),
                             "transaction.version": (0, 2)}
        assert finalized == {"share.version": 2, "streams.version": 1,
                             "transaction.version": 2}
        # A downgrade needs a downgrade type; refusals change nothing, all or none.
        refused = c.request(57, 1, update(1))
        assert (refused.error_code, refused.results) == (ErrorCode.invalid_update_version, ())
        both = update(1, upgrade_type=2)
        both["feature_updates"].append({"feature": "no.such.version",
                                        "max_version_level": 1, "upgrade_type": 1})
        assert c.request(57, 1, both).error_code == ErrorCode.invalid_update_version
        assert c.request(57, 1, update(1, 2, validate_only=True)).error_code == 0
        assert features(c.request(18, 4, HELLO))[1:] == (
            {"share.version": 2, "streams.version": 1, "transaction.version": 2}, epoch)

        done = c.request(57, 1, update(1, upgrade_type=2))
        assert done.error_code == 0
        assert [(r.feature, r.error_code) for r in done.results] == [
            ("transaction.version", 0)]
        _, finalized, later = features(c.request(18, 4, HELLO))
        assert finalized == {"share.version": 2, "streams.version": 1,
                             "transaction.version": 1}
        assert later > epoch
        # v0 says a downgrade is allowed with a boolean.
        v0 = {"timeout": 10_000, "feature_updates": [
            {"feature": "transaction.version", "max_version_level": 1,
             "allow_downgrade": False}]}
        assert c.request(57, 0, v0).error_code == 0  # the level it has: no change
        v0["feature_updates"][0]["max_version_level"] = 0
        assert c.request(57, 0, v0).error_code == ErrorCode.invalid_update_version
        # Level 0 takes the feature off the finalized list.
        assert c.request(57, 2, update(0, upgrade_type=2)).error_code == 0
        assert features(c.request(18, 4, HELLO))[1] == {"share.version": 2,
                                                        "streams.version": 1}
        assert c.request(57, 2, update(1)).error_code == 0
    with running_broker(data_dir=str(tmp_path)) as node, WireClient(node.port) as c:
        assert features(c.request(18, 4, HELLO))[1] == {
            "share.version": 2, "streams.version": 1, "transaction.version": 1}
        # ApiVersions v3 cannot list a feature whose minimum is 0 (KAFKA-17011).
        assert c.request(18, 3, HELLO).supported_features == ()


async def _every_broker_sees_it(cluster: MemoryCluster) -> None:
    conn = await AsyncBrokerConnection.open(*cluster.address(1), client_id="test",
                                            timeout_s=30, versions={57: (1, 1)})
    try:
        answer = await conn.request(57, update(1, upgrade_type=2))
        assert answer.error_code == 0
    finally:
        await conn.close()
    await cluster.wait_for(lambda: all(
        b.topology.features().levels == {"share.version": 2, "streams.version": 1,
                                         "transaction.version": 1}
        for b in cluster.running()),
        "every broker to see the new level")
    # A broker started now reads it too.
    await cluster.stop_broker(3)
    broker = await cluster.start_broker(3)
    assert broker.topology.features().levels == {"share.version": 2, "streams.version": 1,
                                                 "transaction.version": 1}
    assert broker.topology.features().epoch == cluster.brokers[1].topology.features().epoch


def test_a_clusters_brokers_all_see_a_feature_update(tmp_path: Path) -> None:
    asyncio.run(with_cluster(tmp_path, _every_broker_sees_it))
