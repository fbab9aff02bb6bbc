"""Helpers shared by the storage tests: batches as producers send them, a fake clock, a
record of fsyncs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from odradek.records import builder, codecs
from odradek.storage import Log, LogConfig


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def make_batch(
    count: int = 10,
    *,
    start: int = 0,
    timestamp: int = 1_700_000_000_000,
    codec: int = codecs.NONE,
    keys: list[bytes | None] | None = None,
    value_size: int = 0,
) -> bytes:
    """A producer's batch of ``count`` records with values ``v<start+i>`` (padded)."""
    values = [f"v{start + i}".encode().ljust(value_size, b".") for i in range(count)]
    return builder.build_simple(values, keys=keys, timestamp=timestamp, codec=codec)


def values_in(lg: Log, offset: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record readable from ``offset``."""
    return [
        (record.offset, record.value)
        for decoded in lg.read_batches(offset)
        for record in decoded.records
    ]


@pytest.fixture
def fsynced(monkeypatch) -> list[str]:
    """The path of every file or directory fsynced (os.fsync, os.fdatasync) from now on,
    in order; the real calls still run. Clear it to start counting afresh."""
    synced: list[str] = []

    def tracked(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)
        return sync

    monkeypatch.setattr(os, "fsync", tracked(os.fsync))
    monkeypatch.setattr(os, "fdatasync", tracked(os.fdatasync))
    return synced


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def small_config() -> LogConfig:
    """Small segments and a dense index, so a few KiB exercise rolls and lookups."""
    return LogConfig.from_kafka({"segment.bytes": 4096, "index.interval.bytes": 256})


@pytest.fixture
def open_log(tmp_path, clock) -> Iterator:
    """open_log(config=None, **kwargs) -> Log in tmp_path/topic-0; closed at the end."""
    opened: list[Log] = []

    def _open(config: LogConfig | None = None, **kwargs) -> Log:
        lg = Log.open(str(tmp_path / "topic-0"), config or LogConfig(), clock=clock, **kwargs)
        opened.append(lg)
        return lg

    yield _open
    for lg in opened:
        if not lg.closed:
            lg.close()
