"""What every benchmark in bench/ shares: progress notes, the machine description that
goes beside every figure, and paths shown relative to where the command ran."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

MiB = 1024 * 1024


def note(msg: str) -> None:
    """Progress, on stderr (stdout carries the markdown table)."""
    print(msg, file=sys.stderr, flush=True)


def first_line_with(path: str, prefix: str) -> str | None:
    """The value of the first ``prefix: value`` line of a /proc file, if any."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine_info(**extra: Any) -> dict[str, Any]:
    """CPUs, memory, kernel and Python of this machine, plus ``extra`` facts."""
    mem_kib = first_line_with("/proc/meminfo", "MemTotal")
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": first_line_with("/proc/cpuinfo", "model name") or platform.processor(),
        "mem_gib": round(int(mem_kib.split()[0]) / MiB, 1) if mem_kib else None,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        **extra,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def machine_line(m: dict[str, Any], *details: str) -> str:
    """One line for docs/benchmarks.md: CPUs, memory, kernel, Python, then ``details``."""
    return ", ".join([
        f"{m['nproc']} CPUs ({m['cpu_model']})", f"{m['mem_gib']} GiB RAM",
        f"Linux {m['kernel']}", f"{m['python_implementation']} {m['python']}", *details,
    ])


def shown_path(path: str) -> str:
    """``path`` relative to the current directory when it lies inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
