"""``odradek dump-log``: print a segment file's batches (Kafka's kafka-dump-log.sh)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from odradek.records import batch as rb
from odradek.records import builder, codecs
from odradek.records.errors import RecordError


def dump_log(files: Sequence[str], *, records: bool = False) -> int:
    """Print every batch header (and records); exit 1 at the first invalid batch."""
    status = 0
    for path in files:
        print(f"Dumping {path}")
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            try:
                header = rb.check_batch(data, pos, len(data))
            except RecordError as exc:
                print(f"  invalid data at position {pos} of {len(data)}: {exc}")
                status = 1
                break
            print(
                f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
                f"count: {header.record_count} baseSequence: {header.base_sequence} "
                f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
                f"partitionLeaderEpoch: {header.partition_leader_epoch} "
                f"isTransactional: {str(header.is_transactional).lower()} "
                f"isControl: {str(header.is_control).lower()} position: {pos} "
                f"CreateTime: {header.max_timestamp} size: {header.size} "
                f"magic: {header.magic} compresscodec: {codecs.NAMES[header.compression]} "
                f"crcValid: true"
            )
            if records:
                for record in builder.decode_batch(data, pos).records:
                    key = record.key.decode(errors="replace") if record.key is not None else None
                    value = (
                        record.value.decode(errors="replace") if record.value is not None else None
                    )
                    headers = ",".join(f"{k}:{v!r}" for k, v in record.headers)
                    print(f"| offset: {record.offset} CreateTime: {record.timestamp} "
                          f"key: {key} payload: {value} headers: [{headers}]")
            pos += header.size
        print(f"  {pos} of {os.path.getsize(path)} bytes are valid batches")
    return status
