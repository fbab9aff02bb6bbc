"""The idempotent producer on the log: retries are answered with their first offsets and
not written twice, gaps and old epochs are refused, and the state survives restarts."""

from __future__ import annotations

import os

import pytest

from odradek.records import builder
from odradek.storage.producer_state import InvalidProducerEpochError, OutOfOrderSequenceError

from .conftest import values_in


def idempotent(count: int, seq: int, *, pid: int = 7, epoch: int = 0, start: int = 0) -> bytes:
    return builder.build_simple([b"m%d" % (start + i) for i in range(count)], producer_id=pid,
                                producer_epoch=epoch, base_sequence=seq)


def test_a_retried_batch_gets_its_first_offsets_and_is_not_written_again(open_log):
    lg = open_log()
    first = lg.append(idempotent(3, 0))
    lg.append(idempotent(2, 3, start=3))
    size = lg.active.size
    retry = lg.append(idempotent(3, 0))
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert lg.active.size == size
    assert len(values_in(lg)) == 5


def test_a_sequence_gap_is_refused_and_nothing_is_written(open_log):
    lg = open_log()
    lg.append(idempotent(3, 0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idempotent(1, 5))
    assert lg.log_end_offset == 3
    assert lg.append(idempotent(1, 3)).first_offset == 3


def test_a_new_producer_must_start_at_sequence_zero(open_log):
    lg = open_log()
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idempotent(1, 4))


def test_an_old_epoch_is_fenced_and_a_new_epoch_restarts_sequences(open_log):
    lg = open_log()
    lg.append(idempotent(2, 0, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        lg.append(idempotent(1, 2, epoch=0))
    assert lg.append(idempotent(1, 0, epoch=2)).first_offset == 2


def test_producers_are_independent_and_plain_batches_are_unchecked(open_log):
    lg = open_log()
    lg.append(idempotent(1, 0, pid=1))
    lg.append(idempotent(1, 0, pid=2))
    lg.append(builder.build_simple([b"plain"]))
    lg.append(builder.build_simple([b"plain"]))
    assert lg.log_end_offset == 4


@pytest.mark.parametrize("clean", [True, False])
def test_duplicates_are_still_recognised_after_a_restart(open_log, clean):
    lg = open_log()
    lg.append(idempotent(3, 0))
    second = lg.append(idempotent(2, 3, start=3))
    if clean:
        lg.close()
        assert [n for n in os.listdir(lg.directory) if n.endswith(".snapshot")]
    else:
        for segment in lg.segments:
            os.close(segment.fd)
        lg.closed = True
    lg = open_log(clean_shutdown=clean)
    retry = lg.append(idempotent(2, 3, start=3))
    assert retry.duplicate and retry.first_offset == second.first_offset
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idempotent(1, 9))
    assert lg.append(idempotent(1, 5, start=5)).first_offset == 5


def test_truncation_forgets_the_truncated_batches(open_log):
    lg = open_log()
    lg.append(idempotent(2, 0))
    lg.append(idempotent(2, 2, start=2))
    lg.truncate_to(2)
    assert not lg.append(idempotent(2, 2, start=2)).duplicate
    assert lg.log_end_offset == 4


def snapshots(lg) -> list[str]:
    return sorted(n for n in os.listdir(lg.directory) if n.endswith(".snapshot"))


def test_a_clean_stop_with_nothing_new_keeps_the_snapshot_it_has(open_log, monkeypatch):
    from odradek.storage.producer_state import ProducerStateManager

    lg = open_log()
    lg.append(idempotent(3, 0))
    lg.close()
    assert snapshots(lg) == ["00000000000000000003.snapshot"]
    written = []
    real = ProducerStateManager.write_snapshot
    monkeypatch.setattr(ProducerStateManager, "write_snapshot",
                        lambda self, d, o: (written.append(o), real(self, d, o)))
    for _ in range(2):  # restarts with no produce in between write nothing
        lg = open_log(clean_shutdown=True)
        lg.close()
    assert written == []
    lg = open_log(clean_shutdown=True)
    assert lg.append(idempotent(3, 0)).duplicate  # the kept snapshot still knows the batch
    lg.append(idempotent(2, 3, start=3))
    lg.close()
    assert written == [5]
    assert snapshots(lg) == ["00000000000000000005.snapshot"]


def test_a_log_truncated_back_to_its_snapshot_keeps_a_state_that_matches_the_log(open_log):
    lg = open_log()
    lg.append(idempotent(3, 0))
    lg.close()
    lg = open_log(clean_shutdown=True)
    lg.append(idempotent(2, 3, start=3))
    lg.truncate_to(3)  # a follower dropping a diverged tail: back at the snapshot's offset
    lg.close()
    assert snapshots(lg) == ["00000000000000000003.snapshot"]
    lg = open_log(clean_shutdown=True)
    assert lg.append(idempotent(3, 0)).duplicate
    assert not lg.append(idempotent(2, 3, start=3)).duplicate  # the cut batch is new again
    assert lg.log_end_offset == 5


def test_a_snapshot_above_a_truncation_is_never_mistaken_for_the_new_state(open_log):
    lg = open_log()
    lg.append(idempotent(3, 0))
    lg.append(idempotent(2, 3, start=3))
    lg.close()
    assert snapshots(lg) == ["00000000000000000005.snapshot"]
    lg = open_log(clean_shutdown=True)
    lg.truncate_to(3)
    lg.append(idempotent(2, 0, pid=9))  # the log end is 5 again, with other batches
    lg.close()
    assert snapshots(lg) == ["00000000000000000005.snapshot"]
    lg = open_log(clean_shutdown=True)
    assert lg.append(idempotent(2, 0, pid=9)).duplicate
    assert not lg.append(idempotent(2, 3, pid=7, start=3)).duplicate
