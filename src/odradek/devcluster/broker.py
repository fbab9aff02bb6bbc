"""One ``python -m odradek serve`` subprocess, its output appended to a log file; ready
when it prints its "listening on HOST:PORT" line (which a broker in a cluster prints once
it has registered in ZooKeeper)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from odradek.devcluster.processes import ClusterError, port_in_use, read_log, spawn

BROKER_START_TIMEOUT_S = 60.0  # to the "listening on" line: startup joins the cluster
BROKER_STOP_TIMEOUT_S = 60.0  # SIGTERM to exit: a controlled shutdown waits up to 15 s
_LISTENING = re.compile(r"listening on (\S+):(\d+)\s*$", re.MULTILINE)


class BrokerProcess:
    """One ``odradek serve`` subprocess: node ``node_id`` of a cluster (None: a single
    broker, no ``node.id`` given), data in ``data_dir``, output appended to ``log_path``
    (stderr to ``stderr_path`` instead, if given), on ``port`` of 127.0.0.1 (0: a free
    one, which later starts keep). ``settings`` become ``--override NAME=VALUE``
    options, ``args`` follow them as they are, and ``argv_prefix`` is a command the
    broker's command line is appended to, which must ``exec`` it (so the pid is the
    broker's): tests/netcut.py's puts it in a cgroup of its own, metrics_bench.py's runs
    it under valgrind. ``env`` is added to this process's environment (ab_bench.py's
    PYTHONPATH runs another source tree)."""

    def __init__(self, node_id: int | None, data_dir: Path, log_path: Path, *,
                 port: int = 0, settings: Mapping[str, Any] | None = None,
                 args: Sequence[str] = (), argv_prefix: Sequence[str] = (),
                 stderr_path: Path | None = None, env: Mapping[str, str] | None = None,
                 die_with_parent: bool = False) -> None:
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.stderr_path = None if stderr_path is None else Path(stderr_path)
        self.port = port
        self.host = "127.0.0.1"
        self.settings = dict(settings or {})
        self.args = list(args)
        self.argv_prefix = list(argv_prefix)
        self.env = dict(env or {})
        self.die_with_parent = die_with_parent
        self.process: subprocess.Popen[bytes] | None = None
        self.killed = False  # by kill(): no clean exit expected
        self._log_offset = 0  # where this start's output begins in the log
        self._stderr_offset = 0  # ... and in stderr_path

    @property
    def name(self) -> str:
        return "the broker" if self.node_id is None else f"broker {self.node_id}"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def command(self) -> list[str]:
        args = [*self.argv_prefix, sys.executable, "-m", "odradek", "serve",
                "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir)]
        settings = dict(self.settings)
        if self.node_id is not None:
            settings["node.id"] = self.node_id
        for name, value in settings.items():
            args += ["--override", f"{name}={value}"]
        return [*args, *self.args]

    def start(self) -> None:
        """Start the process; ``wait_ready`` waits for it to serve."""
        if self.running:
            raise ClusterError(f"{self.name} is running")
        if self.port and port_in_use(self.port):
            raise ClusterError(f"cannot start {self.name}: port {self.port} of "
                               "127.0.0.1 is in use")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log_offset = _size(self.log_path)
        self._stderr_offset = _size(self.stderr_path)
        self.killed = False
        # Unbuffered, so the log shows what a broker said before it died.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.process = spawn(self.command(), self.log_path, stderr_path=self.stderr_path,
                              env=env, die_with_parent=self.die_with_parent)

    def this_start(self, stderr: bool = False) -> str:
        """What this start printed so far (to stderr: if it goes to a file of its own)."""
        path, offset = ((self.stderr_path, self._stderr_offset) if stderr
                        else (self.log_path, self._log_offset))
        if path is None:
            return ""
        try:
            with open(path, "rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def listening(self) -> tuple[str, int] | None:
        """The address this start's "listening on" line named, once printed."""
        match = _LISTENING.search(self.this_start())
        return (match.group(1), int(match.group(2))) if match else None

    def wait_ready(self, deadline: float, interrupted: Callable[[], bool] = lambda: False,
                   ) -> None:
        """Wait for the "listening on" line (the broker has registered in ZooKeeper);
        ClusterError with the log's tail if it exits or ``deadline`` passes first."""
        while True:
            address = self.listening()
            if address is not None:
                self.host, self.port = address  # a later start listens on the same port
                return
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ClusterError(f"{self.name} exited with code {code} before "
                                   f"it was ready\n{self.describe_log()}")
            if interrupted():
                raise ClusterError("interrupted")
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.name} was not ready within "
                                   f"{BROKER_START_TIMEOUT_S:.0f}s\n{self.describe_log()}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = BROKER_STOP_TIMEOUT_S,
             hurry: Callable[[], bool] = lambda: False) -> int | None:
        """SIGTERM (the broker does a controlled shutdown) and wait; SIGKILL if it does
        not exit within ``timeout_s`` (or as soon as ``hurry()``). Returns its exit code,
        None if it was not running; ClusterError if it had to be killed."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while process.poll() is None and time.monotonic() < deadline and not hurry():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.2)
        if process.poll() is None:
            why = "when told to hurry" if hurry() else f"after {timeout_s:.0f}s"
            process.kill()
            process.wait()
            raise ClusterError(f"{self.name} (pid {process.pid}) had not stopped "
                               f"{why} and was killed\n{self.describe_log()}")
        return process.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would: no controlled shutdown, no flush."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
            self.killed = True

    def output(self, tail: int | None = None) -> str:
        """Everything the broker printed (every start's); the last ``tail`` lines."""
        return read_log(self.log_path, tail)

    def describe_log(self, lines: int = 40) -> str:
        text = f"--- {self.log_path} (tail):\n{self.output(tail=lines)}"
        if self.stderr_path is not None:
            text += f"\n--- {self.stderr_path} (tail):\n{read_log(self.stderr_path, lines)}"
        return text


def _size(path: Path | None) -> int:
    return path.stat().st_size if path is not None and path.exists() else 0
