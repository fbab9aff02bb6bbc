"""The interop tier's broker: a real ``odradek serve`` process, as operators run it.

Unlike ``odradek.testing.running_broker`` (a broker thread inside pytest), the fixtures
here start ``python -m odradek serve --listen 127.0.0.1:0`` as a subprocess, read the
port it bound from its "listening on HOST:PORT" line, and on teardown stop it with
SIGTERM and require a clean exit (code 0). The broker's stdout and stderr are drained by
threads (so a chatty broker can never block on a full pipe) and attached to the report of
any failing test that used it.

- ``odradek_server`` (module scope): one broker shared by a test module.
- ``fresh_odradek_server`` (function scope): a broker of the test's own.
- ``start_broker(data_dir, *extra_args)``: the context manager behind both, for tests
  that need settings (``--override NAME=VALUE``) or restarts; ``BrokerProcess.kill()``
  crashes it (SIGKILL) and excuses it from the clean exit.
- ``run_tool(argv, ...)``: runs an external client (kcat, node) with a timeout and fails
  with its full output if it exits non-zero.
- ``require_tool(name, ...)``: the path of a client program. A missing program fails the
  test (``scripts/test.sh`` installs it), unless this machine cannot have it at all (no
  package manager to install it with, outside CI): only then does the test skip.
- ``stored_batches(broker, topic, partition)``: the batch headers the broker wrote for a
  partition (via ``odradek dump-log``), to see which codec and producer a client used.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STARTUP_TIMEOUT = 30.0  # seconds for the "listening on" line
STOP_TIMEOUT = 20.0  # seconds between SIGTERM and a clean exit
TOOL_TIMEOUT = 120.0  # seconds for one run of an external client

_LISTENING = re.compile(r"listening on (\S+):(\d+)\s*$")
_LISTENER = re.compile(r"listener (\S+)://(\S*):(\d+) \(")


@dataclass
class BrokerProcess:
    """A running ``odradek serve`` subprocess."""

    bootstrap: str  # "127.0.0.1:PORT"
    host: str
    port: int
    process: subprocess.Popen[str]
    data_dir: Path
    stdout_lines: list[str] = field(default_factory=list)
    stderr_lines: list[str] = field(default_factory=list)
    killed: bool = False  # by kill(): no clean exit is expected

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        """Everything the broker printed so far, stdout then stderr."""
        return _format_output(self.stdout_lines, self.stderr_lines)

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would: no shutdown, no flush."""
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT)
        self.killed = True

    def listener(self, name: str) -> str:
        """"127.0.0.1:PORT" of the listener ``name`` (from the banner's "listener
        NAME://HOST:PORT (PROTOCOL)" lines: a listener on port 0 binds any free port)."""
        for line in self.stdout_lines:
            match = _LISTENER.match(line)
            if match and match.group(1) == name.upper():
                return f"{match.group(2)}:{match.group(3)}"
        raise AssertionError(f"no listener {name} in the banner\n{self.output()}")

    def metrics_url(self) -> str:
        """The banner's "metrics http://HOST:PORT/metrics" (metrics.listen)."""
        for line in self.stdout_lines:
            if line.startswith("metrics http://"):
                return line.split(" ", 1)[1].strip()
        raise AssertionError(f"no metrics line in the banner\n{self.output()}")

    def assert_alive(self) -> None:
        code = self.process.poll()
        assert code is None, f"broker exited early with code {code}\n{self.output()}"


def _format_output(stdout_lines: list[str], stderr_lines: list[str]) -> str:
    return ("--- odradek stdout ---\n" + "".join(stdout_lines)
            + "--- odradek stderr ---\n" + "".join(stderr_lines))


def _drain(stream, sink: list[str], on_line=None) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        if on_line is not None:
            on_line(line)
    stream.close()


@contextmanager
def start_broker(data_dir: Path | str, *extra_args: str,
                 argv_prefix: Sequence[str] | None = None) -> Iterator[BrokerProcess]:
    """Run ``odradek serve`` on 127.0.0.1 and a free port until the block ends.

    On exit: SIGTERM, wait up to ``STOP_TIMEOUT``, and assert exit code 0. A broker that
    hangs is killed (by its pid) and the test fails.

    ``argv_prefix``: a command the broker's command line is appended to, which must
    ``exec`` it (so the pid is the broker's), e.g. ``tests/netcut.py``'s, which starts it
    in a cgroup of its own.
    """
    data_dir = Path(data_dir)
    argv = [*(argv_prefix or ()), sys.executable, "-m", "odradek", "serve",
            "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra_args]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    stdout_lines: list[str] = []
    stderr_lines: list[str] = []
    address: list[tuple[str, int]] = []
    ready = threading.Event()

    def on_stdout(line: str) -> None:
        match = _LISTENING.search(line)
        if match and not address:
            address.append((match.group(1), int(match.group(2))))
            ready.set()

    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, stdout_lines, on_stdout),
                         name="odradek-stdout", daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, stderr_lines),
                         name="odradek-stderr", daemon=True),
    ]
    for reader in readers:
        reader.start()

    def output() -> str:
        return _format_output(stdout_lines, stderr_lines)

    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not ready.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            break
    if not address:
        exited = proc.poll()
        _stop(proc, readers)
        why = (f"exited with code {exited}" if exited is not None
               else f"was stopped after {STARTUP_TIMEOUT:.0f}s")
        pytest.fail(f"odradek serve {why} before reporting its address: {argv}\n{output()}")

    host, port = address[0]
    broker = BrokerProcess(f"{host}:{port}", host, port, proc, data_dir,
                           stdout_lines, stderr_lines)
    try:
        yield broker
    finally:
        code, hung = _stop(proc, readers)
        if not broker.killed:
            if hung:
                pytest.fail(f"odradek serve (pid {proc.pid}) ignored SIGTERM for "
                            f"{STOP_TIMEOUT:.0f}s and was killed\n{output()}")
            assert code == 0, f"odradek serve exited with code {code}\n{output()}"


def _stop(proc: subprocess.Popen[str], readers: Sequence[threading.Thread]) -> tuple[int, bool]:
    """SIGTERM, wait, SIGKILL (by pid) if it hangs. Returns (exit code, hung)."""
    hung = False
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            hung = True
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT)
    for reader in readers:
        reader.join(timeout=5)
    return proc.returncode, hung


@pytest.fixture(scope="module")
def odradek_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One ``odradek serve`` process for the whole test module."""
    with start_broker(tmp_path_factory.mktemp("odradek-data")) as broker:
        yield broker


@pytest.fixture
def fresh_odradek_server(tmp_path: Path) -> Iterator[BrokerProcess]:
    """An ``odradek serve`` process of this test's own."""
    with start_broker(tmp_path / "odradek-data") as broker:
        yield broker


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the output of the broker(s) a failing test used to its report."""
    report = yield
    if report.failed:
        for name in ("odradek_server", "fresh_odradek_server"):
            broker = getattr(item, "funcargs", {}).get(name)
            if isinstance(broker, BrokerProcess):
                report.sections.append((f"{name} (pid {broker.pid}) output", broker.output()))
    return report


def run_tool(argv: Sequence[str], *, input: str | None = None,
             timeout: float = TOOL_TIMEOUT, check: bool = True,
             cwd: str | Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run an external client; on a non-zero exit (if ``check``) or a timeout, fail the
    test with the command line and everything it printed."""
    try:
        done = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd, env=env,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out after {timeout:.0f}s: {' '.join(argv)}\n"
                    f"--- stdout ---\n{_text(exc.stdout)}\n--- stderr ---\n{_text(exc.stderr)}")
    if check and done.returncode != 0:
        pytest.fail(f"exit code {done.returncode}: {' '.join(argv)}\n"
                    f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}")
    return done


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def require_tool(name: str, *, installable: bool, install_hint: str) -> str:
    """The path of program ``name``. Missing: fail (in CI, or where ``installable``, that
    is where scripts/test.sh would have installed it), else skip."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} is not installed; {install_hint}"
    if os.environ.get("CI") or installable:
        pytest.fail(message)
    pytest.skip(f"{message} (and this machine cannot install it)")


_BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) "
                    r"producerId: (-?\d+) .* compresscodec: (\w+)")


@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    count: int
    base_sequence: int
    producer_id: int
    codec: str


def stored_batches(broker: BrokerProcess, topic: str, partition: int) -> list[StoredBatch]:
    """The record batches of ``topic``-``partition`` as the broker stored them, read from
    its segment files with ``odradek dump-log`` (a separate process; the files are only
    read)."""
    segments = sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log"))
    assert segments, f"no segment files for {topic}-{partition} in {broker.data_dir}"
    done = run_tool([sys.executable, "-m", "odradek", "dump-log", *map(str, segments)])
    batches = []
    for line in done.stdout.splitlines():
        match = _BATCH.match(line)
        if match:
            *numbers, codec = match.groups()
            batches.append(StoredBatch(*map(int, numbers), codec))
    return batches
