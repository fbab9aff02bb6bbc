"""Processes of a development or test cluster: started with their output appended to a
log file, in a session of their own (optionally dying with their parent), stopped with
SIGTERM and, after a timeout, SIGKILL by their pid; and the ports they listen on."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO


class ClusterError(RuntimeError):
    """A process of the cluster could not be started, or did not stop cleanly."""


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether binding ``host:port`` fails the way the broker's own bind would (with
    SO_REUSEADDR, as asyncio binds: a port in TIME_WAIT is free)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def read_log(path: Path, tail: int | None = None) -> str:
    """A process's log file (empty if not written yet); only its last ``tail`` lines."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-tail:]) if tail else text


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    # PR_SET_PDEATHSIG: SIGTERM when the process that started us dies, even by SIGKILL,
    # so a killed `odradek cluster up` leaves no brokers or ZooKeeper behind.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def spawn(command: list[str], log_path: Path, *, stderr_path: Path | None = None,
           cwd: Path | None = None, env: Mapping[str, str] | None = None,
           die_with_parent: bool = False) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output appended to ``log_path`` (its stderr to
    ``stderr_path`` if given), in a session of its own: a Ctrl-C in the terminal reaches
    only whoever started it, which then stops the process in its own order. Files, never
    pipes: a chatty process cannot block on a full pipe, and what it said before dying
    stays readable."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as files:
        log = files.enter_context(open(log_path, "ab"))
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: "
                  f"{' '.join(command)}\n".encode())
        log.flush()
        errors: IO[bytes] | int = subprocess.STDOUT
        if stderr_path is not None:
            errors = files.enter_context(open(stderr_path, "ab"))
        return subprocess.Popen(
            command, cwd=cwd, env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL, stdout=log, stderr=errors,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux"
            else None)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, bool]:
    """SIGTERM and wait; SIGKILL (by its pid) after ``timeout_s``. Returns (exit code,
    whether it had to be killed)."""
    if process.poll() is not None:
        return process.returncode, False
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout_s), False
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(), True
