"""Kafka's checkpoint files: the data directory's ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint`` and
``cleaner-offset-checkpoint``, and (through ``write_lines``/``read_lines``) each
partition's ``leader-epoch-checkpoint``.

Format (Kafka's CheckpointFile): a version line (0), a count line, then one entry per
line: ``<topic> <partition> <offset>`` for the offset checkpoints, ``<epoch>
<start offset>`` for the leader epochs. Written whole to a temporary file, fsynced and
renamed over the old one, so a crash leaves either the old or the new file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

VERSION = 0

TopicPartition = tuple[str, int]


def write_lines(path: str, entries: Sequence[str], *, sync: bool = True) -> None:
    """Replace ``path`` with a version-0 checkpoint holding ``entries`` (one line each).

    ``sync=False`` skips both fsyncs, for derived files that are rebuilt when they turn
    out missing or malformed (a crash may leave either); the rename is still atomic."""
    lines = [str(VERSION), str(len(entries)), *entries]
    write_atomically(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def write_atomically(path: str, data: bytes, *, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: written to a temporary file (created with ``mode``),
    fsynced, renamed over it and the directory fsynced, so a crash leaves the old file
    or the new one (the broker's JSON stores use it too). ``sync=False`` skips the
    fsyncs; the rename is still atomic."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # e.g. a full disk: leave no half-written file behind
        raise
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_lines(path: str) -> list[str] | None:
    """The entry lines of a version-0 checkpoint, or None when the file does not exist.
    Raises ValueError when it is malformed (wrong version, count not matching)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a text checkpoint ({exc})") from None
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise ValueError(f"{path}: not a version {VERSION} offset checkpoint")
    try:
        count = int(lines[1])
    except ValueError:
        raise ValueError(f"{path}: bad entry count {lines[1]!r}") from None
    entries = lines[2 : 2 + count]
    if count < 0 or len(entries) != count:
        raise ValueError(f"{path}: says {count} entries but has {len(entries)}")
    return entries


def write_checkpoint(path: str, offsets: dict[TopicPartition, int]) -> None:
    write_lines(path, [f"{topic} {partition} {offset}" for (topic, partition), offset in
                       sorted(offsets.items())])


def read_checkpoint(path: str) -> dict[TopicPartition, int]:
    """Offsets from a checkpoint file; {} when it does not exist. A malformed file is an
    error: silently ignoring it would lose the recovery point."""
    entries = read_lines(path)
    out: dict[TopicPartition, int] = {}
    for line in entries or ():
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
