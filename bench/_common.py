"""What every benchmark in bench/ shares: progress notes, the machine description that
goes beside every figure, and paths shown relative to where the command ran."""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def proc_cpu_s(pid: int) -> float:
    """CPU time (user + system) of process ``pid``, all its threads, in seconds, to the
    nanosecond while its threads live.

    /proc/PID/stat's utime + stime is the kernel's exact on-CPU time cut to clock ticks
    (10 ms here): a consume of 2 M records costs Odradek ~0.1 s, so the ticks alone moved
    its figure by up to 20%. Each thread's /proc/PID/task/TID/schedstat gives the same time
    in nanoseconds; the ticks count threads that have ended too, so whatever they hold
    beyond the live threads' sum (more than the two ticks the cut can lose) is added."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks_s = (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)
    live_ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                live_ns += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile: the ticks have it
    live_s = live_ns / 1e9
    ended_s = ticks_s - live_s - 2 / CLK_TCK
    return live_s + ended_s if ended_s > 0 else live_s


def proc_sys_s(pid: int) -> float:
    """The part of ``proc_cpu_s`` spent in the kernel (stime: page-cache writes and their
    page faults, socket copies), to the clock tick (10 ms). On this VM a page the guest
    has not touched lately costs a fault to the host too, so this part moves with the
    machine's memory state from run to run; the rest (user time) is the broker's code."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[12]) / CLK_TCK  # field 15 of stat(5)


def proc_peak_rss_mib(pid: int) -> float:
    kib = first_line_with(f"/proc/{pid}/status", "VmHWM")
    return int(kib.split()[0]) / 1024 if kib else float("nan")


def proc_rss_mib(pid: int) -> float:
    """Current resident set (``VmRSS``) of process ``pid``, in MiB."""
    kib = first_line_with(f"/proc/{pid}/status", "VmRSS")
    return int(kib.split()[0]) / 1024 if kib else float("nan")


def self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def finish(results: dict[str, Any], table: str, out_path: str) -> int:
    """Record the end load average, write the JSON results, print the markdown table."""
    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    results["markdown"] = table
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(table)
    note(f"results written to {shown_path(str(out))}")
    return 0
