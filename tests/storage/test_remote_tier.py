"""Tiered storage at the storage layer: a tiered log's rolled segments copied to a store
(a local directory here; tests/server/test_tiered_storage.py runs the S3 server), local
retention waiting for the copies, remote reads of whole batches, remote retention, and
the metadata states that keep a crash from serving a half-copied or half-deleted
segment."""

from __future__ import annotations

import os

import pytest

from odradek.records import builder
from odradek.storage import Log, LogConfig
from odradek.storage.errors import (
    InvalidConfigError,
    OffsetMovedToTieredStorageError,
    RemoteStorageError,
)
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.remote.manager import RemoteLogManager
from odradek.storage.remote.metadata import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_STARTED,
    META_SUFFIX,
    RemoteSegment,
    serving_chain,
)
from odradek.storage.remote.reader import PENDING, RemoteReader
from odradek.storage.remote.store import FileSystemStore, open_store

from .conftest import make_batch

HOUR = 3_600_000


def tiered(**settings) -> LogConfig:
    base = {"segment.bytes": 2048, "index.interval.bytes": 256,
            "remote.storage.enable": "true", "local.retention.bytes": 0}
    base.update({k.replace("_", "."): v for k, v in settings.items()})
    return LogConfig.from_kafka(base)


def fill(lg: Log, batches: int, per_batch: int = 5, timestamp: int | None = None) -> None:
    offset = lg.log_end_offset
    for _ in range(batches):
        kwargs = {} if timestamp is None else {"timestamp": timestamp}
        lg.append(make_batch(per_batch, start=offset, value_size=40, **kwargs))
        offset += per_batch


class Rig:
    """A tiered log, a directory store and a manager and reader over them."""

    def __init__(self, tmp_path, open_log, clock, config: LogConfig) -> None:
        self.root = tmp_path / "store"
        self.root.mkdir()
        self.store = FileSystemStore(str(self.root))
        self.lg = open_log(config)
        self.clock = clock
        self.manager = self.new_manager()
        self.reader = RemoteReader(self.manager, chunk_size=1024, threads=1)

    def new_manager(self) -> RemoteLogManager:
        return RemoteLogManager(self.store, broker_id=0, clock=self.clock,
                                leading=lambda: [("topic", 0, self.lg, True)])

    def read_remote(self, offset: int, max_bytes: int = 1 << 20, **kw):
        """Wait out PENDING: the reader's thread fills its cache."""
        for _ in range(200):
            got = self.reader.read("topic", 0, offset, max_bytes, **kw)
            if got is not PENDING:
                return got
            import time
            time.sleep(0.01)
        raise AssertionError("remote read stayed pending")

    def objects(self, suffix: str) -> list[str]:
        return sorted(p.name for p in self.root.rglob(f"*{suffix}"))


@pytest.fixture
def rig(tmp_path, open_log, clock):
    made: list[Rig] = []

    def make(config: LogConfig | None = None) -> Rig:
        r = Rig(tmp_path, open_log, clock, config or tiered())
        made.append(r)
        return r

    yield make
    for r in made:
        r.reader.close()


def test_rolled_committed_segments_go_up_and_local_retention_waits_for_them(rig):
    r = rig()
    lg = r.lg
    fill(lg, 40)
    rolled = len(lg.segments) - 1
    assert rolled >= 3
    # Nothing copied yet: local retention (0 bytes) deletes nothing.
    assert lg.apply_retention() == 0
    r.manager.run_once()
    assert len(r.objects(".log")) == rolled
    assert lg.highest_remote_offset == lg.segments[-1].base_offset - 1
    # Now copied: every rolled segment goes locally, the log start stays at 0.
    assert lg.apply_retention() == rolled
    assert lg.log_start_offset == 0
    assert lg.local_log_start_offset == lg.segments[0].base_offset > 0
    with pytest.raises(OffsetMovedToTieredStorageError):
        lg.read(0, 1 << 20)


def test_remote_reads_give_whole_batches_from_the_one_holding_the_offset(rig):
    r = rig()
    lg = r.lg
    fill(lg, 40)
    r.manager.run_once()
    lg.apply_retention()
    seen = []
    offset = 0
    while offset < lg.local_log_start_offset:
        first, data, aborted = r.read_remote(offset, 700)
        assert data and aborted is None
        from odradek.records import builder
        for batch in builder.decode_batches(data):
            for rec in batch.records:
                seen.append(rec.offset)
        offset = seen[-1] + 1
    assert seen == list(range(lg.local_log_start_offset))
    # From the middle of a batch: the batch holding it comes whole.
    first, data, _ = r.read_remote(7, 10)
    assert first == 5 and data  # min_one: one batch although it is over 10 bytes


def test_only_committed_data_goes_up(rig):
    r = rig()
    lg = r.lg
    lg.set_replicated(True)
    fill(lg, 40)
    lg.set_high_watermark(lg.segments[1].base_offset + 1)
    r.manager.run_once()
    # Only the first segment lies wholly below the high watermark.
    assert len(r.objects(".log")) == 1
    assert lg.highest_remote_offset == lg.segments[1].base_offset - 1


def test_remote_retention_expires_the_oldest_and_moves_the_log_start(rig, clock):
    r = rig(tiered(retention_ms=24 * HOUR, local_retention_ms=HOUR, local_retention_bytes=-2))
    lg = r.lg
    fill(lg, 30, timestamp=clock.now - 48 * HOUR)
    fill(lg, 30, timestamp=clock.now)
    r.manager.run_once()  # copies everything rolled, then expires the 48 h old part
    assert lg.log_start_offset > 0
    chain = r.manager.get("topic", 0).chain
    assert chain and chain[0].base_offset >= lg.log_start_offset - 1
    assert all(s.max_timestamp >= clock.now - 24 * HOUR for s in chain)
    # The expired segments' objects are gone, data and metadata.
    assert len(r.objects(".log")) == len(r.objects(META_SUFFIX)) == len(chain)


def test_a_half_copied_segment_is_never_served_and_is_removed_by_the_next_manager(rig):
    r = rig()
    lg = r.lg
    fill(lg, 40)
    # A crash between the STARTED metadata and the FINISHED one: the data is there.
    r.manager.run_once()
    prefix = r.manager.get("topic", 0).prefix
    seg = r.manager.get("topic", 0).chain[-1]
    r.store.put(seg.key(prefix, META_SUFFIX), seg.with_state(COPY_STARTED, 0).encode())
    fresh = r.new_manager()
    fresh.run_once()  # loads: the STARTED one is another instance's: deleted, copied again
    rp = fresh.get("topic", 0)
    assert [s.state for s in rp.segments.values()] == [COPY_FINISHED] * len(rp.segments)
    assert rp.highest_offset == seg.end_offset
    assert seg.segment_id not in rp.segments
    assert len(r.objects(".log")) == len(rp.segments)


def test_a_half_deleted_segment_is_never_served_and_its_deletion_is_finished(rig):
    r = rig()
    fill(r.lg, 40)
    r.manager.run_once()
    rp = r.manager.get("topic", 0)
    first = rp.chain[0]
    # A crash after the DELETE_STARTED metadata and the .log's deletion.
    r.store.put(first.key(rp.prefix, META_SUFFIX),
                first.with_state(DELETE_STARTED, 0).encode())
    r.store.delete(first.key(rp.prefix, ".log"))
    fresh = r.new_manager()
    fresh.run_once()
    rp = fresh.get("topic", 0)
    assert first.segment_id not in rp.segments
    assert not list(r.root.rglob(f"*{first.segment_id}*"))
    # Its range is served by no segment: the log (still local here) serves it.
    assert rp.find(first.base_offset) is None


def test_the_producer_state_at_each_roll_goes_up_with_the_segment_before(rig):
    r = rig()
    lg = r.lg
    for i in range(20):  # an idempotent producer's batches, rolled every few
        lg.append(builder.build_simple([b"p%d".ljust(40, b".") % (i * 5 + j)
                                        for j in range(5)], producer_id=42,
                                       producer_epoch=0, base_sequence=i * 5))
    fill(lg, 20)  # then others, so the producer's last batch is far below the end
    r.manager.run_once()
    chain = r.manager.get("topic", 0).chain
    for seg in chain:
        data = r.manager.producer_snapshot_at("topic", None, 0, seg.end_offset + 1)
        assert data is not None
        state = ProducerStateManager()
        path = r.root / "snapshot"
        path.write_bytes(data)
        assert state.load_snapshot(str(path))
        if seg.end_offset >= 99:  # past the producer's last batch: it is known
            assert state.producers[42].last_seq == 99
    assert r.manager.producer_snapshot_at("topic", None, 0, chain[0].end_offset + 2) is None


def test_a_disk_lost_single_node_continues_after_the_remote_part(tmp_path, rig, clock):
    r = rig()
    fill(r.lg, 40)
    r.manager.run_once()
    remote_end = r.lg.highest_remote_offset
    r.lg.close()
    lost = Log.open(str(tmp_path / "lost-0"), tiered(), clock=clock)
    try:
        # Its partition.metadata is gone too: the prefix must match the old one's.
        manager = RemoteLogManager(r.store, broker_id=0, clock=clock,
                                   leading=lambda: [("topic", 0, lost, True)])
        manager.run_once()
        assert lost.log_end_offset == remote_end + 1
        assert lost.log_start_offset == 0
    finally:
        lost.close()


def test_a_corrupt_remote_segment_fails_its_reads_with_a_crc_error(rig, caplog):
    r = rig()
    lg = r.lg
    fill(lg, 40)
    r.manager.run_once()
    lg.apply_retention()
    seg = r.manager.get("topic", 0).chain[0]
    path = next(r.root.rglob(f"*{seg.segment_id}.log"))
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RemoteStorageError, match="CRC"):
        r.read_remote(0)
    # Another segment reads on.
    later = r.manager.get("topic", 0).chain[1]
    assert r.read_remote(later.base_offset)[1]


def test_a_missing_remote_segment_fails_its_reads(rig):
    r = rig()
    fill(r.lg, 40)
    r.manager.run_once()
    r.lg.apply_retention()
    seg = r.manager.get("topic", 0).chain[0]
    os.unlink(next(r.root.rglob(f"*{seg.segment_id}.log")))
    with pytest.raises(RemoteStorageError, match="missing"):
        r.read_remote(0)


def test_duplicates_from_a_leadership_race_serve_once_and_are_deleted(rig):
    a = RemoteSegment("a", 0, 99, 0, 10, (), COPY_FINISHED, 1, "x", 0)
    b = RemoteSegment("b", 50, 149, 0, 10, (), COPY_FINISHED, 2, "y", 0)
    c = RemoteSegment("c", 0, 99, 0, 10, (), COPY_FINISHED, 2, "y", 0)
    d = RemoteSegment("d", 150, 199, 0, 10, (), COPY_STARTED, 2, "y", 0)
    chain = serving_chain([b, c, a, d])
    assert [s.end_offset for s in chain] == [99, 149]


def test_tiered_topic_settings_follow_kafkas_rules():
    with pytest.raises(InvalidConfigError, match="compacted"):
        LogConfig.from_kafka({"remote.storage.enable": "true", "cleanup.policy": "compact"})
    with pytest.raises(InvalidConfigError, match="must not exceed"):
        LogConfig.from_kafka({"remote.storage.enable": "true", "retention.ms": 1000,
                              "local.retention.ms": 2000})
    cfg = LogConfig.from_kafka({"remote.storage.enable": "true", "retention.bytes": 100})
    assert cfg.local_retention == (cfg.retention_ms, 100)
    with pytest.raises(InvalidConfigError, match=r"storage\.backend\.class"):
        open_store({"storage.backend.class": "ftp"})
    with pytest.raises(InvalidConfigError, match=r"storage\.root"):
        open_store({"storage.backend.class": "filesystem", "storage.root": "/nonexistent/x"}
                   ).check()
