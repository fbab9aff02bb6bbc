"""A follower's append (``Log.append(assign_offsets=False)``, what the replica fetcher
hands its leader's batches to) refuses a batch it cannot take before anything is
written: the log end, the files and the producer state stay as they were. Regressions
found by the fuzz tier's ``follower_batches`` target (issue 21)."""

from __future__ import annotations

import struct

import pytest

from odradek.records import batch, builder
from odradek.records.errors import RecordError


def marker(*, codec: int = 0, records: bytes | None = None) -> bytes:
    """A COMMIT marker as a leader's log holds it, with its codec bits set to ``codec``
    or its records section replaced by ``records``; the CRC made right again."""
    data = bytearray(builder.build_control_batch(
        builder.CONTROL_COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0,
        timestamp=1_700_000_000_000, base_offset=0))
    if records is not None:
        data = data[:batch.HEADER_SIZE] + bytearray(records)
        struct.pack_into(">i", data, batch.LENGTH_AT, len(data) - batch.LOG_OVERHEAD_SIZE)
    attributes = struct.unpack_from(">h", data, batch.ATTRIBUTES_AT)[0]
    struct.pack_into(">h", data, batch.ATTRIBUTES_AT, attributes & ~batch.COMPRESSION_MASK | codec)
    struct.pack_into(">I", data, batch.CRC_AT, batch.compute_crc(data))
    return bytes(data)


@pytest.mark.parametrize("bad", [marker(codec=5), marker(records=b"\x01\x02garbage")],
                         ids=["unknown codec", "records that do not decode"])
def test_a_marker_that_does_not_decode_is_refused_before_it_is_written(open_log, bad) -> None:
    lg = open_log()
    good = builder.build_batch([builder.Record(0, 1, b"k", b"v", [])], base_offset=0)
    with pytest.raises(RecordError):
        lg.append(good + bad[:batch.BASE_OFFSET_AT] + struct.pack(">q", 1)
                  + bad[batch.BASE_OFFSET_AT + 8:], assign_offsets=False)
    # Before the fix the marker was written, then its decoding for the producer state
    # raised: the log end had moved past a batch the append refused.
    assert lg.log_end_offset == 0 and lg.size_bytes == 0
    assert lg.append(good, assign_offsets=False).last_offset == 0
    lg.close()
    assert open_log().log_end_offset == 1  # and the log reopens as written


def test_a_good_marker_is_still_taken(open_log) -> None:
    lg = open_log()
    info = lg.append(marker(), assign_offsets=False)
    assert info.first_offset == 0 and lg.log_end_offset == 1
