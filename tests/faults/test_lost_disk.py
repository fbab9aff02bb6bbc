"""The runbook's "a broker lost its disk" (docs/operations.md): the broker is started
again with the same node.id on an empty data directory, copies every replica back from
the leaders, and rejoins every ISR; nothing acknowledged is lost."""

from __future__ import annotations

import shutil

import pytest

from tests.cluster_processes import Cluster
from tests.faults.workload import check, start_producer, stop_producers

pytestmark = pytest.mark.slow


def test_a_broker_that_lost_its_disk_copies_its_replicas_back(cluster: Cluster) -> None:
    cluster.create_topic("kept", partitions=2, rf=3, **{"min.insync.replicas": "2"})
    cluster.wait_for_full_isr("kept", 2)
    run = start_producer(cluster.bootstrap, "kept", 2, "p", payload_bytes=200)
    cluster.wait_for(lambda: len(run.acked) > 300, 60, "records acknowledged")
    cluster.kill(3)
    shutil.rmtree(cluster.brokers[3].data_dir)  # the disk is gone, and replaced
    cluster.wait_for(lambda: all(3 not in cluster.isr("kept", p) for p in range(2)), 30,
                     "broker 3 out of the ISR")
    cluster.start_broker(3)
    cluster.wait_for_full_isr("kept", 2, timeout_s=90)
    stop_producers(run)
    report = check(cluster.bootstrap, run)
    report.assert_consistent()
    cluster.stop_all_and_compare_replicas("kept", 2)
