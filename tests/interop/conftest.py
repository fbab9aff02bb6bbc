"""The interop tier's broker: a real ``odradek serve`` process, as operators run it.

Unlike ``odradek.testing.running_broker`` (a broker thread inside pytest), the fixtures
here start ``python -m odradek serve --listen 127.0.0.1:0`` as a subprocess
(``odradek.devcluster.BrokerProcess``, the one launcher of brokers), read the port it
bound from its "listening on HOST:PORT" line, and on teardown stop it with SIGTERM and
require a clean exit (code 0). The broker's stdout and stderr go to files beside its
data directory (never a pipe a chatty broker could fill) and are attached to the report
of any failing test that used it.

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

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from odradek import devcluster

STARTUP_TIMEOUT = 30.0  # seconds for the "listening on" line
STOP_TIMEOUT = 20.0  # seconds between SIGTERM and a clean exit
TOOL_TIMEOUT = 120.0  # seconds for one run of an external client

_LISTENER = re.compile(r"listener (\S+)://(\S*):(\d+) \(")


class BrokerProcess(devcluster.BrokerProcess):
    """A running ``odradek serve`` subprocess (``odradek.devcluster``'s, which owns
    starting and stopping it), with what tests read of it: this start's output, its
    banner's listeners and metrics address."""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def stdout_lines(self) -> list[str]:
        """What this start printed to stdout (the banner), a line each, newlines kept."""
        return self.this_start().splitlines(keepends=True)

    @property
    def stderr_lines(self) -> list[str]:
        """What this start logged (stderr), a line each, newlines kept."""
        return self.this_start(stderr=True).splitlines(keepends=True)

    def output(self, tail: int | None = None) -> str:
        """Everything this start printed so far, stdout then stderr."""
        return ("--- odradek stdout ---\n" + self.this_start()
                + "--- odradek stderr ---\n" + self.this_start(stderr=True))

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
        code = self.returncode
        assert code is None, f"broker exited early with code {code}\n{self.output()}"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one scrape of a broker's ``metrics.listen`` (prometheus_client's
    own parser): (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def requests_by_version(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
                        request: str) -> dict[int, float]:
    """One API's requests answered, by version (RequestMetrics' request and version)."""
    out = {}
    for (name, labels), value in samples.items():
        tags = dict(labels)
        if name == "kafka_network_requestmetrics_requests_total" and tags["request"] == request:
            out[int(tags["version"])] = value
    return out


def requests_answered(url: str, request: str) -> float:
    """One API's requests answered so far, all versions (one scrape)."""
    return sum(requests_by_version(scrape(url), request).values())


@contextmanager
def start_broker(data_dir: Path | str, *extra_args: str,
                 argv_prefix: Sequence[str] | None = None, port: int = 0
                 ) -> Iterator[BrokerProcess]:
    """Run ``odradek serve`` on 127.0.0.1 and ``port`` (0: a free one) until the block
    ends. Its stdout and stderr go to ``<data_dir>.stdout`` and ``<data_dir>.stderr``
    beside the data directory (appended to by every start on it).

    On exit: SIGTERM, wait up to ``STOP_TIMEOUT``, and assert exit code 0. A broker that
    hangs is killed (by its pid) and the test fails; one the test killed
    (``BrokerProcess.kill``) is excused.

    ``argv_prefix``: a command the broker's command line is appended to, which must
    ``exec`` it (so the pid is the broker's), e.g. ``tests/netcut.py``'s, which starts it
    in a cgroup of its own.
    """
    data_dir = Path(data_dir)
    broker = BrokerProcess(None, data_dir, data_dir.with_name(data_dir.name + ".stdout"),
                           stderr_path=data_dir.with_name(data_dir.name + ".stderr"),
                           port=port, args=extra_args, argv_prefix=argv_prefix or ())
    try:
        broker.start()
        broker.wait_ready(time.monotonic() + STARTUP_TIMEOUT)
    except devcluster.ClusterError as exc:
        with contextlib.suppress(devcluster.ClusterError):
            broker.stop(timeout_s=STOP_TIMEOUT)
        pytest.fail(f"odradek serve did not report its address: {broker.command()}\n{exc}\n"
                    f"{broker.output()}")
    try:
        yield broker
    finally:
        try:
            code = broker.stop(timeout_s=STOP_TIMEOUT)
        except devcluster.ClusterError:
            if not broker.killed:
                pytest.fail(f"odradek serve (pid {broker.pid}) ignored SIGTERM for "
                            f"{STOP_TIMEOUT:.0f}s and was killed\n{broker.output()}")
        else:
            if not broker.killed:
                assert code == 0, f"odradek serve exited with code {code}\n{broker.output()}"


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
