"""Tiered storage under kill -9: an `odradek serve` process copying segments to an S3
server (moto's, started here) and expiring them there is SIGKILLed while a copy or a
deletion is in flight (the S3 server paused, so the request hangs, then let go after the
broker died: it lands with nobody left to finish the job). Restarted, the broker serves
every acknowledged record once, in order, from both tiers; the store holds no segment
left half-copied or half-deleted, and every segment it serves has its objects."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from odradek.devcluster.broker import BrokerProcess
from odradek.devcluster.s3 import S3Server
from odradek.storage.remote.metadata import (
    COPY_FINISHED,
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    META_SUFFIX,
    RemoteSegment,
)
from odradek.storage.remote.store import RemoteObjectMissing, open_store
from tests.faults.workload import check, read_all, start_producer, stop_producers

pytestmark = pytest.mark.cluster

TOPIC = "tiered"


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Server]:
    with S3Server(tmp_path / "s3") as server:
        yield server


def settings(s3: S3Server, bucket: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true",
            "remote.log.manager.task.interval.ms": "100",
            "log.retention.check.interval.ms": "200",
            "log.segment.delete.delay.ms": "0",
            "rsm.config.storage.s3.api.call.timeout": "3000",
            "rsm.config.storage.s3.max.retries": "0",
            **s3.rsm_config(bucket)}


def store_state(s3: S3Server, bucket: str) -> tuple[list[RemoteSegment], set[str]]:
    store = open_store({k[len("rsm.config."):]: v for k, v in s3.rsm_config(bucket).items()})
    keys = set(store.list(""))
    metas = []
    for key in keys:
        if key.endswith(META_SUFFIX):
            try:
                metas.append(RemoteSegment.decode(store.get(key)))
            except RemoteObjectMissing:  # deleted since the listing: look again
                return store_state(s3, bucket)
    return metas, keys


def kill_in_flight(broker: BrokerProcess, s3: S3Server) -> None:
    """Hang the store under the broker's next copy or delete, kill the broker, let the
    store go: what the broker had sent lands after it died."""
    s3.pause()
    # Passes run every 100 ms and the producer rolls a segment every ~0.6 s: within this
    # a copy (or a deletion) meets the hung store.
    time.sleep(1.5)
    broker.kill()
    s3.resume()


def test_kills_mid_copy_and_mid_delete_leave_no_orphan_served_and_lose_nothing(
        tmp_path: Path, s3: S3Server) -> None:
    bucket = f"kills-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    broker = BrokerProcess(None, tmp_path / "data", tmp_path / "broker.log",
                           settings=settings(s3, bucket))
    broker.start()
    broker.wait_ready(time.monotonic() + 60)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(
            TOPIC, 1, 1, config={"remote.storage.enable": "true", "segment.bytes": "32768",
                                 "local.retention.bytes": "0"})])[TOPIC].result(30)
        run = start_producer(broker.bootstrap, TOPIC, 1, "kills", payload_bytes=200)
        for _ in range(3):
            time.sleep(2.0)  # segments roll and go up
            kill_in_flight(broker, s3)
            broker.start()
            broker.wait_ready(time.monotonic() + 60)
        time.sleep(2.0)
        stop_producers(run)
        # The restarted broker finishes or removes what the kills left.
        deadline = time.monotonic() + 60
        while True:
            metas, keys = store_state(s3, bucket)
            if metas and all(m.state == COPY_FINISHED for m in metas):
                break
            assert time.monotonic() < deadline, [m.state for m in metas]
            time.sleep(0.2)
        prefixes = {k.rsplit("/", 1)[0] + "/" for k in keys if k.endswith(META_SUFFIX)}
        for meta in metas:
            (prefix,) = prefixes
            assert meta.key(prefix, LOG_SUFFIX) in keys, meta
            assert meta.key(prefix, INDEXES_SUFFIX) in keys, meta
        # The kills did land inside copies (else this test proves little).
        log_text = (tmp_path / "broker.log").read_text()
        assert "left COPY_SEGMENT_STARTED" in log_text
        report = check(broker.bootstrap, run)
        report.assert_consistent()
        assert report.acked > 1000
        # Most of it was read from the remote tier.
        assert max(m.end_offset for m in metas) > report.acked // 2

        # Now the deletions: a total retention that expires most remote segments.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
            ConfigEntry("retention.bytes", "100000",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        kill_in_flight(broker, s3)
        broker.start()
        broker.wait_ready(time.monotonic() + 60)
        deadline = time.monotonic() + 60
        while True:
            metas, keys = store_state(s3, bucket)
            if (sum(m.size for m in metas) < 200_000
                    and all(m.state == COPY_FINISHED for m in metas)):
                break
            assert time.monotonic() < deadline, [(m.state, m.size) for m in metas]
            time.sleep(0.2)
        print("deletions interrupted by the kill:",
              (tmp_path / "broker.log").read_text().count("left DELETE_SEGMENT_STARTED"))
        # What is left reads once, in order, from the new log start on.
        records = read_all(broker.bootstrap, TOPIC)[0]
        offsets = [o for o, _ in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        assert offsets[0] > 0
    finally:
        if broker.running:
            broker.stop(timeout_s=30)
