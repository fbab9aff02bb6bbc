"""Tiered storage on a 3-broker cluster (a real ZooKeeper, moto's S3 server): the leader
copies, followers delete locally what the store holds, a new leader after a SIGKILL goes
on copying from where the store's metadata says, and a replica added by reassignment
copies only the local tail from the leader (the rest stays in the store) and, made
leader, serves the whole history from the store."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition

from odradek.devcluster.s3 import S3Server
from tests.cluster_processes import run_cluster
from tests.faults.workload import check, start_producer, stop_producers
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

TOPIC = "history"
SEGMENT = 32768


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Server]:
    with S3Server(tmp_path / "s3") as server:
        yield server


def local_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log")) if path.exists() else 0


def test_leaders_copy_followers_trim_and_a_new_replica_copies_only_the_tail(
        zookeeper: ZooKeeperServer, tmp_path: Path, s3: S3Server) -> None:
    zookeeper.ensure_running()
    bucket = f"cluster-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    settings = {"remote.log.storage.system.enable": "true",
                "remote.log.manager.task.interval.ms": "200",
                "log.retention.check.interval.ms": "200",
                "log.segment.delete.delay.ms": "0",
                **s3.rsm_config(bucket)}
    with run_cluster(zookeeper, tmp_path, **settings) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
        try:
            from kafka.admin import NewTopic
            admin.create_topics([NewTopic(
                TOPIC, num_partitions=-1, replication_factor=-1,
                replica_assignments={0: [1, 2]},
                topic_configs={"remote.storage.enable": "true",
                               "segment.bytes": str(SEGMENT),
                               "local.retention.bytes": str(2 * SEGMENT),
                               "min.insync.replicas": "1"})], timeout_ms=30_000)
            # An idempotent producer that writes first and then stays idle: its state
            # lies below every later local log start, only in the store's snapshots.
            idle = Producer({"bootstrap.servers": cluster.bootstrap,
                             "enable.idempotence": True, "acks": "all"})
            for i in range(10):
                idle.produce(TOPIC, f"idle-{i}".encode())
            assert idle.flush(30) == 0
            run = start_producer(cluster.bootstrap, TOPIC, 1, "tiered", payload_bytes=200)
            cluster.wait_for(lambda: len(run.acked) > 3000, 90, "3,000 records acked")
            # The follower (2) trims its disk too: it holds only about the local retention.
            leader = cluster.leader(TOPIC)
            follower = 2 if leader == 1 else 1
            follower_dir = cluster.brokers[follower].data_dir / f"{TOPIC}-0"
            cluster.wait_for(lambda: local_bytes(follower_dir) < 5 * SEGMENT, 60,
                             "the follower deleted what the store holds")

            # The leader dies; the other one takes over and goes on copying.
            cluster.kill(leader)
            cluster.wait_for(lambda: cluster.leader(TOPIC) == follower, 30, "a new leader")
            acked = len(run.acked)
            cluster.wait_for(lambda: len(run.acked) > acked + 2000, 90,
                             "2,000 more records acked")
            cluster.start_broker(leader)

            # A new broker's replica: reassigned onto it, it copies the local tail only.
            new = cluster.add_broker().node_id
            result = admin.alter_partition_reassignments(
                {KTopicPartition(TOPIC, 0): [follower, new]})
            assert all(err is None for err in result.values()), result
            cluster.wait_for(lambda: cluster.replicas(TOPIC)[0] == [follower, new], 90,
                             "the reassignment completed")
            cluster.wait_for(lambda: new in cluster.isr(TOPIC), 60, "the new replica in sync")
            new_dir = cluster.brokers[new].data_dir / f"{TOPIC}-0"
            # Made leader, the new replica serves the history from the store.
            cluster.kill(follower)
            cluster.wait_for(lambda: cluster.leader(TOPIC) == new, 30, "the new one leads")
            time.sleep(1)
            stop_producers(run)
            # The idle producer's next batch is taken in sequence by the new leader,
            # which knows it from the producer state it read from the store.
            errors: list[object] = []
            idle.produce(TOPIC, b"idle-10", on_delivery=lambda err, msg: errors.append(err))
            assert idle.flush(30) == 0
            assert errors == [None]
            report = check(cluster.bootstrap, run)
            report.assert_consistent()
            total = sum(1 for _ in run.acked)
            assert total > 5000
            # Its disk never held the whole history: at most the tail plus what came since.
            assert local_bytes(new_dir) < total * 200 // 2, (local_bytes(new_dir), total)
            cluster.start_broker(follower)
        finally:
            admin.close()
        out = cluster.output()
        # The new replica started at the local log start, with the producers' state.
        assert "starting there, with the producer state from the remote tier" in out
