"""Moving a partition's log between log directories (AlterReplicaLogDirs) against a
plain copy of its files: how much the batch-by-batch move costs over the floor of
copying the bytes.

Both sides copy the same log (``--mib`` of 1 KiB records in ~1 MiB batches, segments of
the default size) from one directory to another of the same file system, from the page
cache, round after round in alternating order (ABBA), in one process:

- ``move``: ``LogManager.start_future`` / ``copy_to_future`` (1 MiB steps) /
  ``finish_move``: every batch read, CRC-checked and appended as a follower appends,
  the copy synced and swapped in; then moved back, untimed, for the next round;
- ``copy``: ``shutil.copytree`` of the partition's directory (``copy_file_range`` in
  the kernel) followed by an fsync of every copied file, the least any move must do.

Printed: seconds per side per round, and the median move/copy ratio.

Run: ``.venv/bin/python bench/log_move_bench.py [--mib 256] [--rounds 4]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from odradek.records import builder
from odradek.storage import LogManager


def fill(manager: LogManager, mib: int) -> None:
    lg = manager.get_or_create_log("moving", 0)
    values = [os.urandom(512).hex().encode() for _ in range(1000)]  # ~1 MiB per batch
    for _ in range(mib):
        lg.append(builder.build_simple(values), leader_epoch=0)
    lg.flush()


def move(manager: LogManager, to: str) -> float:
    started = time.perf_counter()
    manager.start_future("moving", 0, to)
    while not manager.copy_to_future("moving", 0):
        pass
    manager.futures[("moving", 0)].sync()
    manager.finish_move("moving", 0)
    return time.perf_counter() - started


def copy(source: str, target: str) -> float:
    started = time.perf_counter()
    shutil.copytree(source, target)
    for name in os.listdir(target):
        fd = os.open(os.path.join(target, name), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    elapsed = time.perf_counter() - started
    shutil.rmtree(target)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odradek-move-bench-",
                                     dir=os.environ.get("BENCH_DIR")) as tmp:
        dirs = [os.path.join(tmp, "a"), os.path.join(tmp, "b")]
        with LogManager.open(dirs) as manager:
            manager.prefer_dir("moving", 0, dirs[0])
            fill(manager, args.mib)
            size = manager.get_log("moving", 0).size_bytes
            print(f"log of {size / 2**20:.0f} MiB, {args.rounds} rounds (ABBA)")
            ratios = []
            for r in range(args.rounds):
                here = manager.dir_of("moving", 0)
                there = next(d for d in dirs if d != here)
                source = os.path.join(here, "moving-0")
                target = os.path.join(there, "copy-0")
                if r % 2 == 0:
                    c = copy(source, target)
                    m = move(manager, there)
                else:
                    m = move(manager, there)
                    c = copy(os.path.join(there, "moving-0"), os.path.join(here, "copy-0"))
                ratios.append(m / c)
                print(f"round {r + 1}: move {m:.2f} s ({size / 2**20 / m:.0f} MiB/s), "
                      f"copy {c:.2f} s ({size / 2**20 / c:.0f} MiB/s), move/copy {m / c:.2f}")
            print(f"median move/copy: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
