"""ApiVersions v5 (KIP-1242, Kafka 4.4) over the wire: a client names the cluster and the
node it means to reach; this broker answers as Kafka 4.4's KafkaApis does: both or
neither (one alone is INVALID_REQUEST), and if both, this broker's cluster id and
node.id, or REBOOTSTRAP_REQUIRED with no APIs listed. The schema is Odradek's own (kio
0.6.5 stops at v4: protocol/extra_schemas.py). Kafka's own answers are compared in
tests/oracle (``seq_kafka44_versions``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.wire import WireClient
from odradek.testing import running_broker

HELLO = {"client_software_name": "t", "client_software_version": "1"}


def versions(answer: Any) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def test_v5_checks_the_cluster_and_node_a_client_names():
    with running_broker(**{"node.id": 3}) as node, WireClient(node.port) as c:
        # Naming neither: the same answer as v4, now listing v5 and the other two
        # versions kio lacks (TxnOffsetCommit v6, DeleteGroups v3).
        plain = c.request(18, 5, HELLO)
        assert plain.error_code == ErrorCode.none
        served = versions(plain)
        assert served[18] == (0, 5) and served[28] == (0, 6) and served[42] == (0, 3)
        assert served == versions(c.request(18, 4, HELLO))
        assert {f.name for f in plain.supported_features} == {
            "share.version", "streams.version", "transaction.version"}
        cluster_id = c.request(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False}
                               ).cluster_id
        assert cluster_id

        # Naming this broker: the full answer.
        mine = c.request(18, 5, {**HELLO, "cluster_id": cluster_id, "node_id": 3})
        assert mine.error_code == ErrorCode.none and versions(mine) == served

        # Another node of this cluster, or this node id in another cluster: the client
        # must rebootstrap; nothing is listed, and the connection stays usable.
        for cluster, node_id in ((cluster_id, 4), ("another-cluster", 3)):
            wrong = c.request(18, 5, {**HELLO, "cluster_id": cluster, "node_id": node_id})
            assert wrong.error_code == ErrorCode.rebootstrap_required
            assert (wrong.api_keys, wrong.supported_features, wrong.finalized_features,
                    wrong.finalized_features_epoch) == ((), (), (), -1)

        # One without the other: INVALID_REQUEST, checked before the match.
        for half in ({"cluster_id": cluster_id}, {"node_id": 3}, {"node_id": 0}):
            refused = c.request(18, 5, {**HELLO, **half})
            assert refused.error_code == ErrorCode.invalid_request, half
            assert refused.api_keys == ()

        # v4 has no such fields: nothing is checked.
        assert c.request(18, 4, HELLO).error_code == ErrorCode.none
        assert c.request(18, 0, {}).error_code == ErrorCode.none


def test_v3_refuses_a_client_software_name_or_version_outside_kip_511s_pattern():
    with running_broker() as node, WireClient(node.port) as c:
        for name, version, code in (("confluent-kafka-python", "2.16.1-rdkafka-2.16.0", 0),
                                    ("apache-kafka-java", "4.4.0", 0),
                                    ("my client", "1.0", ErrorCode.invalid_request),
                                    ("client", "1.0+local", ErrorCode.invalid_request),
                                    ("client", "", ErrorCode.invalid_request),
                                    ("-client", "1", ErrorCode.invalid_request)):
            answer = c.request(18, 3, {"client_software_name": name,
                                       "client_software_version": version})
            assert answer.error_code == code, (name, version)
            assert bool(answer.api_keys) == (code == 0)
        assert c.request(18, 2, {}).error_code == ErrorCode.none  # no names before v3
