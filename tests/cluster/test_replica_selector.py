"""Fetch from follower (KIP-392): the replica a leader sends a consumer to, by Kafka's
RackAwareReplicaSelector and findPreferredReadReplica rules, and the setting's values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.replica_selector import (
    RACK_AWARE_SELECTOR,
    FollowerInfo,
    ReplicaView,
    check_selector_class,
    preferred_read_replica,
    select_rack_aware,
)
from odradek.server.config import load_config
from odradek.server.settings import ConfigError

NOW = 1_000_000


def follower(broker_id: int, rack: str | None, *, alive: bool = True, in_sync: bool = True,
             start: int = 0, end: int = 100, caught_up: int = NOW) -> FollowerInfo:
    return FollowerInfo(broker_id, rack, alive, in_sync, start, end, caught_up)


def pick(client_rack: str, followers: list[FollowerInfo], *, leader_rack: str | None = "a",
         fetch_offset: int = 50, leader_end: int = 100) -> int | None:
    return preferred_read_replica(client_rack, 1, leader_rack, leader_end, followers,
                                  fetch_offset, NOW)


def test_a_consumer_in_a_followers_rack_is_sent_there() -> None:
    assert pick("b", [follower(2, "b"), follower(3, "c")]) == 2
    assert pick("c", [follower(2, "b"), follower(3, "c")]) == 3


def test_the_leader_serves_consumers_in_its_rack_without_a_rack_or_with_no_replica_there() -> None:
    followers = [follower(2, "a"), follower(3, "b")]
    assert pick("a", followers) is None  # the leader is in rack a: it, not broker 2
    assert pick("", followers) is None
    assert pick("z", followers) is None


def test_only_live_in_sync_followers_holding_the_offset_are_candidates() -> None:
    assert pick("b", [follower(2, "b", alive=False)]) is None
    assert pick("b", [follower(2, "b", in_sync=False)]) is None
    assert pick("b", [follower(2, "b", end=49)]) is None  # has not got offset 50 yet
    assert pick("b", [follower(2, "b", end=50)]) == 2  # at its log end: it waits there
    assert pick("b", [follower(2, "b", start=51)]) is None  # deleted it already
    assert pick("b", [follower(2, "b", start=-1)]) == 2  # log start not known: no bar
    assert pick("b", [follower(2, "b", end=-1)]) is None  # not fetched yet this epoch
    # An excluded follower leaves the others in the rack in the running.
    assert pick("b", [follower(2, "b", in_sync=False), follower(3, "b")]) == 3


def test_in_the_clients_rack_the_most_caught_up_replica_wins_as_kafkas_comparator_says() -> None:
    # Highest log end offset first ...
    assert pick("b", [follower(2, "b", end=90), follower(3, "b", end=95)]) == 3
    # ... then the most recently caught up ...
    assert pick("b", [follower(2, "b", caught_up=NOW - 10),
                      follower(3, "b", caught_up=NOW - 500)]) == 2
    # ... then the highest broker id (the comparator's last key; max picks it).
    assert pick("b", [follower(3, "b"), follower(2, "b")]) == 3


def test_select_rack_aware_is_kafkas_select() -> None:
    leader = ReplicaView(1, "a", 100, 0)
    b2, c3 = ReplicaView(2, "b", 100, 5), ReplicaView(3, "c", 100, 5)
    assert select_rack_aware("", leader, [leader, b2, c3]) is leader
    assert select_rack_aware("a", leader, [leader, b2, c3]) is leader
    assert select_rack_aware("b", leader, [leader, b2, c3]) is b2
    assert select_rack_aware("x", leader, [leader, b2, c3]) is leader


@given(st.lists(st.tuples(st.integers(2, 6), st.sampled_from(["a", "b", "c", None]),
                          st.booleans(), st.booleans(), st.integers(-1, 60),
                          st.integers(-1, 120), st.integers(NOW - 5000, NOW)),
                unique_by=lambda t: t[0], max_size=5),
       st.sampled_from(["", "a", "b", "c"]), st.integers(0, 100))
def test_any_pick_is_a_live_in_sync_follower_in_the_clients_rack_holding_the_offset(
        rows: list[tuple], client_rack: str, offset: int) -> None:
    followers = [FollowerInfo(*row) for row in rows]
    chosen = pick(client_rack, followers, fetch_offset=offset)
    eligible = [f for f in followers if f.alive and f.in_sync and f.rack == client_rack
                and f.log_start_offset <= offset <= f.log_end_offset]
    if client_rack in ("", "a") or not eligible:
        assert chosen is None
        return
    best = max(eligible, key=lambda f: (f.log_end_offset, f.last_caught_up_ms, f.broker_id))
    assert chosen == best.broker_id


def test_the_setting_takes_kafkas_class_name_or_nothing_and_refuses_others(tmp_path) -> None:
    assert check_selector_class("") == ""
    assert check_selector_class(f" {RACK_AWARE_SELECTOR} ") == RACK_AWARE_SELECTOR
    config = load_config(listen="127.0.0.1:0", data_dir=str(tmp_path), environ={},
                         overrides={"replica.selector.class": RACK_AWARE_SELECTOR})
    assert config["replica.selector.class"] == RACK_AWARE_SELECTOR
    assert load_config(listen="127.0.0.1:0", data_dir=str(tmp_path),
                       environ={})["replica.selector.class"] == ""
    with pytest.raises(ConfigError, match=r"replica\.selector\.class.*RackAwareReplicaSelector"):
        load_config(listen="127.0.0.1:0", data_dir=str(tmp_path), environ={},
                    overrides={"replica.selector.class": "com.example.MySelector"})
