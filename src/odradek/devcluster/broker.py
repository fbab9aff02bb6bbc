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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from odradek.devcluster.processes import ClusterError, _popen, _read_log, port_in_use

BROKER_START_TIMEOUT_S = 60.0  # to the "listening on" line: startup joins the cluster
BROKER_STOP_TIMEOUT_S = 60.0  # SIGTERM to exit: a controlled shutdown waits up to 15 s
_LISTENING = re.compile(r"listening on (\S+):(\d+)\s*$", re.MULTILINE)


class BrokerProcess:
    """One ``odradek serve`` subprocess of a cluster: node ``node_id``, data in
    ``data_dir``, output appended to ``log_path``, on ``port`` of 127.0.0.1 (0: a free
    one, which later starts keep)."""

    def __init__(self, node_id: int, data_dir: Path, log_path: Path, *, port: int = 0,
                 settings: Mapping[str, Any] | None = None,
                 die_with_parent: bool = False) -> None:
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.port = port
        self.settings = dict(settings or {})
        self.die_with_parent = die_with_parent
        self.process: subprocess.Popen[bytes] | None = None
        self.killed = False  # by kill(): no clean exit expected
        self._log_offset = 0  # where this start's output begins in the log

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

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
        args = [sys.executable, "-m", "odradek", "serve",
                "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir)]
        for name, value in {**self.settings, "node.id": self.node_id}.items():
            args += ["--override", f"{name}={value}"]
        return args

    def start(self) -> None:
        """Start the process; ``wait_ready`` waits for it to serve."""
        if self.running:
            raise ClusterError(f"broker {self.node_id} is running")
        if self.port and port_in_use(self.port):
            raise ClusterError(f"cannot start broker {self.node_id}: port {self.port} of "
                               "127.0.0.1 is in use")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.killed = False
        # Unbuffered, so the log shows what a broker said before it died.
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = _popen(self.command(), self.log_path, env=env,
                              die_with_parent=self.die_with_parent)

    def listening(self) -> tuple[str, int] | None:
        """The address this start's "listening on" line named, once printed."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode(errors="replace")
        except FileNotFoundError:
            return None
        match = _LISTENING.search(text)
        return (match.group(1), int(match.group(2))) if match else None

    def wait_ready(self, deadline: float, interrupted: Callable[[], bool] = lambda: False,
                   ) -> None:
        """Wait for the "listening on" line (the broker has registered in ZooKeeper);
        ClusterError with the log's tail if it exits or ``deadline`` passes first."""
        while True:
            address = self.listening()
            if address is not None:
                self.port = address[1]  # a later start listens on the same port
                return
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ClusterError(f"broker {self.node_id} exited with code {code} before "
                                   f"it was ready\n{self.describe_log()}")
            if interrupted():
                raise ClusterError("interrupted")
            if time.monotonic() > deadline:
                raise ClusterError(f"broker {self.node_id} was not ready within "
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
            raise ClusterError(f"broker {self.node_id} (pid {process.pid}) had not stopped "
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
        return _read_log(self.log_path, tail)

    def describe_log(self, lines: int = 40) -> str:
        return f"--- {self.log_path} (tail):\n{self.output(tail=lines)}"
