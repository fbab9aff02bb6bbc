"""BrokerStats' request times (metrics.listen): a request's times reach the histograms
a batch at a time, and every one of them is there when a scrape looks."""

from __future__ import annotations

from odradek.server.metrics import (
    FOLD_EVERY,
    REQUEST_TIMES,
    T_LOCAL,
    T_READY,
    BrokerStats,
    RequestTiming,
    new_timing,
)


def timing(api_key: int, read: float, version: int = 0) -> RequestTiming:
    """A request read at ``read``: 1 ms queued, 2 ms local, 3 ms remote; sent 4 ms after
    it was ready (``sent`` is given to request_done)."""
    t = new_timing(api_key, read, read + 0.001, version)
    t[T_LOCAL] = 0.002
    t[T_READY] = read + 0.006
    return t


def test_request_times_are_folded_a_batch_at_a_time_and_on_demand() -> None:
    stats = BrokerStats()
    for i in range(FOLD_EVERY - 1):
        stats.request_done(timing(1, float(i)), float(i) + 0.010)
    assert stats.requests == {}  # kept as they are, not yet in the histograms
    stats.request_done(timing(1, 5000.0), 5000.010)
    assert stats.requests[1].count == FOLD_EVERY  # the batch is full: all folded

    stats.request_done(timing(0, 9000.0, version=13), 9000.010)
    stats.fold()  # what a scrape does first (take_snapshot)
    produce = stats.requests[0]
    assert produce.count == 1
    assert produce.versions == {13: 1}  # RequestsPerSec's version tag
    assert stats.requests[1].versions == {0: FOLD_EVERY}
    sums = dict(zip(REQUEST_TIMES, (round(h.sum_ms, 6) for h in produce.times),
                    strict=True))
    assert sums == {"requestqueuetimems": 1.0, "localtimems": 2.0, "remotetimems": 3.0,
                    "responsesendtimems": 4.0, "totaltimems": 10.0}
    assert [sum(h.buckets) for h in produce.times] == [1] * len(REQUEST_TIMES)
    stats.fold()  # nothing new: nothing counted twice
    assert stats.requests[0].count == 1 and stats.requests[1].count == FOLD_EVERY
