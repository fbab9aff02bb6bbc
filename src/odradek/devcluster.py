"""A whole cluster on one machine, for development and tests: a private ZooKeeper and N
``odradek serve`` processes on consecutive (or free) ports of 127.0.0.1.

This module owns the processes and the waits between them, once, for its three users:
``odradek cluster up`` (cli/cluster.py), the ``running_cluster`` fixture of
``odradek.testing``, and the test suite's own ZooKeeper (tests/zookeeper.py).

- ``ZooKeeperServer``: Debian's ``zookeeper`` package (3.8) run as a plain ``java``
  process with its own zoo.cfg, data directory and log. No service manager, no root.
  It can be stopped, restarted on the same port and data (sessions survive: ZooKeeper
  keeps them in its transaction log, as it does its znodes) and paused (SIGSTOP).
  Starting takes 0.25-0.5 s here (JVM start to serving ``srvr``).
- ``BrokerProcess``: one ``python -m odradek serve`` subprocess, its output appended to a
  log file; ready when it prints its "listening on HOST:PORT" line (which a broker in a
  cluster prints once it has registered in ZooKeeper).
- ``DevCluster``: ZooKeeper (unless given one) plus the brokers, started together, ready
  once every broker's own Metadata lists every broker; a broker can be stopped and started
  again on the same port; ``close`` stops the brokers one at a time, the controller last
  (each does a controlled shutdown), then ZooKeeper.

Failures are ``ClusterError`` (ZooKeeper's: ``ZooKeeperError``) with the tail of the log
that explains them; callers turn them into an exit code or a failed test.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

DEFAULT_BASE_PORT = 9092
DEFAULT_CHROOT = "/odradek"

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

BROKER_START_TIMEOUT_S = 60.0  # to the "listening on" line: startup joins the cluster
BROKER_STOP_TIMEOUT_S = 60.0  # SIGTERM to exit: a controlled shutdown waits up to 15 s
REGISTER_TIMEOUT_S = 60.0  # every broker seeing every other
_LISTENING = re.compile(r"listening on (\S+):(\d+)\s*$", re.MULTILINE)

# Development clusters notice a dead broker in seconds rather than Kafka's 18 s, and
# keep few internal-topic partitions (each is a log per replica to create and move).
# ``odradek.testing`` starts from these; ``odradek cluster up`` keeps Kafka's.
FAST_SETTINGS: dict[str, Any] = {
    "zookeeper.session.timeout.ms": 4000,
    "zookeeper.connection.timeout.ms": 10000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 200,
    "replica.socket.timeout.ms": 5000,
    "offsets.topic.num.partitions": 4,
    "transaction.state.log.num.partitions": 4,
    "group.initial.rebalance.delay.ms": 0,
    "controlled.shutdown.retry.backoff.ms": 2000,
}


class ClusterError(RuntimeError):
    """A process of the cluster could not be started, or did not stop cleanly."""


class ZooKeeperError(ClusterError):
    """The private ZooKeeper could not be started."""


def cluster_defaults(brokers: int) -> dict[str, Any]:
    """The replication settings a cluster of ``brokers`` brokers should run with: Kafka's
    production values (3 replicas, 2 in sync for acks=all) where there are enough
    brokers, smaller where there are not (Kafka refuses to create its internal topics
    with fewer brokers than their replication factor)."""
    replicas = min(3, brokers)
    in_sync = max(1, min(2, replicas - 1))  # one replica may be down without refusing writes
    return {
        "default.replication.factor": replicas,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": in_sync,
        "min.insync.replicas": in_sync,
    }


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


def _read_log(path: Path, tail: int | None = None) -> str:
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


def _popen(command: list[str], log_path: Path, *, cwd: Path | None = None,
           env: Mapping[str, str] | None = None,
           die_with_parent: bool = False) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output appended to ``log_path``, in a session of its
    own: a Ctrl-C in the terminal reaches only whoever started it, which then stops the
    process in its own order."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: "
                  f"{' '.join(command)}\n".encode())
        log.flush()
        return subprocess.Popen(
            command, cwd=cwd, env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux"
            else None)


def _stop_process(process: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, bool]:
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


# --- ZooKeeper ---------------------------------------------------------------------------


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
        self._process = _popen(command, self.log_path, cwd=self.directory,
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
        _stop_process(process, timeout_s)
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
        return _read_log(self.log_path, tail)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


# --- brokers -------------------------------------------------------------------------------


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


# --- the cluster ---------------------------------------------------------------------------


class DevCluster:
    """ZooKeeper (unless ``zookeeper`` names one: ``HOST:PORT[,...][/CHROOT]``) and
    ``size`` brokers, node ids 1..size, data under ``root``:

        root/zookeeper/     zoo.cfg, data/, zookeeper.log
        root/broker-N/      broker N's data directory
        root/logs/broker-N.log

    Ports: ``base_port``, ``base_port + 1``, ... (``base_port=0``: free ones). The same
    ``root`` again is the same cluster: ZooKeeper's data holds the cluster id the brokers'
    meta.properties remember."""

    def __init__(self, root: Path | str, size: int = 3, *, zookeeper: str | None = None,
                 base_port: int = DEFAULT_BASE_PORT, settings: Mapping[str, Any] | None = None,
                 zookeeper_tick_ms: int = 200, die_with_parent: bool = False) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one broker")
        self.root = Path(root)
        self.size = size
        self.base_port = base_port
        self.die_with_parent = die_with_parent
        self.zookeeper: ZooKeeperServer | None = None
        if zookeeper is None:
            self.zookeeper = ZooKeeperServer(self.root / "zookeeper",
                                             tick_time_ms=zookeeper_tick_ms,
                                             die_with_parent=die_with_parent)
        self._zookeeper_connect = zookeeper
        self.settings = {**cluster_defaults(size), **(settings or {})}
        self.brokers: dict[int, BrokerProcess] = {}
        for node in range(1, size + 1):
            self.brokers[node] = BrokerProcess(
                node, self.root / f"broker-{node}", self.root / "logs" / f"broker-{node}.log",
                port=base_port + node - 1 if base_port else 0,
                die_with_parent=die_with_parent)
        self.cluster_id: str | None = None
        self._lock: Any = None

    @property
    def zookeeper_connect(self) -> str:
        """The ``zookeeper.connect`` the brokers use (with its chroot)."""
        if self._zookeeper_connect is not None:
            return self._zookeeper_connect
        assert self.zookeeper is not None
        return self.zookeeper.connect_string + DEFAULT_CHROOT

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated, for ``bootstrap.servers``."""
        return ",".join(b.bootstrap for b in self.brokers.values() if b.port)

    def check_ports(self) -> None:
        """ClusterError naming every fixed broker port already in use."""
        taken = [b.port for b in self.brokers.values() if b.port and port_in_use(b.port)]
        if taken:
            ports = ", ".join(str(p) for p in taken)
            raise ClusterError(
                f"port{'s' if len(taken) > 1 else ''} {ports} of 127.0.0.1 "
                f"{'are' if len(taken) > 1 else 'is'} in use (another broker or cluster "
                "running?); stop it or choose other ports")

    def _lock_root(self) -> None:
        """Hold ``root/.lock`` while the cluster runs: two clusters on one directory
        would start two ZooKeepers on one data directory."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        lock = open(self.root / ".lock", "a+")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise ClusterError(f"{self.root} is in use by another cluster (odradek cluster "
                               "up?); stop it or choose another data directory") from None
        self._lock = lock

    def _unlock_root(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # closing releases the lock

    def _broker_settings(self) -> dict[str, Any]:
        return {**self.settings, "zookeeper.connect": self.zookeeper_connect}

    def start(self, interrupted: Callable[[], bool] = lambda: False,
              on_zookeeper: Callable[[], None] | None = None) -> None:
        """Start ZooKeeper and every broker and wait until each broker sees all of them.
        On failure everything started is stopped again before ClusterError is raised."""
        self._lock_root()
        try:
            self.check_ports()
        except ClusterError:
            self._unlock_root()
            raise
        try:
            if self.zookeeper is not None:
                self.zookeeper.start()
            if on_zookeeper is not None:
                on_zookeeper()
            for node in self.brokers:
                # Started together: each takes a second or two of interpreter start.
                self.start_broker(node, wait=False)
            deadline = time.monotonic() + BROKER_START_TIMEOUT_S
            for broker in self.brokers.values():
                broker.wait_ready(deadline, interrupted)
            self.wait_registered(interrupted=interrupted)
        except BaseException:
            with contextlib.suppress(ClusterError):
                self.close()
            raise

    def start_broker(self, node: int, *, wait: bool = True) -> BrokerProcess:
        """Start broker ``node`` (again: on the port it had); with ``wait``, until it
        serves and every running broker sees it."""
        broker = self.brokers[node]
        broker.settings = self._broker_settings()
        broker.start()
        if wait:
            broker.wait_ready(time.monotonic() + BROKER_START_TIMEOUT_S)
            self.wait_registered()
        return broker

    def stop_broker(self, node: int) -> int | None:
        """SIGTERM broker ``node`` (a controlled shutdown) and wait for it to exit;
        its exit code."""
        return self.brokers[node].stop()

    def running_brokers(self) -> list[BrokerProcess]:
        return [b for b in self.brokers.values() if b.running]

    def wait_registered(self, timeout_s: float = REGISTER_TIMEOUT_S,
                        interrupted: Callable[[], bool] = lambda: False) -> None:
        """Until the Metadata of every running broker lists every running broker (a
        broker's view of ZooKeeper can lag it by a moment; a topic created through it
        meanwhile would find too few brokers)."""
        from odradek.client.codec import METADATA
        from odradek.client.connection import BrokerConnection, KafkaClientError

        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while True:
            running = self.running_brokers()
            wanted = {b.node_id for b in running}
            try:
                seen: dict[int, set[int]] = {}
                for broker in running:
                    conn = BrokerConnection("127.0.0.1", broker.port,
                                            client_id="odradek-cluster", timeout_s=5)
                    try:
                        answer = conn.request(METADATA, {"topics": [],
                                                         "allow_auto_topic_creation": False})
                    finally:
                        conn.close()
                    seen[broker.node_id] = {b.node_id for b in answer.brokers}
                    self.cluster_id = answer.cluster_id
                lagging = {n: sorted(s) for n, s in seen.items() if s != wanted}
                if not lagging:
                    return
                last = "; ".join(f"broker {n} sees {s}" for n, s in lagging.items())
            except KafkaClientError as exc:
                last = str(exc)
            if interrupted():
                raise ClusterError("interrupted")
            if time.monotonic() > deadline:
                raise ClusterError(f"brokers {sorted(wanted)} did not all see each other "
                                   f"within {timeout_s:.0f}s: {last}")
            time.sleep(0.2)

    def controller(self) -> int:
        """The controller's node id, as a running broker says (-1 if none answers)."""
        from odradek.client.codec import METADATA
        from odradek.client.connection import BrokerConnection, KafkaClientError

        for broker in self.running_brokers():
            try:
                conn = BrokerConnection("127.0.0.1", broker.port,
                                        client_id="odradek-cluster", timeout_s=5)
            except KafkaClientError:
                continue
            try:
                answer = conn.request(METADATA, {"topics": [],
                                                 "allow_auto_topic_creation": False})
                return int(answer.controller_id)
            except KafkaClientError:
                continue
            finally:
                conn.close()
        return -1

    def stop_order(self) -> list[int]:
        """The running brokers, the controller last: each stop moves leadership to the
        brokers still up, and the controller moves only once, at the very end."""
        controller = self.controller()
        nodes = [b.node_id for b in self.running_brokers()]
        return sorted(nodes, key=lambda n: (n == controller, n))

    def close(self, on_stop: Callable[[int, int | None], None] | None = None,
              hurry: Callable[[], bool] = lambda: False) -> None:
        """Stop every broker (one at a time, the controller last), then ZooKeeper.
        ``on_stop(node, exit_code)`` after each broker; with ``hurry()`` true, the
        brokers still running are killed instead. ClusterError (after stopping
        everything) if a broker exited with an error or had to be killed."""
        problems: list[str] = []
        try:
            order = self.stop_order()
        except Exception:  # whatever the brokers answer, they are stopped
            order = [b.node_id for b in self.running_brokers()]
        for node in [*order, *(n for n in self.brokers if n not in order)]:
            broker = self.brokers[node]
            if broker.process is None:
                continue
            was_running = broker.running
            killed = broker.killed  # by the caller, before: no clean exit expected
            try:
                code = broker.stop(hurry=hurry)
            except ClusterError as exc:
                problems.append(str(exc))
                code, killed = broker.returncode, True
            if was_running and on_stop is not None:
                on_stop(node, code)
            if code not in (0, None) and not killed:
                problems.append(f"broker {node} exited with code {code}\n"
                                f"{broker.describe_log()}")
            broker.process = None
        if self.zookeeper is not None:
            self.zookeeper.stop()
        self._unlock_root()
        if problems:
            raise ClusterError("\n".join(problems))

    def dead(self) -> list[BrokerProcess]:
        """Brokers whose process has ended without being told to (crashed, killed)."""
        return [b for b in self.brokers.values()
                if b.process is not None and b.process.poll() is not None]

    def pids(self) -> Iterable[int]:
        """Every process this cluster started that still runs."""
        if self.zookeeper is not None and self.zookeeper.running and self.zookeeper.pid:
            yield self.zookeeper.pid
        for broker in self.running_brokers():
            assert broker.pid is not None
            yield broker.pid
