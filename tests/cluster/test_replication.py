"""The leader's replication state of a partition: follower progress, the high
watermark, and when the ISR shrinks or grows (Kafka's Partition, with time passed in)."""

from __future__ import annotations

from odradek.cluster.replication import LeaderReplication

LAG_MS = 30_000


def leader(isr: tuple[int, ...] = (1, 2, 3), *, start: int = 10, hw: int = 10,
           now: int = 0) -> LeaderReplication:
    return LeaderReplication(1, (1, 2, 3), isr, 5, epoch_start_offset=start,
                             high_watermark=hw, now_ms=now)


def test_the_high_watermark_is_the_smallest_log_end_in_the_isr() -> None:
    repl = leader()
    assert not repl.advance_high_watermark(20)  # followers' log ends are not known yet
    repl.update_follower(2, 15, 100, 20)
    assert not repl.advance_high_watermark(20)  # follower 3 still unknown
    repl.update_follower(3, 18, 100, 20)
    assert repl.advance_high_watermark(20) and repl.high_watermark == 15
    repl.update_follower(2, 20, 200, 20)
    assert repl.advance_high_watermark(20) and repl.high_watermark == 18


def test_the_high_watermark_never_moves_back() -> None:
    repl = leader(hw=30)
    repl.update_follower(2, 12, 1, 40)
    repl.update_follower(3, 12, 1, 40)
    assert not repl.advance_high_watermark(40)
    assert repl.high_watermark == 30


def test_an_isr_of_one_commits_what_the_leader_has() -> None:
    repl = leader(isr=(1,))
    assert repl.advance_high_watermark(42) and repl.high_watermark == 42


def test_a_follower_is_caught_up_when_it_reaches_the_log_end() -> None:
    repl = leader(now=0)
    repl.update_follower(2, 20, 1_000, 20)
    assert repl.followers[2].last_caught_up_ms == 1_000
    # Behind the current end, but at the end the previous fetch saw: caught up as of then.
    repl.update_follower(2, 20, 5_000, 25)
    repl.update_follower(2, 25, 9_000, 30)
    assert repl.followers[2].last_caught_up_ms == 5_000


def test_lagging_followers_leave_the_isr_after_the_lag_time() -> None:
    repl = leader(now=0)
    repl.update_follower(2, 20, 10_000, 20)
    assert repl.shrink(30_000, LAG_MS) is None
    shrunk = repl.shrink(30_001, LAG_MS)
    assert shrunk == {1, 2}  # 3 was never caught up since the leadership began


def test_a_shrink_counts_only_once_stored_and_an_expansion_at_once() -> None:
    repl = leader()
    repl.update_follower(2, 20, 1, 20)
    repl.update_follower(3, 12, 1, 20)
    repl.advance_high_watermark(20)
    assert repl.high_watermark == 12
    shrunk = frozenset({1, 2})
    repl.begin_isr_change(shrunk)
    assert not repl.advance_high_watermark(20)  # 3 still holds it while pending
    repl.isr_change_stored(shrunk)
    assert repl.advance_high_watermark(20) and repl.high_watermark == 20
    # Follower 3 catches up: it may join, and counts at once.
    repl.update_follower(3, 20, 2, 25)
    grown = repl.expansion(3)
    assert grown == {1, 2, 3}
    repl.begin_isr_change(grown)
    assert 3 in repl.maximal_isr and 3 not in repl.isr


def test_a_follower_joins_only_past_the_start_of_the_leaders_epoch() -> None:
    repl = leader(isr=(1,), start=50, hw=40)
    repl.update_follower(2, 45, 1, 60)  # above the high watermark, below the epoch start
    assert repl.expansion(2) is None
    repl.update_follower(2, 50, 2, 60)
    assert repl.expansion(2) == {1, 2}


def test_no_second_change_while_one_is_being_stored() -> None:
    repl = leader(isr=(1, 2))
    repl.begin_isr_change(frozenset({1}))
    repl.update_follower(3, 100, 1, 10)
    assert repl.expansion(3) is None
    assert repl.shrink(10**9, LAG_MS) is None
    repl.isr_change_failed()
    assert repl.expansion(3) == {1, 2, 3}
