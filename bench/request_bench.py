"""Per-request cost of the broker's hot path, in-process, without sockets or clients.

What a produce request costs the broker in Python: decode (guard + kio) + append + the
response bytes, for a request of one batch of R records to one partition (default 100
records of 100 bytes, about what librdkafka sends at moderate rates). No network, no
client: the number is the broker's own CPU per request, which is what the performance
issue's "CPU per million records" target is made of. Repeated several times; the best
repeat counts (the least disturbed by the rest of the machine).

    .venv/bin/python bench/request_bench.py [--records 100] [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import shutil
import tempfile
import time
from collections.abc import Sequence

from kio.index import load_request_schema
from kio.serial import entity_writer

from _common import machine_info, machine_line, note
from odradek.protocol.codec import decode_request
from odradek.protocol.messages import build
from odradek.records import builder
from odradek.server.broker import Broker
from odradek.server.config import load_config


def encode(api_key: int, version: int, body: dict) -> bytes:
    schema = load_request_schema(api_key, version)
    header = schema.__header_schema__
    buf = io.BytesIO()
    entity_writer(header)(buf, build(header, {
        "request_api_key": api_key, "request_api_version": version, "correlation_id": 1,
        "client_id": "bench"}))
    entity_writer(schema)(buf, build(schema, body))
    return buf.getvalue()


async def run(records: int, requests: int, repeats: int) -> list[float]:
    data_dir = tempfile.mkdtemp(prefix="odradek-request-bench-")
    broker = Broker(load_config(listen="127.0.0.1:0", data_dir=data_dir, environ={}))
    await broker.start()
    try:
        broker.create_topic("bench", 1)
        batch = builder.build_simple([b"x" * 100] * records)
        frame = encode(0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
            {"name": "bench", "partition_data": [{"index": 0, "records": batch}]}]})
        handle = broker.handlers[0]
        supported = broker.supported
        per_request = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(requests):
                await handle(broker, decode_request(frame, supported))
            per_request.append((time.perf_counter() - start) / requests)
        return per_request
    finally:
        await broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=100, help="records per request (100)")
    ap.add_argument("--requests", type=int, default=20_000, help="requests per repeat")
    ap.add_argument("--repeats", type=int, default=5, help="repeats; the best counts (5)")
    args = ap.parse_args(argv)
    note(f"{args.repeats} x {args.requests} produce requests of {args.records} records")
    times = asyncio.run(run(args.records, args.requests, args.repeats))
    best = min(times)
    print(f"machine: {machine_line(machine_info())}")
    print(f"produce v9, 1 partition, {args.records} x 100-byte records per request: "
          f"best {best * 1e6:.1f} us per request ({args.records / best / 1e6:.2f} M records/s "
          f"of broker-side work on one core); all repeats: "
          + ", ".join(f"{t * 1e6:.1f}" for t in times) + " us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
