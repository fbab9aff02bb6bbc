"""Leader balance after a restart (issue 16): with ``auto.leader.rebalance.enable``, the
controller checks every ``leader.imbalance.check.interval.seconds`` whether brokers lead
less than their share of the partitions they are the preferred (first) replica of, and
gives those leaderships back (Kafka's checkAndTriggerAutoLeaderRebalance). A broker
stopped (its leaderships move to the other replicas) and started again gets them back by
itself once it has caught up, while an idempotent acks=all producer writes throughout
and loses nothing: the move costs it retriable errors at most, which librdkafka retries
without its application seeing them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_processes import Cluster, run_cluster
from tests.faults.workload import check, longest_ack_gap, start_producer, stop_producers
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

TOPIC = "balanced"
PARTITIONS = 3
CHECK_INTERVAL_S = 3
# "By itself within a few check intervals": the check runs every CHECK_INTERVAL_S, the
# election it triggers is one write per partition; the slack is for a loaded 2-CPU
# machine, not for the mechanism.
REBALANCE_WITHIN_S = 4 * CHECK_INTERVAL_S + 10
WAIT_S = 90.0


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path, **{
            "leader.imbalance.check.interval.seconds": CHECK_INTERVAL_S}) as running:
        yield running


def test_leadership_returns_to_the_preferred_replica_by_itself_after_a_restart(
        cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, 3, **{"min.insync.replicas": "2"})
    preferred = {p: r[0] for p, r in cluster.replicas(TOPIC).items()}
    # The placement spreads preferred leaders: one partition per broker.
    assert sorted(preferred.values()) == sorted(cluster.brokers), preferred
    cluster.wait_for(lambda: cluster.led_by_preferred(TOPIC), WAIT_S, "preferred leaders")
    run = start_producer(cluster.bootstrap, TOPIC, PARTITIONS, "balance")
    try:
        time.sleep(2)  # records flowing before the restart
        victim = preferred[0]
        cluster.stop_broker(victim)  # controlled shutdown: its leadership moves to the others
        assert cluster.leader(TOPIC, 0) not in (victim, -1)
        time.sleep(2)  # it falls behind
        epoch_away = cluster.state(TOPIC, 0)["leader_epoch"]  # type: ignore[index]
        cluster.start_broker(victim)
        cluster.wait_for_full_isr(TOPIC, PARTITIONS, WAIT_S)  # caught up
        caught_up = time.monotonic()
        cluster.wait_for(lambda: cluster.led_by_preferred(TOPIC), REBALANCE_WITHIN_S,
                         f"partition 0's leadership back on broker {victim} within "
                         f"{REBALANCE_WITHIN_S} s of its catching up "
                         f"(checked every {CHECK_INTERVAL_S} s)")
        back_after = time.monotonic() - caught_up
        # A controller's election (a new epoch), not a leadership that never moved.
        assert cluster.state(TOPIC, 0)["leader_epoch"] > epoch_away  # type: ignore[index]
        time.sleep(2)  # writes go on to the preferred leader
    finally:
        stop_producers(run)
    gap, gap_partition = longest_ack_gap(run)
    report = check(cluster.bootstrap, run)
    print(f"\nleader balance: leadership back {back_after:.1f} s after the ISR was full; "
          f"{report.acked} acknowledged, longest gap between acknowledgements of a "
          f"partition {gap * 1000:.0f} ms (partition {gap_partition}); errors {report.errors}")
    report.assert_consistent()
    assert report.errors == {}, report.errors  # no record failed: retriable errors retried
    assert report.acked >= 500, report
    cluster.stop_all_and_compare_replicas(TOPIC, PARTITIONS)
