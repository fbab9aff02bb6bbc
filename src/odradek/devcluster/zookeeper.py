"""A private ZooKeeper: Debian's ``zookeeper`` package (3.8) run as a plain ``java``
process with its own zoo.cfg, data directory and log. No service manager, no root. It
can be stopped, restarted on the same port and data (sessions survive: ZooKeeper keeps
them in its transaction log, as it does its znodes) and paused (SIGSTOP). Starting
takes 0.25-0.5 s here (JVM start to serving ``srvr``)."""

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

from odradek.devcluster.processes import (
    ClusterError,
    free_port,
    port_in_use,
    read_log,
    spawn,
    stop_process,
)

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
# Debian's zookeeper.jar names its dependencies in its manifest's Class-Path (netty,
# jute, slf4j-api, ...), so it needs no more than itself and a logging binding:
# slf4j-simple writes to stderr (the log here); without a binding SLF4J logs nothing.
# Measured: this classpath and all 500 jars of /usr/share/java start equally fast
# (~0.3 s), but all of them bind SLF4J to whichever of six bindings comes first.
CLASSPATH = [ZOOKEEPER_JAR, JAVA_DIR / "slf4j-simple.jar"]
INSTALL_HINT = ("starting a ZooKeeper needs java and Debian's zookeeper package "
                "(`apt-get install zookeeper`)")
# A small heap and the quick JIT tier: a development ensemble holds a few thousand znodes.
JVM_OPTIONS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


class ZooKeeperError(ClusterError):
    """The private ZooKeeper could not be started."""


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
    """One standalone ZooKeeper in ``directory`` (its zoo.cfg, ``data/`` and
    ``zookeeper.log`` go there), on ``port`` (default: a free one, chosen once).

    ``tick_time_ms`` is small so brokers can ask for short sessions (ZooKeeper grants
    between 2 and ``max_session_timeout_ms`` / tick ticks)."""

    install_hint = INSTALL_HINT

    def __init__(self, directory: Path | str, *, port: int | None = None,
                 tick_time_ms: int = 200, max_session_timeout_ms: int = 60_000,
                 start_timeout_s: float = 30.0, die_with_parent: bool = False) -> None:
        self.directory = Path(directory)
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.start_timeout_s = start_timeout_s
        self.die_with_parent = die_with_parent
        self.port = port or free_port()
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

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended by itself (None while it runs)."""
        return self._process.poll() if self._process is not None else None

    def _command(self) -> list[str]:
        java = shutil.which("java")
        missing = [str(jar) for jar in CLASSPATH if not jar.exists()]
        if java is None or missing:
            raise ZooKeeperError(f"{self.install_hint}; missing: "
                                 f"{', '.join(missing) or 'java'}")
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
        if port_in_use(self.port):
            raise ZooKeeperError(f"cannot start ZooKeeper: port {self.port} of 127.0.0.1 "
                                 "is in use")
        self._write_config()
        started = time.monotonic()
        self._process = spawn(command, self.log_path, cwd=self.directory,
                               die_with_parent=self.die_with_parent)
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

    def _fail(self, message: str) -> None:
        raise ZooKeeperError(f"{message}\n--- {self.log_path} (tail):\n{self.output(tail=60)}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it is still there after ``timeout_s``; always waits
        for the process it started."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None and self._paused:
            # A stopped process keeps SIGTERM pending until it runs again.
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
        stop_process(process, timeout_s)
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
        return read_log(self.log_path, tail)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
