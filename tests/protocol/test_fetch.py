"""The hand-written Fetch reader agrees with kio's on every version it reads and refuses
every truncated or inflated request with one error."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from odradek.protocol.fetch import (
    MAX_VERSION,
    MIN_VERSION,
    FetchDecodeError,
    _decode_careful,
    _decode_common,
    decode_fetch,
)
from tests.protocol.test_codec import assert_same, encode_request

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_agrees_with_kio_on_random_requests(version: int, data: st.DataObject,
                                            correlation_id: int) -> None:
    body = data.draw(st.from_type(load_request_schema(1, version)))
    frame = encode_request(body, correlation_id, "consumer-1")
    got_version, got_correlation, client_id, decoded = decode_fetch(frame)
    assert (got_version, got_correlation, client_id) == (version, correlation_id, "consumer-1")
    assert_same(decoded, body)
    # The quick reader either gives up or gives exactly what the careful one gives.
    common = _decode_common(frame)
    assert common is None or common == _decode_careful(frame)


def example(version: int) -> Any:
    schema = load_request_schema(1, version)
    fields = schema.__dataclass_fields__
    topic_cls = fields["topics"].type.__args__[0]
    partition_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]
    partition_args: dict[str, Any] = {"partition": 3, "fetch_offset": 77,
                                      "partition_max_bytes": 1 << 20}
    for name in ("current_leader_epoch", "last_fetched_epoch", "log_start_offset"):
        if name in partition_cls.__dataclass_fields__:
            partition_args[name] = 0
    # v13+ name topics by id (KIP-516)
    named = ({"topic_id": uuid.UUID(int=13)} if "topic_id" in topic_cls.__dataclass_fields__
             else {"topic": "orders"})
    args: dict[str, Any] = {"min_bytes": 1,
                            "max_wait": datetime.timedelta(milliseconds=500),
                            "max_bytes": 1 << 20, "isolation_level": 1,
                            "topics": (topic_cls(**named,
                                                 partitions=(partition_cls(**partition_args),)),)}
    if "replica_id" in fields:  # v15+: a tagged ReplicaState, left out by consumers
        args["replica_id"] = -1
    if "session_id" in fields:
        args.update(session_id=9, session_epoch=2)
        forgotten = fields["forgotten_topics_data"].type.__args__[0]
        old_one = ({"topic_id": uuid.UUID(int=14)} if "topic_id" in named else {"topic": "old"})
        args["forgotten_topics_data"] = (forgotten(**old_one, partitions=(1, 2)),)
    if "rack_id" in fields:
        args["rack_id"] = "rack-a"
    return schema(**args)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_consumers_usual_fetch_takes_the_quick_reader(version: int) -> None:
    body = example(version)
    if "forgotten_topics_data" in body.__dataclass_fields__:
        body = dataclasses.replace(body, forgotten_topics_data=())
    frame = encode_request(body, 5, "rdkafka")
    common = _decode_common(frame)
    assert common is not None
    assert common == _decode_careful(frame)
    assert_same(common[3], body)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_refused(version: int) -> None:
    body = example(version)
    frame = encode_request(body, 5, "client")
    assert_same(decode_fetch(frame)[3], body)
    for cut in range(len(frame)):
        with pytest.raises(FetchDecodeError):
            decode_fetch(frame[:cut])


@pytest.mark.parametrize("version", [4, 12])
def test_a_partition_count_larger_than_the_request_is_refused(version: int) -> None:
    flexible = version >= 12
    header = struct.pack(">hhih", 1, version, 1, 1) + b"c" + (b"\x00" if flexible else b"")
    limits = struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)
    session = struct.pack(">ii", 0, -1) if version >= 7 else b""
    topics = (b"\x02" + b"\x02t" + b"\xff\xff\xff\xff\x0f") if flexible else (
        struct.pack(">i", 1) + b"\x00\x01t" + b"\x7f\xff\xff\xff")
    with pytest.raises(FetchDecodeError, match="claims"):
        decode_fetch(header + limits + session + topics + b"\x00" * 40)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(VERSIONS))
def test_random_bytes_after_a_header_raise_only_the_decode_error(tail: bytes, version: int) -> None:
    with contextlib.suppress(FetchDecodeError):
        decode_fetch(struct.pack(">hhih", 1, version, 1, -1) + tail)
