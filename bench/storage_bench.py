"""Storage engine benchmark: Odradek's partition log against the bare file API it sits on.

What it measures (issue 2: "append and read at >= 0.9 of raw"):

1. Append: ``Log.append`` of ~1 MiB uncompressed v2 batches (100-byte values) to a fresh
   log with the default config (page cache, no fsync), against ``os.writev`` of the same
   batches through a plain ``O_APPEND`` fd to a fresh file in the same directory. A third
   side (CRC-32C check of each batch, then the same writev) shows the floor of any append
   that validates batches as Kafka does.
2. Read: the whole log back through ``Log.read(offset, 1 MiB)``, moving each region with
   (a) ``os.pread`` into Python and (b) ``os.sendfile`` to ``/dev/null``, against
   sequential 1 MiB ``os.pread`` / ``os.sendfile`` of the same segment files.
3. Recovery: ``Log.open(clean_shutdown=False, recovery_point=0)`` over an already synced
   log (every batch CRC-checked, indexes rebuilt), against a plain 8 MiB ``os.pread`` +
   CRC-32C scan of the same files; and the clean-shutdown open for contrast.

Why ratios: the machines this runs on are small, shared and noisy, so absolute MB/s move
by tens of percent from one minute to the next. The log and its raw baseline therefore run
side by side in one process, alternating in every round (ABBA order); each round gives
one log/raw ratio of two runs made seconds apart, and the reported ratio is the median of
those (best vs best is shown too). Everything is read from and written to the page
cache (nothing drops caches system-wide): this is CPU and memory-bandwidth work, which is
where the engine's own overhead shows. Disk speed is not measured, except for an
informational fsync time.

Run: ``.venv/bin/python bench/storage_bench.py [--gib 1]`` (see bench/README.md).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from _common import MiB, finish, machine_info, machine_line, note, shown_path
from odradek.records import batch as rb
from odradek.records import builder
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.segment import RECOVERY_CHUNK

GiB = 1024 * MiB
READ_CHUNK = 1 * MiB  # max_bytes of every Log.read, and the raw baselines' chunk
OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_CREAT | os.O_EXCL  # as LogSegment

# --- machine --------------------------------------------------------------------------


def _filesystem_of(path: str) -> str:
    """Type and device of the mount holding ``path`` (longest matching mount point)."""
    real = os.path.realpath(path)
    best = ("", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                device, mount_point, fstype = line.split()[:3]
                inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) > len(best[0]):
                    best = (mount_point, fstype, device)
    except OSError:
        pass
    return f"{best[1]} ({best[2]} on {best[0]})"


def storage_machine_info(work_dir: str) -> dict[str, Any]:
    return machine_info(crc32c_hardware=bool(getattr(crc32c, "hardware_based", False)),
                        filesystem=_filesystem_of(work_dir), work_dir=work_dir)


def storage_machine_line(m: dict[str, Any]) -> str:
    return machine_line(m, f"crc32c hardware={m['crc32c_hardware']}", m["filesystem"])


# --- batches --------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    batches: list[bytes]  # a few distinct producer batches, reused round-robin
    records_per_batch: int
    batch_bytes: int  # every batch has exactly this size
    value_bytes: int

    @property
    def bytes_per_record(self) -> float:
        return self.batch_bytes / self.records_per_batch

    def batch(self, i: int) -> bytes:
        return self.batches[i % len(self.batches)]


def make_workload(target_bytes: int, value_bytes: int, distinct: int) -> Workload:
    """``distinct`` uncompressed producer batches of random ``value_bytes`` values, each
    holding as many records as fit in ``target_bytes`` (header included)."""
    size = rb.HEADER_SIZE
    count = 0
    scratch = bytearray()
    while True:
        scratch.clear()
        builder.encode_record(scratch, count, 0, None, bytes(value_bytes))
        if size + len(scratch) > target_bytes:
            break
        size += len(scratch)
        count += 1
    if count == 0:
        raise SystemExit(f"a batch of {target_bytes} bytes cannot hold one record")
    timestamp = time.time_ns() // 1_000_000
    batches = []
    for _ in range(distinct):
        blob = os.urandom(value_bytes * count)
        values = [blob[i * value_bytes : (i + 1) * value_bytes] for i in range(count)]
        batches.append(builder.build_simple(values, timestamp=timestamp))
    assert all(len(b) == size for b in batches), "record sizes must not depend on content"
    return Workload(batches, count, size, value_bytes)


# --- timing helpers -------------------------------------------------------------------


@dataclass
class Paired:
    """Seconds per round for the log and its raw baseline, run next to each other."""

    log: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)

    def ratio_median(self) -> float:
        """Median over rounds of log throughput / raw throughput (raw time / log time)."""
        return statistics.median(r / g for g, r in zip(self.log, self.raw, strict=True))

    def ratio_best(self) -> float:
        return min(self.raw) / min(self.log)

    def as_dict(self, nbytes: int, records: int) -> dict[str, Any]:
        def side(times: list[float]) -> dict[str, Any]:
            med = statistics.median(times)
            return {
                "seconds": [round(t, 4) for t in times],
                "median_s": round(med, 4),
                "best_s": round(min(times), 4),
                "median_mib_s": round(nbytes / med / MiB, 1),
                "best_mib_s": round(nbytes / min(times) / MiB, 1),
                "median_records_s": round(records / med),
            }

        return {
            "bytes": nbytes,
            "records": records,
            "log": side(self.log),
            "raw": side(self.raw),
            "ratio_median": round(self.ratio_median(), 3),
            "ratio_best": round(self.ratio_best(), 3),
        }


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_rounds(rounds: int, sides: Sequence[Callable[[], float]]) -> list[list[float]]:
    """``rounds`` rounds, each running every side once: in the given order in even
    rounds and reversed in odd ones (ABBA), so no side always follows another."""
    times: list[list[float]] = [[] for _ in sides]
    order = list(range(len(sides)))
    for r in range(rounds):
        for i in order if r % 2 == 0 else reversed(order):
            times[i].append(sides[i]())
    return times


def run_paired(rounds: int, log_fn: Callable[[], float], raw_fn: Callable[[], float]) -> Paired:
    raw, lg = run_rounds(rounds, [raw_fn, log_fn])
    return Paired(lg, raw)


# --- 1. append ------------------------------------------------------------------------


def append_log(directory: str, work: Workload, n: int, config: LogConfig,
               leader_epoch: int | None) -> tuple[Log, float]:
    lg = Log.open(directory, config)
    append = lg.append
    batch = work.batch
    gc.collect()
    start = time.perf_counter()
    for i in range(n):
        append(batch(i), leader_epoch=leader_epoch)
    return lg, time.perf_counter() - start


def append_raw(path: str, work: Workload, n: int) -> float:
    fd = os.open(path, OPEN_FLAGS, 0o644)
    try:
        writev = os.writev
        batch = work.batch
        gc.collect()
        start = time.perf_counter()
        for i in range(n):
            buf = batch(i)
            if writev(fd, [buf]) != len(buf):
                raise OSError("short write")
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def append_crc_raw(path: str, work: Workload, n: int) -> float:
    """The floor of a validating append: CRC-32C of every batch, then the raw writev."""
    fd = os.open(path, OPEN_FLAGS, 0o644)
    try:
        writev, crc, at = os.writev, crc32c.crc32c, rb.ATTRIBUTES_AT
        batch = work.batch
        gc.collect()
        start = time.perf_counter()
        for i in range(n):
            buf = batch(i)
            if crc(memoryview(buf)[at:]) != rb.read_header(buf).crc:
                raise AssertionError("bad CRC")
            if writev(fd, [buf]) != len(buf):
                raise OSError("short write")
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def bench_append(root: str, work: Workload, n: int, rounds: int, config: LogConfig,
                 leader_epoch: int | None) -> dict[str, Any]:
    segments: list[int] = []
    counter = itertools.count()

    def log_side() -> float:
        directory = os.path.join(root, f"append-log-{next(counter)}")
        lg, seconds = append_log(directory, work, n, config, leader_epoch)
        segments.append(len(lg.segments))
        lg.delete()  # closes without fsync and removes the files: their pages go too
        return seconds

    def raw_side() -> float:
        return append_raw(os.path.join(root, f"append-raw-{next(counter)}.bin"), work, n)

    def crc_side() -> float:
        return append_crc_raw(os.path.join(root, f"append-crc-{next(counter)}.bin"), work, n)

    # Warm-up at full size: on a VM the first touch of guest memory is several times
    # slower than reusing page-cache pages that a deleted file just gave back.
    log_side(), raw_side(), crc_side()
    segments.clear()
    raw, lg, crc = run_rounds(rounds, [raw_side, log_side, crc_side])
    nbytes, records = n * work.batch_bytes, n * work.records_per_batch
    out = Paired(lg, raw).as_dict(nbytes, records)
    out["crc_floor"] = Paired(crc, raw).as_dict(nbytes, records)
    out["segments"] = segments
    out["batches"] = n
    out["overhead_us_per_batch"] = round(
        (statistics.median(lg) - statistics.median(raw)) / n * 1e6, 1
    )
    return out


# --- 2. read --------------------------------------------------------------------------


def _next_offset_after(fd: int, position: int, length: int) -> int | None:
    """Where the next fetch starts: the base offset of the batch that follows the region
    in the file (one 12-byte pread, whatever the number of batches in the region), or
    None at the end of the file. A broker needs none of this (the consumer works out
    its next offset); the benchmark pays it on the log side only, to stay honest."""
    peek = os.pread(fd, rb.LOG_OVERHEAD_SIZE, position + length)
    if len(peek) < rb.LOG_OVERHEAD_SIZE:
        return None
    return int(rb.LOG_OVERHEAD.unpack(peek)[0])


def _last_next_offset(fd: int, position: int, length: int) -> int:
    """Fallback at the end of a segment file: walk the headers of the region."""
    end = position + length
    header = None
    while position < end:
        header = rb.read_header(os.pread(fd, rb.HEADER_SIZE, position))
        position += header.size
    assert header is not None
    return header.next_offset


def _sendfile_all(out_fd: int, in_fd: int, position: int, length: int) -> None:
    while length:
        sent = os.sendfile(out_fd, in_fd, position, length)
        if sent <= 0:
            raise OSError(f"sendfile moved {sent} bytes")
        position += sent
        length -= sent


class ReadSides:
    """The four readers; each returns (bytes moved, offsets covered) for checking."""

    def __init__(self, lg: Log, null_fd: int) -> None:
        self.lg = lg
        self.null_fd = null_fd
        self.paths = [s.log_path for s in lg.segments]
        self.expected = (lg.size_bytes, lg.log_end_offset - lg.log_start_offset)
        self.regions = 0  # regions per pass of a log reader

    def log_pread(self) -> tuple[int, int]:
        lg = self.lg
        offset = start = lg.log_start_offset
        end = lg.log_end_offset
        total = regions = 0
        read, pread = lg.read, os.pread
        while offset < end:
            region = read(offset, READ_CHUNK).region
            assert region is not None
            fd, position, length = region.fd, region.position, region.length
            total += len(pread(fd, length, position))  # copied, then freed, as raw does
            nxt = _next_offset_after(fd, position, length)
            offset = nxt if nxt is not None else _last_next_offset(fd, position, length)
            regions += 1
        self.regions = regions
        return total, offset - start

    def log_sendfile(self) -> tuple[int, int]:
        lg = self.lg
        offset = start = lg.log_start_offset
        end = lg.log_end_offset
        total = regions = 0
        read, null = lg.read, self.null_fd
        while offset < end:
            region = read(offset, READ_CHUNK).region
            assert region is not None
            fd, position, length = region.fd, region.position, region.length
            _sendfile_all(null, fd, position, length)
            total += length
            nxt = _next_offset_after(fd, position, length)
            offset = nxt if nxt is not None else _last_next_offset(fd, position, length)
            regions += 1
        self.regions = regions
        return total, offset - start

    def _raw(self, move: Callable[[int, int, int], int]) -> tuple[int, int]:
        total = 0
        for path in self.paths:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                pos = 0
                while pos < size:
                    pos += move(fd, pos, min(READ_CHUNK, size - pos))
                total += pos
            finally:
                os.close(fd)
        return total, self.expected[1]

    def raw_pread(self) -> tuple[int, int]:
        pread = os.pread
        return self._raw(lambda fd, pos, n: len(pread(fd, n, pos)))

    def raw_sendfile(self) -> tuple[int, int]:
        sendfile, null = os.sendfile, self.null_fd
        return self._raw(lambda fd, pos, n: sendfile(null, fd, pos, n))

    def timed_checked(self, fn: Callable[[], tuple[int, int]]) -> float:
        result: tuple[int, int] = (0, 0)

        def run() -> None:
            nonlocal result
            result = fn()

        seconds = timed(run)
        if result != self.expected:
            raise AssertionError(f"{fn.__name__} moved {result}, expected {self.expected}")
        return seconds


def bench_read(root: str, work: Workload, n: int, rounds: int, config: LogConfig,
               leader_epoch: int | None) -> dict[str, Any]:
    directory = os.path.join(root, "read-log")
    lg, _ = append_log(directory, work, n, config, leader_epoch)
    # Sync first so that write-back of the fresh data does not run during timed reads.
    fsync_s = timed(lg.flush)
    null_fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        sides = ReadSides(lg, null_fd)
        for fn in (sides.raw_pread, sides.log_pread, sides.raw_sendfile, sides.log_sendfile):
            sides.timed_checked(fn)  # warm-up: every page in cache, every index loaded
        nbytes, records = sides.expected
        out: dict[str, Any] = {"segments": len(lg.segments), "fsync_before_s": round(fsync_s, 3)}
        for name, log_fn, raw_fn in (
            ("pread", sides.log_pread, sides.raw_pread),
            ("sendfile", sides.log_sendfile, sides.raw_sendfile),
        ):
            paired = run_paired(
                rounds,
                functools.partial(sides.timed_checked, log_fn),
                functools.partial(sides.timed_checked, raw_fn),
            )
            out[name] = paired.as_dict(nbytes, records)
            regions = sides.regions
            out[name]["regions"] = regions
            out[name]["overhead_us_per_region"] = round(
                (statistics.median(paired.log) - statistics.median(paired.raw)) / regions * 1e6, 1
            )
        return out
    finally:
        os.close(null_fd)
        lg.delete()


# --- 3. recovery ----------------------------------------------------------------------


def crc_scan(paths: Sequence[str]) -> int:
    """The floor of a full validation: read every byte in RECOVERY_CHUNK preads and
    CRC-32C it (one checksum per chunk: no per-batch work at all)."""
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            pos = 0
            while chunk := os.pread(fd, RECOVERY_CHUNK, pos):
                crc32c.crc32c(chunk)
                pos += len(chunk)
            total += pos
        finally:
            os.close(fd)
    return total


def bench_recovery(root: str, work: Workload, n: int, rounds: int, config: LogConfig,
                   leader_epoch: int | None) -> dict[str, Any]:
    directory = os.path.join(root, "recovery-log")
    lg, _ = append_log(directory, work, n, config, leader_epoch)
    end_offset, nbytes = lg.log_end_offset, lg.size_bytes
    paths = [s.log_path for s in lg.segments]
    close_s = timed(lg.close)  # a clean close: fsync of everything just written

    def reopen(clean: bool) -> float:
        opened: list[Log] = []
        seconds = timed(lambda: opened.append(
            Log.open(directory, config, clean_shutdown=clean, recovery_point=0)
        ))
        reopened = opened[0]
        if reopened.log_end_offset != end_offset or reopened.size_bytes != nbytes:
            raise AssertionError(
                f"reopen (clean={clean}) found end {reopened.log_end_offset}, "
                f"{reopened.size_bytes} bytes; expected {end_offset}, {nbytes}"
            )
        reopened.close()
        return seconds

    def raw() -> float:
        return timed(lambda: crc_scan(paths))

    try:
        reopen(False), raw()  # warm-up
        clean: list[float] = []

        def unclean_then_clean() -> float:
            seconds = reopen(False)
            clean.append(reopen(True))
            return seconds

        paired = run_paired(rounds, unclean_then_clean, raw)
        out = paired.as_dict(nbytes, n * work.records_per_batch)
        med = statistics.median(paired.log)
        out["unclean_s_per_gib"] = round(med / (nbytes / GiB), 3)
        out["clean_open_s"] = [round(t, 5) for t in clean]
        out["clean_open_median_ms"] = round(statistics.median(clean) * 1000, 2)
        out["close_with_fsync_s"] = round(close_s, 3)
        out["segments"] = len(paths)
        return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# --- report ---------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return f"{x:,.0f}"


def markdown(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    lines = [
        f"machine: {storage_machine_line(m)}",
        f"workload: {p['batch_bytes']:,}-byte uncompressed batches of "
        f"{p['records_per_batch']:,} records ({p['value_bytes']}-byte values, "
        f"{p['bytes_per_record']:.1f} B/record on disk), leader_epoch={p['leader_epoch']}, "
        f"segment.bytes={p['segment_bytes']:,}; {p['rounds']} rounds, raw and log alternating; "
        "page cache, no fsync",
        "",
        "| measurement | Odradek (median) | raw baseline (median) "
        "| log/raw (median of rounds) | log/raw (best vs best) |",
        "|---|---:|---:|---:|---:|",
    ]

    def row(label: str, r: dict[str, Any], key: str = "median_mib_s", unit: str = "MiB/s") -> None:
        lines.append(
            f"| {label} | {_fmt(r['log'][key])} {unit} | {_fmt(r['raw'][key])} {unit} "
            f"| {r['ratio_median']:.3f} | {r['ratio_best']:.3f} |"
        )

    if "append" in results:
        a = results["append"]
        gib = a["bytes"] / GiB
        row(f"append {gib:.2f} GiB: `Log.append` vs `os.writev`", a)
        row("append, records/s", a, "median_records_s", "rec/s")
        row("reference, no Odradek: CRC-32C check + `os.writev` vs `os.writev`", a["crc_floor"])
    if "read" in results:
        r = results["read"]
        row("read: `Log.read` + `os.pread` vs `os.pread` 1 MiB", r["pread"])
        row("read: `Log.read` + `os.sendfile` vs `os.sendfile` 1 MiB (to /dev/null)",
            r["sendfile"])
        row("read (sendfile), records/s", r["sendfile"], "median_records_s", "rec/s")
    if "recovery" in results:
        c = results["recovery"]
        mib = c["bytes"] / MiB
        row(f"recovery of {mib:,.0f} MiB: unclean `Log.open` vs pread + CRC-32C", c)
    lines.append("")
    if "append" in results:
        a = results["append"]
        lines.append(
            f"- append: {a['batches']:,} batches per round; Odradek costs "
            f"{a['overhead_us_per_batch']} µs more per batch than the raw writev; "
            f"segments per log round: {a['segments']}"
        )
    if "read" in results:
        r = results["read"]
        lines.append(
            f"- read: {r['pread']['regions']:,} regions per pass from {r['segments']} "
            f"segment(s); Odradek's cost per region over raw: "
            f"{r['pread']['overhead_us_per_region']} µs (pread), "
            f"{r['sendfile']['overhead_us_per_region']} µs (sendfile); fsync before reading "
            f"took {r['fsync_before_s']} s (not timed)"
        )
    if "recovery" in results:
        c = results["recovery"]
        lines.append(
            f"- recovery: unclean open (recovery_point=0) {c['log']['median_s']:.3f} s = "
            f"**{c['unclean_s_per_gib']:.3f} s per GiB** "
            f"({_fmt(c['log']['median_mib_s'])} MiB/s); clean-shutdown open "
            f"**{c['clean_open_median_ms']:.2f} ms**; the data was synced beforehand "
            f"(close with fsync: {c['close_with_fsync_s']} s), so this is validation work only"
        )
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--gib", type=float, default=1.0,
                    help="GiB appended per append round and read back (default 1)")
    ap.add_argument("--recovery-mib", type=float, default=None,
                    help="MiB of log to recover (default 512 x --gib)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per side (default 5)")
    ap.add_argument("--batch-kib", type=float, default=1024,
                    help="target batch size in KiB, header included (default 1024)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--distinct", type=int, default=4, help="distinct batches reused (4)")
    ap.add_argument("--leader-epoch", type=int, default=0,
                    help="leader epoch passed to Log.append; -1 passes None (default 0)")
    ap.add_argument("--segment-mib", type=float, default=None,
                    help="segment.bytes in MiB (default: LogConfig's 1 GiB)")
    ap.add_argument("--only", choices=("append", "read", "recovery"), action="append",
                    help="run only these parts (repeatable; default all)")
    ap.add_argument("--dir", default=tempfile.gettempdir(),
                    help="where the temporary logs go (default: the system temp dir)")
    ap.add_argument("--out", default=str(here / "results" / "storage.json"),
                    help="JSON results file (default bench/results/storage.json)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rounds < 1 or args.gib <= 0:
        raise SystemExit("--rounds must be at least 1 and --gib positive")
    config = LogConfig()
    if args.segment_mib is not None:
        config = LogConfig.from_kafka({"segment.bytes": int(args.segment_mib * MiB)})
    leader_epoch = None if args.leader_epoch < 0 else args.leader_epoch
    parts = args.only or ["append", "read", "recovery"]
    recovery_mib = args.recovery_mib if args.recovery_mib is not None else 512 * args.gib

    work = make_workload(int(args.batch_kib * 1024), args.value_bytes, args.distinct)
    n = max(1, int(args.gib * GiB) // work.batch_bytes)
    n_recovery = max(1, int(recovery_mib * MiB) // work.batch_bytes)

    need = int(1.2 * work.batch_bytes * max(n, n_recovery)) + 64 * MiB
    free = shutil.disk_usage(args.dir).free
    if free < need:
        raise SystemExit(f"{args.dir} has {free / GiB:.1f} GiB free; this run needs "
                         f"{need / GiB:.1f} GiB")

    root = tempfile.mkdtemp(prefix="odradek-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "storage",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": storage_machine_info(root),
        "params": {
            "gib": args.gib,
            "recovery_mib": recovery_mib,
            "rounds": args.rounds,
            "batch_bytes": work.batch_bytes,
            "records_per_batch": work.records_per_batch,
            "value_bytes": work.value_bytes,
            "bytes_per_record": round(work.bytes_per_record, 2),
            "distinct_batches": len(work.batches),
            "leader_epoch": leader_epoch,
            "segment_bytes": config.segment_bytes,
            "read_chunk": READ_CHUNK,
            "recovery_chunk": RECOVERY_CHUNK,
        },
    }
    try:
        if "append" in parts:
            note(f"append: {args.rounds} rounds x {n} batches per side ...")
            results["append"] = bench_append(root, work, n, args.rounds, config, leader_epoch)
        if "read" in parts:
            note(f"read: {n} batches, {args.rounds} rounds per method ...")
            results["read"] = bench_read(root, work, n, args.rounds, config, leader_epoch)
        if "recovery" in parts:
            note(f"recovery: {n_recovery} batches, {args.rounds} rounds ...")
            results["recovery"] = bench_recovery(root, work, n_recovery, args.rounds, config,
                                                 leader_epoch)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
