"""A leader whose log holds a corrupt batch (bytes rotted on its disk after the append):
its follower refuses that partition's batches before writing anything - one ERROR line
each time, that partition backing off - while every other partition in the same fetch
answers is appended and its replica rejoins the ISR."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_processes import run_cluster
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster


def test_a_follower_refuses_a_corrupt_batch_and_replicates_the_other_partitions(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path, size=2, **{"default.replication.factor": 2}) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic("rot", 2, replica_assignment=[[1, 2], [1, 2]])],
                            operation_timeout=30)["rot"].result(timeout=60)
        c.wait_for_full_isr("rot", 2)
        c.stop_broker(2)  # the follower: broker 1 keeps leading both, ISR [1]
        c.wait_for(lambda: c.isr("rot", 0) == c.isr("rot", 1) == [1], 30, "ISR [1]")
        producer = Producer({"bootstrap.servers": c.brokers[1].bootstrap, "acks": "1"})
        for partition in (0, 1):
            for i in range(10):
                producer.produce("rot", b"record %d" % i, partition=partition)
            assert producer.flush(30) == 0
        # A byte of partition 0's last record flips on the leader's disk (the batch's
        # CRC-32C no longer matches); the leader sends what its file holds.
        segment = next((c.brokers[1].data_dir / "rot-0").glob("*.log"))
        data = bytearray(segment.read_bytes())
        data[-1] ^= 0x01
        segment.write_bytes(bytes(data))

        c.start_broker(2)
        c.wait_for(lambda: c.isr("rot", 1) == [1, 2], 30, "broker 2 back in rot-1's ISR")
        c.wait_for(lambda: "rot-0: cannot append what leader 1 sent at offset 0"
                   in c.brokers[2].output(), 30,
                   "broker 2 refusing rot-0")
        output = c.brokers[2].output()
        refusals = [line for line in output.splitlines() if "rot-0: cannot append" in line]
        assert all(re.match(r"ERROR \S+: ", line) for line in refusals), refusals
        assert "crc" in refusals[0].lower(), refusals[0]
        assert "Traceback" not in output, output
        assert c.isr("rot", 0) == [1]  # nothing of the corrupt batch was taken
        assert not list((c.brokers[2].data_dir / "rot-0").glob("*.log")) or all(
            p.stat().st_size == 0 for p in (c.brokers[2].data_dir / "rot-0").glob("*.log"))
        assert c.log_bytes(2, "rot", 1) == c.log_bytes(1, "rot", 1)
