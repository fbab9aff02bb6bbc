"""KIP-1331's messages, which kio 0.6.5 lacks (protocol/extra_schemas.py), are Kafka
4.4's bytes: the expected hex below was written by Kafka 4.4's generated
StreamsGroupHeartbeatResponseData (v1), StreamsGroupDescribeRequestData and
...ResponseData (v1) and StreamsGroupTopologyDescriptionUpdateRequestData and
...ResponseData (v0), each built with the values below and serialised by a Java snippet
run over the jars in .cache/jvm/lib (by hand: no JVM in this test), and read back."""

from __future__ import annotations

import io
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from odradek.protocol.extra_schemas import load_request_schema, load_response_schema
from odradek.protocol.messages import build

SOURCE = {"name": "KSTREAM-SOURCE-0000000000", "node_type": 1, "source_topics": ["in"],
          "sink_topic": None, "stores": [], "successors": ["KSTREAM-SINK-0000000001"]}
SINK = {"name": "KSTREAM-SINK-0000000001", "node_type": 3, "source_topics": [],
        "sink_topic": "out", "stores": ["s"], "successors": []}
DESCRIPTION = {"subtopologies": [{"subtopology_id": "0", "nodes": [SOURCE, SINK]}],
               "global_stores": [{"source": SOURCE, "processor": SINK}]}

CASES: list[tuple[str, int, int, dict[str, Any], str]] = [
    ("response", 88, 1, {
        "throttle_time": 5, "error_code": 0, "error_message": None, "member_id": "m",
        "member_epoch": 3, "heartbeat_interval": 5000, "task_offset_interval": 60000,
        "acceptable_recovery_lag": 10000, "status": None,
        "active_tasks": [{"subtopology_id": "0", "partitions": [0, 1]}],
        "standby_tasks": [], "warmup_tasks": None, "topology_description_required": True,
        "endpoint_information_epoch": 0, "partitions_by_user_endpoint": None},
     ("00000005000000026d00000003000013880000ea600000000000002710000202300300000000"
     "0000000100010001000000000000")),
    ("request", 89, 1, {"group_ids": ["g"], "include_authorized_operations": False,
                        "include_topology_description": True},
     "020267000100"),
    ("response", 89, 1, {"throttle_time": 0, "groups": [{
        "error_code": 0, "error_message": None, "group_id": "g", "group_state": "Stable",
        "group_epoch": 2, "assignment_epoch": 2,
        "topology": {"epoch": 0, "subtopologies": None}, "members": [],
        "authorized_operations": -2147483648, "topology_description": DESCRIPTION,
        "topology_description_status": 3, "assignor_name": "sticky"}]},
     ("0000000002000000026707537461626c65000000020000000201000000000000018000000001"
     "020230031a4b53545245414d2d534f555243452d30303030303030303030010203696e000102"
     "184b53545245414d2d53494e4b2d3030303030303030303100184b53545245414d2d53494e4b"
     "2d303030303030303030310301046f7574020273010000021a4b53545245414d2d534f555243"
     "452d30303030303030303030010203696e000102184b53545245414d2d53494e4b2d30303030"
     "30303030303100184b53545245414d2d53494e4b2d303030303030303030310301046f757402"
     "0273010000000307737469636b790000")),
    ("request", 93, 0, {"group_id": "g", "member_id": "m", "topology_epoch": 0,
                        "topology_description": DESCRIPTION},
     ("0267026d00000000020230031a4b53545245414d2d534f555243452d30303030303030303030"
     "010203696e000102184b53545245414d2d53494e4b2d3030303030303030303100184b535452"
     "45414d2d53494e4b2d303030303030303030310301046f7574020273010000021a4b53545245"
     "414d2d534f555243452d30303030303030303030010203696e000102184b53545245414d2d53"
     "494e4b2d3030303030303030303100184b53545245414d2d53494e4b2d303030303030303030"
     "310301046f75740202730100000000")),
    ("response", 93, 0, {"throttle_time": 0, "error_code": 134, "error_message": "x"},
     "000000000086027800"),
]


@pytest.mark.parametrize(("kind", "api_key", "version", "data", "expected"), CASES,
                         ids=[f"{c[1]}v{c[2]}-{c[0]}" for c in CASES])
def test_kip1331_messages_are_kafkas_bytes(kind: str, api_key: int, version: int,
                                           data: dict[str, Any], expected: str) -> None:
    load = load_request_schema if kind == "request" else load_response_schema
    schema = load(api_key, version)
    message = build(schema, data)
    out = io.BytesIO()
    entity_writer(schema)(out, message)
    assert out.getvalue().hex() == expected
    back, _ = entity_reader(schema)(out.getvalue(), 0)
    assert back == message

