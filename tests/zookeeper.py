"""A private, real ZooKeeper server for tests: Debian's ``zookeeper`` package (3.8) run
as a plain ``java`` process on a free 127.0.0.1 port with its own data directory. No
service manager, no root, no Docker.

    with ZooKeeperServer(tmp_path) as zk:
        store = ZooKeeperStore(zk.connect_string, ...)

It can be stopped, restarted on the same port and data (sessions survive a restart:
ZooKeeper keeps them in its transaction log, as it does its znodes) and paused
(SIGSTOP) to look like a hung server. Its log is kept (``output()``) for failure
reports. Starting takes 0.25-0.5 s here (median 0.37 s, JVM start to serving ``srvr``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import pytest

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
# Debian's zookeeper.jar names its dependencies in its manifest's Class-Path (netty,
# jute, slf4j-api, ...), so it needs no more than itself and a logging binding:
# slf4j-simple writes to stderr (the log here); without a binding SLF4J logs nothing.
# Measured: this classpath and all 500 jars of /usr/share/java start equally fast
# (~0.3 s), but all of them bind SLF4J to whichever of six bindings comes first.
CLASSPATH = [ZOOKEEPER_JAR, JAVA_DIR / "slf4j-simple.jar"]
INSTALL_HINT = ("the ZooKeeper tests need Debian's zookeeper package "
                "(`apt-get install zookeeper`; scripts/test.sh installs it)")

# A small heap and the quick JIT tier: a test server holds a few hundred znodes.
JVM_OPTIONS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send one of ZooKeeper's four-letter commands (whitelisted in zoo.cfg) and return
    its answer; "" if nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One standalone ZooKeeper in ``directory`` (its zoo.cfg, data and log go there).

    ``tick_time_ms`` is small so tests can ask for short sessions (ZooKeeper grants
    between 2 and ``max_session_timeout_ms`` / tick ticks)."""

    def __init__(self, directory: Path, *, tick_time_ms: int = 200,
                 max_session_timeout_ms: int = 60_000, start_timeout_s: float = 30.0) -> None:
        self.directory = Path(directory)
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.start_timeout_s = start_timeout_s
        self.port = _free_port()
        self.data_dir = self.directory / "data"
        self.config_path = self.directory / "zoo.cfg"
        self.log_path = self.directory / "zookeeper.log"
        self.start_seconds: list[float] = []  # how long each start took, for the curious
        self._process: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _command(self) -> list[str]:
        java = shutil.which("java")
        missing = [str(jar) for jar in CLASSPATH if not jar.exists()]
        if java is None or missing:
            pytest.fail(f"{INSTALL_HINT}; missing: {', '.join(missing) or 'java'}",
                        pytrace=False)
        return [
            java, *JVM_OPTIONS, "-cp", ":".join(str(jar) for jar in CLASSPATH),
            # No AdminServer (it would take port 8080) and no fsync per transaction: the
            # log still reaches the OS, which is all a restart of the process needs.
            "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.forceSync=no",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.config_path),
        ]

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat",
            # No snapshot purging or leader election to wait for: one standalone server.
            "",
        ]))

    def start(self) -> None:
        """Start the server and wait until it serves requests (``start_timeout_s``)."""
        if self.running:
            return
        command = self._command()
        self._write_config()
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting: {' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command, cwd=self.directory, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        self._paused = False
        deadline = started + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._fail(f"ZooKeeper exited with status {self._process.returncode}")
            # "srvr" answers "Mode: standalone" once the server serves requests (and
            # "not currently serving requests" before); "ruok" says only it is up.
            # A probe that lands while the server is still starting can go unanswered
            # for a second; a short timeout and a new probe is quicker.
            if "Mode: standalone" in four_letter_word(self.port, "srvr", timeout=0.2):
                self.start_seconds.append(time.monotonic() - started)
                return
            time.sleep(0.02)
        self.stop()
        self._fail(f"ZooKeeper did not serve on {self.connect_string} "
                   f"within {self.start_timeout_s}s")

    def _fail(self, message: str) -> NoReturn:
        pytest.fail(f"{message}\n--- {self.log_path} (tail):\n{self.output(tail=60)}",
                    pytrace=False)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it is still there after ``timeout_s``; always waits
        for the process it started."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            if self._paused:
                # A stopped process keeps SIGTERM pending until it runs again.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._paused = False

    def restart(self) -> None:
        """Stop and start again on the same port and data directory."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a hung server)."""
        if self._process is None or not self.running:
            raise RuntimeError("ZooKeeper is not running")
        os.kill(self._process.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        if self._process is not None and self._paused:
            os.kill(self._process.pid, signal.SIGCONT)
        self._paused = False

    def ensure_running(self) -> None:
        """Back to serving, whatever a (failed) test left it in."""
        self.resume()
        if not self.running:
            self.start()

    def output(self, tail: int | None = None) -> str:
        """The server's log (every start's, in order); the last ``tail`` lines."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-tail:]) if tail else text

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
