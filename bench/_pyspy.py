"""py-spy profiles of a benchmark's broker, read without py-spy's own idle test.

``start_py_spy`` records a process's Python stacks in py-spy's raw format;
``profile_summary`` turns them into the share of busy samples each function and module
is in. On this VM py-spy's idle test (the thread's state in /proc) let every waiting
thread through (all came out busy 100% of the time), so a sample whose deepest Python
frame is a wait (``IDLE_LEAVES``) is counted as idle instead. Samples are wall-clock:
a process that waits for a CPU is sampled as busy, so shares of a broker sharing its
CPUs overweight where it yields (socket sends); pin it to a CPU of its own (``pin``)
for a figure close to its CPU time. Used by producers_bench.py's ``--profile``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PROFILE_RATE = 250  # py-spy samples per second


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` onto ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(tid), cpus)


def start_py_spy(pid: int, seconds: float, out: Path,
                 native: bool = False) -> subprocess.Popen[bytes]:
    """``py-spy record`` of process ``pid`` for ``seconds`` into ``out`` (raw stacks,
    full file names, no line numbers), in a session of its own; the caller stops it by
    its pid if it has to."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which(
        "py-spy")
    if py_spy is None:
        raise RuntimeError("--profile needs py-spy: .venv/bin/pip install py-spy")
    proc = subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
         "--rate", str(PROFILE_RATE), "--format", "raw", "--full-filenames", "--nolineno",
         "--output", str(out), *(["--native"] if native else [])],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    return proc


_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*)\)$")


def module_of(path: str) -> str:
    """A dotted module name for a source path: under site-packages or src/, or the
    standard library's directory; else the file's name."""
    path = path.replace("\\", "/")
    for marker in ("/site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            rest = path.split(marker, 1)[1]
            if marker == "/lib/python3":
                rest = rest.split("/", 1)[1] if "/" in rest else rest
            break
    else:
        rest = path.rsplit("/", 1)[-1]
    rest = rest.removesuffix(".py").removesuffix("/__init__")
    return rest.replace("/", ".")


def module_group(module: str) -> str:
    """Odradek's modules to 3 levels (odradek.server.handlers), others to their package."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[0] == "odradek" else parts[0]


# A thread whose top frame is one of these is waiting, not running: py-spy's own idle
# test (the thread's state in /proc) let them all through here (every thread came out
# busy 100% of the time), so they are told by the frame instead.
IDLE_LEAVES = frozenset({
    "Condition.wait (threading)", "Lock.acquire (threading)", "Event.wait (threading)",
    "Queue.get (queue)", "EpollSelector.select (selectors)", "PollSelector.select (selectors)",
    "_worker (concurrent.futures.thread)", "sleep (time)",
})
# Frames under which everything runs: left out of the top functions (not of the totals).
ENTRY_FRAMES = frozenset({
    "_run_module_as_main (<frozen runpy>)", "_run_code (<frozen runpy>)",
    "<module> (odradek.__main__)", "main (odradek.cli.main)", "_serve (odradek.cli.main)",
    "run (asyncio.runners)", "Runner.run (asyncio.runners)",
    "BaseEventLoop.run_until_complete (asyncio.base_events)",
    "BaseEventLoop.run_forever (asyncio.base_events)", "Thread._bootstrap (threading)",
    "Thread._bootstrap_inner (threading)", "Thread.run (threading)",
})


def profile_summary(raw: Path, top: int = 25) -> dict[str, Any]:
    """py-spy's raw stacks (``frame;frame;... count``, root first) summarized over the busy
    samples (top frame not in ``IDLE_LEAVES``): the share of them each function is on the
    stack in (inclusive) and at the top of (self), entry frames left out of the list;
    the same by module group. Thread and process roots are ignored."""
    total = idle = 0
    incl: Counter[str] = Counter()
    own: Counter[str] = Counter()
    mod_incl: Counter[str] = Counter()
    mod_own: Counter[str] = Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        frames = []
        for f in stack.split(";"):
            m = _FRAME.match(f)
            if m is None:
                continue
            if m["func"].startswith(("thread ", "process ")) and not m["file"].endswith(".py"):
                continue
            mod = module_of(m["file"])
            python = m["file"].endswith(".py") or m["file"].startswith("<")
            frames.append((f"{m['func']} ({mod})", module_group(mod), python))
        if not frames:
            continue
        # The deepest Python frame tells a wait (with --native, C frames follow it).
        if next((f for f, _, py in reversed(frames) if py), None) in IDLE_LEAVES:
            idle += count
            continue
        total += count
        for name in {f for f, _, _ in frames}:
            incl[name] += count
        for group in {g for _, g, _ in frames}:
            mod_incl[group] += count
        own[frames[-1][0]] += count
        mod_own[frames[-1][1]] += count

    def pct(x: int) -> float:
        return round(100 * x / total, 1) if total else 0.0

    listed = [(f, c) for f, c in incl.most_common() if f not in ENTRY_FRAMES][:top]
    return {
        "samples": total, "idle_samples": idle,
        "top_inclusive": [{"function": f, "inclusive_pct": pct(c), "self_pct": pct(own[f])}
                          for f, c in listed],
        "top_self": [{"function": f, "self_pct": pct(c), "inclusive_pct": pct(incl[f])}
                     for f, c in own.most_common(top)],
        "by_module": [{"module": g, "self_pct": pct(c), "inclusive_pct": pct(mod_incl[g])}
                      for g, c in mod_own.most_common()],
    }
