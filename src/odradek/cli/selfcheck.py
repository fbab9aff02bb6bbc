"""``odradek selfcheck``: the storage engine, end to end, on a real data directory.

Each step prints one line and raises SelfCheckFailed with what went wrong; the command
exits 0 only when every step passed. It is a quick way for an operator to see that the
engine works on a given filesystem (e.g. that fsync, flock and rename behave).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from odradek.records import builder, codecs
from odradek.storage import LogConfig, LogManager

BATCH = 100  # records per batch


class SelfCheckFailed(Exception):
    pass


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise SelfCheckFailed(what)


def _batch(start: int, count: int, codec: int, timestamp: int) -> bytes:
    return builder.build_simple(
        [f"event-{i}".encode() * 3 for i in range(start, start + count)],
        keys=[f"user-{i % 97}".encode() for i in range(start, start + count)],
        timestamp=timestamp,
        codec=codec,
    )


# Fewer records would leave the retention step a single segment and the timestamp lookup
# fewer batches than it looks up.
MIN_RECORDS = 2000


def run_selfcheck(data_dir: str, records: int) -> int:
    records = max(records, MIN_RECORDS)
    print(f"odradek selfcheck in {os.path.abspath(data_dir)}")
    steps = [
        ("append and read back with every codec", _append_and_read),
        ("recover from kill -9 and a torn tail", _crash_recovery),
        ("time retention deletes old segments", _retention),
        ("compaction keeps the latest value per key", _compaction),
    ]
    failed = 0
    for title, step in steps:
        started = time.perf_counter()
        try:
            detail = step(data_dir, records)
        except SelfCheckFailed as exc:
            print(f"  FAIL  {title}: {exc}")
            failed += 1
            continue
        elapsed = (time.perf_counter() - started) * 1000
        print(f"  ok    {title} ({detail}; {elapsed:.0f} ms)")
    print("selfcheck passed" if not failed else f"selfcheck FAILED ({failed} step(s))")
    return 1 if failed else 0


def _append_and_read(data_dir: str, records: int) -> str:
    config = LogConfig.from_kafka({"segment.bytes": 256 * 1024})
    with LogManager.open(os.path.join(data_dir, "codecs"), default_config=config) as manager:
        lg = manager.get_or_create_log("events", 0)
        now = int(time.time() * 1000)
        for n, start in enumerate(range(0, records, BATCH)):
            info = lg.append(_batch(start, min(BATCH, records - start), n % 5, now + n),
                             leader_epoch=0)
            _check(info.first_offset == start, f"batch {n} got offset {info.first_offset}")
        _check(lg.log_end_offset == records, f"log end {lg.log_end_offset} != {records}")
        seen = 0
        offset = 0
        while offset < lg.log_end_offset:
            result = lg.read(offset, 64 * 1024)
            _check(result.region is not None, f"nothing read at offset {offset}")
            assert result.region is not None
            for decoded in builder.decode_batches(result.region.read()):
                for record in decoded.records:
                    _check(record.offset == seen, f"offset {record.offset}, expected {seen}")
                    _check(record.value == f"event-{seen}".encode() * 3,
                           f"wrong value at offset {seen}")
                    seen += 1
                offset = decoded.header.next_offset
        _check(seen == records, f"read {seen} of {records} records")
        found = lg.offset_for_timestamp(now + 7)
        _check(found is not None and found[0] == 7 * BATCH, f"offset for timestamp: {found}")
        segments = len(lg.segments)
    return f"{records} records, {segments} segments, 5 codecs"


def _crash_child(data_dir: str, records: int) -> None:
    """Runs in a child process: append, report what was acknowledged, then SIGKILL."""
    manager = LogManager.open(data_dir)
    lg = manager.get_or_create_log("events", 0)
    for start in range(0, records, BATCH):
        info = lg.append(_batch(start, BATCH, codecs.LZ4, 0))
        print(info.last_offset, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def _crash_recovery(data_dir: str, records: int) -> str:
    path = os.path.join(data_dir, "crash")
    child = subprocess.run(
        [sys.executable, "-c",
         f"from odradek.cli.selfcheck import _crash_child; _crash_child({path!r}, {records})"],
        capture_output=True, text=True, timeout=120,
    )
    _check(child.returncode == -signal.SIGKILL, f"child ended with {child.returncode}")
    acked = int(child.stdout.split()[-1]) + 1
    segment = os.path.join(path, "events-0", f"{0:020d}.log")
    with open(segment, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x10\x00torn")  # a half batch
    with LogManager.open(path) as manager:
        _check(not manager.had_clean_shutdown, "a killed broker left a clean-shutdown marker")
        lg = manager.get_or_create_log("events", 0)
        _check(lg.log_end_offset == acked, f"after recovery log end {lg.log_end_offset}, "
                                           f"{acked} acknowledged")
        count = sum(len(d.records) for d in lg.read_batches(0))
        _check(count == acked, f"{count} records readable, {acked} acknowledged")
    return f"{acked} acknowledged records all readable, torn tail cut"


def _retention(data_dir: str, records: int) -> str:
    config = LogConfig.from_kafka({"segment.bytes": 64 * 1024, "retention.ms": 3_600_000})
    with LogManager.open(os.path.join(data_dir, "retention"), default_config=config) as manager:
        lg = manager.get_or_create_log("metrics", 0)
        now = int(time.time() * 1000)
        half = records // 2
        for start in range(0, records, BATCH):
            age = 2 * 3_600_000 if start < half else 0  # the first half is two hours old
            lg.append(_batch(start, BATCH, codecs.NONE, now - age))
        before = len(lg.segments)
        deleted = manager.apply_retention(now)
        _check(deleted > 0, "no segment was deleted")
        _check(0 < lg.log_start_offset <= half, f"log start offset {lg.log_start_offset}")
        _check(lg.segments[0].max_timestamp >= now - 3_600_000 or len(lg.segments) == 1,
               "an expired segment survived")
    return f"{deleted} of {before} segments deleted, log start now {lg.log_start_offset}"


def _compaction(data_dir: str, records: int) -> str:
    config = LogConfig.from_kafka({"segment.bytes": 32 * 1024, "cleanup.policy": "compact"})
    with LogManager.open(os.path.join(data_dir, "compaction"), default_config=config) as manager:
        lg = manager.get_or_create_log("profiles", 0)
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for n in range(max(records // BATCH, 10)):
            recs = []
            for i in range(BATCH):
                key = f"user-{(n * BATCH + i) % 500}".encode()
                value = None if (n * BATCH + i) % 7 == 0 else f"v{n}-{i}".encode()
                recs.append(builder.Record(i, 0, key, value))
            info = lg.append(builder.build_batch(recs, codec=n % 5))
            for i, record in enumerate(recs):
                assert record.key is not None
                latest[record.key] = (info.first_offset + i, record.value)
        lg.roll()
        before = lg.size_bytes
        manager.clean()
        after = lg.size_bytes
        remaining = {}
        for decoded in lg.read_batches(0):
            for record in decoded.records:
                assert record.key is not None
                _check(record.key not in remaining, f"key {record.key!r} kept twice")
                remaining[record.key] = (record.offset, record.value)
        _check(remaining == latest, "the compacted log is not the latest value per key")
    return f"{len(latest)} keys, {before} -> {after} bytes"
