"""Kafka Connect and MirrorMaker 2 processes for tests and benchmarks, started from the
jars scripts/fetch_jvm.sh copies from jvm/connect/pom.xml into ``.cache/connect/lib``
(Connect 4.3.1 with its own kafka-clients, a classpath apart from ``.cache/jvm/lib``),
with ``java -cp`` and the main classes Kafka's own scripts run:

- ``ConnectWorker``: ``org.apache.kafka.connect.cli.ConnectDistributed`` (what
  connect-distributed.sh starts) with a worker properties file; several workers with one
  ``group.id`` form a Connect cluster. Ready when its REST API lists connectors (the
  worker has joined its group and read its config topic).
- ``ConnectRest``: the REST API as an operator uses it (create, pause, resume, restart,
  delete; connector and task status), retrying the answers Connect gives while its group
  rebalances (409, 503).
- ``MirrorMaker``: ``org.apache.kafka.connect.mirror.MirrorMaker`` (connect-mirror-maker.sh)
  with an ``mm2.properties``: MirrorMaker 2's dedicated driver.

Each process's output goes to a log file in its directory (never a pipe); ``output(tail)``
shows the end of it for failure messages. Stopped by pid: SIGTERM, then SIGKILL after
``STOP_TIMEOUT``; ``kill()`` is SIGKILL at once (a crashed worker).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from odradek.devcluster.jvm import REPO, JvmError, java
from odradek.devcluster.processes import free_port, read_log, spawn, stop_process

CONNECT_VERSION = "4.3.1"  # jvm/connect/pom.xml (connect-mirror 4.4.0 is not served here)
CONNECT_LIB = Path(os.environ.get("ODRADEK_CONNECT_LIB")
                   or REPO / ".cache" / "connect" / "lib")
STARTUP_TIMEOUT = 120.0  # seconds: a cold JVM on two busy cores, joining its group
STOP_TIMEOUT = 30.0  # seconds between SIGTERM and SIGKILL
REST_TIMEOUT = 30.0  # seconds for one REST call, retries included
# connect-distributed.sh's KAFKA_HEAP_OPTS is -Xms256M -Xmx2G; a test's workers are small.
HEAP = ["-Xms128m", "-Xmx768m"]
DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
MIRROR_MAKER = "org.apache.kafka.connect.mirror.MirrorMaker"
# Connect logs at INFO through slf4j-simple into the process's log file: its rebalances,
# task starts and producer fencing are what a failing test needs to show.
LOGGING = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
           "-Dorg.slf4j.simpleLogger.showDateTime=true",
           "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
           # The clients' config dumps are most of an INFO log and say nothing new.
           "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config.AbstractConfig=warn",
           "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.producer.ProducerConfig=warn",
           "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.consumer.ConsumerConfig=warn",
           "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.admin.AdminClientConfig=warn"]
FETCH_HINT = "run bash scripts/fetch_jvm.sh"


def connect_jars_present() -> bool:
    return CONNECT_LIB.is_dir() and any(CONNECT_LIB.glob("connect-runtime-*.jar"))


def require_connect_jars() -> None:
    if not connect_jars_present():
        raise JvmError(f"Kafka Connect's jars are not in {CONNECT_LIB}: {FETCH_HINT}")


def connect_command(main_class: str, *args: str) -> list[str]:
    require_connect_jars()
    return [java(), *HEAP, *LOGGING, "-cp", str(CONNECT_LIB / "*"), main_class, *args]


def write_properties(path: Path, settings: Mapping[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class ConnectRestError(RuntimeError):
    def __init__(self, status: int, body: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body}")
        self.status = status
        self.body = body


class ConnectRest:
    """Connect's REST API at ``url`` (http://HOST:PORT). Every call retries the answers a
    Connect cluster gives while it rebalances or forwards to a leader it has not found yet
    (409 Conflict, 503, a refused connection) for up to ``REST_TIMEOUT``."""

    RETRY = frozenset({409, 500, 503})

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def call(self, method: str, path: str, body: object = None, *,
             timeout: float = REST_TIMEOUT, retry: bool = True) -> Any:
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + timeout
        while True:
            request = urllib.request.Request(
                self.url + path, data=data, method=method,
                headers={"Content-Type": "application/json", "Accept": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as answer:
                    text = answer.read().decode()
                    return json.loads(text) if text else None
            except urllib.error.HTTPError as exc:
                error: Exception = ConnectRestError(exc.code, exc.read().decode(errors="replace"),
                                                    method, path)
                if not retry or exc.code not in self.RETRY:
                    raise error from None
            except OSError as exc:  # not listening yet, or a worker going away
                error = exc
            if time.monotonic() > deadline:
                raise error
            time.sleep(0.25)

    # --- connectors -------------------------------------------------------------------

    def connectors(self) -> list[str]:
        return sorted(self.call("GET", "/connectors"))

    def put_config(self, name: str, config: Mapping[str, str]) -> dict[str, Any]:
        """Create or update connector ``name`` (PUT .../config: the same call twice does
        not fail as a second POST /connectors would)."""
        return self.call("PUT", f"/connectors/{_q(name)}/config", dict(config))

    def config(self, name: str) -> dict[str, str]:
        return self.call("GET", f"/connectors/{_q(name)}/config")

    def status(self, name: str) -> dict[str, Any]:
        return self.call("GET", f"/connectors/{_q(name)}/status")

    def pause(self, name: str) -> None:
        self.call("PUT", f"/connectors/{_q(name)}/pause")

    def resume(self, name: str) -> None:
        self.call("PUT", f"/connectors/{_q(name)}/resume")

    def stop(self, name: str) -> None:
        self.call("PUT", f"/connectors/{_q(name)}/stop")

    def restart(self, name: str, *, include_tasks: bool = True) -> Any:
        flag = "true" if include_tasks else "false"
        return self.call("POST", f"/connectors/{_q(name)}/restart?includeTasks={flag}")

    def restart_task(self, name: str, task: int) -> None:
        self.call("POST", f"/connectors/{_q(name)}/tasks/{task}/restart")

    def delete(self, name: str) -> None:
        self.call("DELETE", f"/connectors/{_q(name)}")

    def offsets(self, name: str) -> dict[str, Any]:
        return self.call("GET", f"/connectors/{_q(name)}/offsets")

    def wait_state(self, name: str, state: str, *, tasks: int | None = None,
                   timeout: float = 90.0) -> dict[str, Any]:
        """Wait until the connector and (at least ``tasks``, default all listed) tasks are
        in ``state`` (RUNNING, PAUSED, STOPPED); returns that status. A FAILED task ends
        the wait at once with its trace."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = self.status(name)
            except ConnectRestError as exc:
                if exc.status != 404:  # not created yet, as the herder sees it
                    raise
                time.sleep(0.25)
                continue
            listed = last.get("tasks", [])
            failed = [t for t in listed if t["state"] == "FAILED"]
            if failed:
                raise AssertionError(f"{name}: task failed: {failed}")
            in_state = [t for t in listed if t["state"] == state]
            wanted = len(listed) if tasks is None else tasks
            if (last["connector"]["state"] == state and len(in_state) >= wanted
                    and (state == "STOPPED" or wanted > 0)):
                return last
            time.sleep(0.25)
        raise TimeoutError(f"{name} not {state} within {timeout:.0f}s: {last}")


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class ConnectWorker:
    """One Connect worker in distributed mode. ``settings`` override the defaults below
    (Kafka's names; see docs/operations.md, "Running Kafka Connect")."""

    def __init__(self, directory: Path | str, bootstrap: str, *,
                 group_id: str = "connect-cluster", replication_factor: int = 1,
                 settings: Mapping[str, object] | None = None, port: int = 0) -> None:
        self.directory = Path(directory)
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.replication_factor = replication_factor
        self.overrides = dict(settings or {})
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds = 0.0
        self._began = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def worker_id(self) -> str:
        """How Connect names this worker in statuses (its advertised REST host:port)."""
        return f"127.0.0.1:{self.port}"

    @property
    def rest(self) -> ConnectRest:
        return ConnectRest(self.url)

    @property
    def log_file(self) -> Path:
        return self.directory / "connect.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def settings(self) -> dict[str, object]:
        rf = self.replication_factor
        base: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group_id,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{self.group_id}-configs",
            "offset.storage.topic": f"{self.group_id}-offsets",
            "status.storage.topic": f"{self.group_id}-status",
            "config.storage.replication.factor": rf,
            "offset.storage.replication.factor": rf,
            "status.storage.replication.factor": rf,
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": self.port,
            # Source offsets flushed every second, not every minute: a restarted task
            # resumes close to where it was.
            "offset.flush.interval.ms": 1000,
            # A departed worker's tasks wait this long for it to come back before they
            # are given to the others (Kafka's default is five minutes).
            "scheduled.rebalance.max.delay.ms": 3000,
            # The connectors are on the classpath: found by scanning it, no service
            # loader manifests needed (and no warnings about missing ones).
            "plugin.discovery": "only_scan",
        }
        base.update(self.overrides)
        return base

    def start(self, timeout: float = STARTUP_TIMEOUT) -> ConnectWorker:
        """``spawn`` and ``wait_ready``; stopped again if it does not get ready."""
        self.spawn()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self) -> None:
        """Start the JVM, not waiting for it (several workers start side by side)."""
        write_properties(self.directory / "worker.properties", self.settings())
        self._began = time.monotonic()
        self.process = spawn(connect_command(DISTRIBUTED,
                                             str(self.directory / "worker.properties")),
                             self.log_file, cwd=self.directory, die_with_parent=True)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Until GET /connectors answers 200: the herder has joined the group and read
        the config topic (before that Connect answers 503 or 409, or is not listening)."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"Connect worker exited with code "
                                   f"{self.process.returncode} while starting\n"
                                   f"{self.output()}")
            try:
                self.rest.call("GET", "/connectors", timeout=5.0, retry=False)
                self.startup_seconds = time.monotonic() - self._began
                return
            except (ConnectRestError, OSError) as exc:
                last = exc
            time.sleep(0.5)
        raise TimeoutError(f"Connect worker not ready within {timeout:.0f}s "
                           f"(last: {last!r})\n{self.output()}")

    def stop(self) -> int | None:
        """SIGTERM (Connect leaves its group and stops its tasks), SIGKILL after
        ``STOP_TIMEOUT``. Returns the exit code (Connect exits 143 on SIGTERM, as the
        JVM does)."""
        if self.process is None:
            return None
        return stop_process(self.process, STOP_TIMEOUT)[0]

    def kill(self) -> None:
        """SIGKILL, by pid: a crashed worker."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def output(self, tail: int = 80) -> str:
        return (f"--- Connect worker {self.worker_id} ({self.log_file}) tail ---\n"
                + read_log(self.log_file, tail))

    def __enter__(self) -> ConnectWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mirror_maker_settings(source: tuple[str, str], target: tuple[str, str], topics: str,
                          *, replication_factor: int = 1,
                          extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """An mm2.properties for one flow: ``source`` -> ``target`` (each (alias,
    bootstrap)), ``topics`` (a regex list) mirrored, the other direction off, every topic
    MirrorMaker makes (mirrored topics, checkpoints, heartbeats, offset syncs, its
    Connect topics) with ``replication_factor`` replicas; ``extra`` (Kafka's names) on
    top."""
    (src, src_bootstrap), (dst, dst_bootstrap) = source, target
    rf = replication_factor
    return {
        "clusters": f"{src},{dst}",
        f"{src}.bootstrap.servers": src_bootstrap,
        f"{dst}.bootstrap.servers": dst_bootstrap,
        f"{src}->{dst}.enabled": "true",
        f"{dst}->{src}.enabled": "false",
        f"{src}->{dst}.topics": topics,
        "replication.factor": rf,
        "checkpoints.topic.replication.factor": rf,
        "heartbeats.topic.replication.factor": rf,
        "offset-syncs.topic.replication.factor": rf,
        "offset.storage.replication.factor": rf,
        "status.storage.replication.factor": rf,
        "config.storage.replication.factor": rf,
        **(extra or {}),
    }


class MirrorMaker:
    """MirrorMaker 2's dedicated driver with ``settings`` as its mm2.properties (Kafka's
    names: ``clusters``, ``A.bootstrap.servers``, ``A->B.enabled``, ...). It has no REST
    API to wait on unless asked for one, so callers wait for its effects (mirrored topics,
    checkpoints)."""

    def __init__(self, directory: Path | str, settings: Mapping[str, object]) -> None:
        self.directory = Path(directory)
        self.settings = dict(settings)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.directory / "mirror-maker.log"

    def start(self) -> MirrorMaker:
        path = write_properties(self.directory / "mm2.properties", self.settings)
        self.process = spawn(connect_command(MIRROR_MAKER, str(path)), self.log_file,
                             cwd=self.directory, die_with_parent=True)
        return self

    def assert_alive(self) -> None:
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            raise AssertionError(f"MirrorMaker exited with code {code}\n{self.output()}")

    def stop(self) -> int | None:
        if self.process is None:
            return None
        return stop_process(self.process, STOP_TIMEOUT)[0]

    def output(self, tail: int = 80) -> str:
        return f"--- MirrorMaker ({self.log_file}) tail ---\n" + read_log(self.log_file, tail)

    def __enter__(self) -> MirrorMaker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
