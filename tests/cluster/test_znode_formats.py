"""The znode parsers (cluster/state.py) on what Kafka and Odradek write, and on what
they must refuse: every malformed znode raises ZnodeFormatError (a ValueError) with a
message naming what was wrong, never KeyError, TypeError, AttributeError, IndexError,
UnicodeDecodeError, binascii.Error or OverflowError (issue 21; the fuzz tier's
``znodes`` target feeds them arbitrary bytes)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from odradek.cluster import state as zk
from odradek.cluster.state import BrokerInfo, PartitionState, TopicAssignment, ZnodeFormatError

TOPIC_ID = uuid.UUID("7b3f8c2e-0d1a-4f5e-9a6b-2c3d4e5f6a7b")


# --- what Kafka writes still parses as before --------------------------------------------


def test_kafka_written_znodes_parse() -> None:
    broker = BrokerInfo.from_json(3, (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
        b'"endpoints":["PLAINTEXT://h3:9092","SSL://h3:9093"],"rack":"r1","jmx_port":-1,'
        b'"features":{},"host":"h3","timestamp":"1700000000000","port":9092,"version":5}'), 7)
    assert broker == BrokerInfo(3, "h3", 9092, "r1", 7, (("PLAINTEXT", "PLAINTEXT", "h3", 9092),
                                                        ("SSL", "SSL", "h3", 9093)))
    # Kafka writes host null and port -1 when there is no PLAINTEXT listener.
    ssl_only = BrokerInfo.from_json(1, b'{"endpoints":["SSL://[::1]:9093"],"host":null,'
                                       b'"port":-1,"listener_security_protocol_map":'
                                       b'{"SSL":"SSL"},"version":4}')
    assert (ssl_only.host, ssl_only.port) == ("[::1]", 9093)
    topic = TopicAssignment.from_json("t", b'{"version":1,"partitions":{"1":[2,1],"0":[1,2]}}')
    assert topic.replicas == ((1, 2), (2, 1))
    assert topic.topic_id == uuid.uuid5(uuid.NAMESPACE_URL, "odradek-topic:t")
    state = PartitionState.from_json(
        b'{"controller_epoch":4,"leader":1,"version":1,"leader_epoch":2,"isr":[1,2]}', 9)
    assert state == PartitionState(1, 2, (1, 2), 4, -1, 9)
    assert zk.controller_from_json(
        b'{"version":2,"brokerid":2,"timestamp":"1","kraftControllerEpoch":-1}') == 2
    assert zk.producer_id_block_from_json(
        b'{"version":1,"broker":0,"block_start":"1000","block_end":"1999"}') == (1000, 1999)
    assert zk.cluster_id_from_json(b'{"version":"1","id":"q0HE0WQfRxGpw6x8d5ue5Q"}') == (
        "q0HE0WQfRxGpw6x8d5ue5Q")
    assert zk.config_from_json(b'{"version":1,"config":{"retention.ms":"1000"}}') == {
        "retention.ms": "1000"}
    assert zk.controller_epoch_from_json(b"12") == 12


def test_what_odradek_writes_round_trips() -> None:
    broker = BrokerInfo(1, "h1", 9092, None, 5, (("PLAINTEXT", "PLAINTEXT", "h1", 9092),))
    assert BrokerInfo.from_json(1, broker.to_json(0), 5) == broker
    topic = TopicAssignment("t", TOPIC_ID, ((1, 2, 3), (2, 3)), {0: (3,)}, {0: (1,)})
    assert TopicAssignment.from_json("t", topic.to_json()) == topic
    state = PartitionState(2, 5, (2, 3), 7, 1 << 40, 3)
    assert PartitionState.from_json(state.to_json(), 3) == state
    assert zk.controller_epoch_from_json(zk.controller_epoch_to_json(41)) == 41
    assert zk.producer_id_block_from_json(zk.producer_id_block_to_json(1, 0, 999)) == (0, 999)
    # Empty znodes mean "none", as before.
    assert zk.config_from_json(b"") == {} and zk.config_from_json(None) == {}
    assert zk.controller_from_json(b"") == -1 and zk.producer_id_block_from_json(b"") is None


# --- what is refused, and how -------------------------------------------------------------

PARSERS: dict[str, Callable[[bytes], object]] = {
    "broker": lambda raw: BrokerInfo.from_json(1, raw),
    "topic": lambda raw: TopicAssignment.from_json("t", raw),
    "state": lambda raw: PartitionState.from_json(raw, 0),
    "config": zk.config_from_json,
    "producer ids": zk.producer_id_block_from_json,
    "cluster id": zk.cluster_id_from_json,
    "controller": zk.controller_from_json,
    "controller epoch": zk.controller_epoch_from_json,
}

MALFORMED = [
    # (parser, bytes, a word the message must hold); each raised another type before.
    ("broker", b'{"host":"h","port":"x"}', "port"),  # ValueError from int()
    ("broker", b"{}", "endpoints"),  # IndexError: no host, no endpoints
    ("broker", b'{"endpoints":[5]}', "endpoints"),  # AttributeError: int.partition
    ("broker", b'{"endpoints":["PLAINTEXT://h:1"],"listener_security_protocol_map":[1]}',
     "listener_security_protocol_map"),  # AttributeError: list.get
    ("broker", b'{"host":"h","port":70000}', "port"),
    ("broker", b'{"host":"h","port":1e400}', "port"),  # OverflowError: int(inf)
    ("topic", b'{"topic_id":"!!!!","partitions":{}}', "topic_id"),  # binascii.Error
    ("topic", b'{"topic_id":"AAAA","partitions":{}}', "topic_id"),  # not 16 bytes
    ("topic", b'{"topic_id":7,"partitions":{}}', "topic_id"),  # TypeError
    ("topic", b'{"partitions":{"1":[1]}}', "partitions"),  # KeyError: no partition 0
    ("topic", b'{"partitions":[[1]]}', "partitions"),  # AttributeError / KeyError
    ("topic", b'{"partitions":{"0":5}}', "partitions.0"),  # TypeError: int not iterable
    ("topic", b'{"partitions":{"0":[1]},"adding_replicas":{"x":[2]}}', "adding_replicas"),
    ("topic", b'{"partitions":{"0":[1]},"adding_replicas":{"9":[2]}}', "adding_replicas"),
    ("state", b'{"leader":1,"leader_epoch":0}', "isr"),  # KeyError
    ("state", b'{"leader":null,"leader_epoch":0,"isr":[]}', "leader"),  # TypeError
    ("state", b'{"leader":1,"leader_epoch":0,"isr":[1.5]}', "isr"),
    ("state", b'{"leader":1,"leader_epoch":99999999999,"isr":[1]}', "leader_epoch"),
    ("state", b'{"leader":1,"leader_epoch":0,"isr":[true]}', "isr"),
    ("state", b"\xff\xfe", "UTF-8"),  # UnicodeDecodeError
    ("state", b"[" * 100_000, "JSON"),  # RecursionError
    ("state", b'{"leader":' + b"9" * 5000 + b"}", "JSON"),  # int() digit limit
    ("config", b'{"config":[1]}', "config"),  # AttributeError: list.items
    ("config", b'{"config":{"a":{"b":1}}}', "config.a"),
    ("config", b"[]", "object"),
    ("producer ids", b'{"block_start":"a","block_end":"1"}', "block_start"),
    ("producer ids", b'{"block_start":"5","block_end":"1"}', "block"),
    ("producer ids", b'{"block_end":"1"}', "block_start"),  # KeyError
    ("cluster id", b'{"version":"1"}', "id"),  # KeyError
    ("cluster id", b'{"id":["a"]}', "id"),
    ("controller", b'{"brokerid":"x"}', "brokerid"),
    ("controller", b'"just a string"', "object"),
    ("controller epoch", b"seven", "number"),  # ValueError from int()
    ("controller epoch", b"\xff", "ASCII"),
    ("controller epoch", b"2147483647", "outside"),  # the next epoch would not fit
    ("controller epoch", b"-3", "number"),
]


@pytest.mark.parametrize(("parser", "raw", "word"), MALFORMED,
                         ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(MALFORMED)])
def test_malformed_znodes_are_refused_with_one_error_naming_the_problem(
        parser: str, raw: bytes, word: str) -> None:
    with pytest.raises(ZnodeFormatError) as caught:
        PARSERS[parser](raw)
    assert word in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert len(str(caught.value)) < 300  # a znode may hold 1 MB: the message stays short


def test_broker_ids_are_ascii_digits_of_an_int32() -> None:
    assert zk.broker_id("12") == 12
    assert [zk.broker_id(n) for n in ("²", "٣", "-1", "", "1a", "99999999999", "2147483648")
            ] == [None] * 7
