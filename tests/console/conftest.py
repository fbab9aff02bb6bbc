"""The console tier: ``odradek console`` as a process, driven by headless Chromium.

- ``start_console(bootstrap)``: runs ``odradek console --listen 127.0.0.1:0`` against a
  broker until the block ends, reading the address from its ``console http://...`` line.
- ``browser`` (module scope): Debian's Chromium (``/usr/bin/chromium``, installed by
  scripts/test.sh) through Playwright for Python, with no browser download: Playwright
  is given the executable. ``page`` is a fresh page per test, whose ``confirm()``
  dialogs the test answers itself (``page.on("dialog", ...)``).
- ``SCREENSHOTS``: with ``CONSOLE_SCREENSHOTS=DIR`` (not ODRADEK_...: the broker reads those
  as settings) the tests save the pictures
  docs/console.md shows (``shot(page, name)``); otherwise ``shot`` does nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from odradek.devcluster import read_log, spawn, stop_process
from tests.interop.conftest import require_tool

CHROMIUM = "/usr/bin/chromium"
STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0  # seconds between SIGTERM and a clean exit
_ADDRESS = re.compile(r"console (http://\S+) for ")
SCREENSHOTS = os.environ.get("CONSOLE_SCREENSHOTS")
# What Chromium needs on this machine (closed network, root, no GPU): the flags
# FIELD-NOTES and the machine notes give.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@dataclass
class ConsoleProcess:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def output(self) -> str:
        return read_log(self.log_path)


@contextmanager
def start_console(bootstrap: str, *extra: str) -> Iterator[ConsoleProcess]:
    """``odradek console`` on a free port until the block ends (started and stopped by
    ``odradek.devcluster``'s process helpers, its output in a log file); a console that
    does not exit 0 on SIGTERM fails the test."""
    argv = [sys.executable, "-m", "odradek", "console", "--bootstrap-server", bootstrap,
            "--listen", "127.0.0.1:0", "--sample-interval", "0.5",
            "--request-timeout-ms", "5000", *extra]
    with tempfile.TemporaryDirectory(prefix="odradek-console-") as tmp:
        log_path = Path(tmp) / "console.log"
        proc = spawn(argv, log_path, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        deadline = time.monotonic() + STARTUP_TIMEOUT
        found = None
        while proc.poll() is None and time.monotonic() < deadline:
            found = _ADDRESS.search(read_log(log_path))
            if found:
                break
            time.sleep(0.05)
        if not found:
            stop_process(proc, STOP_TIMEOUT)
            pytest.fail(f"odradek console did not start: {argv}\n{read_log(log_path)}")
        console = ConsoleProcess(found.group(1), proc, log_path)
        try:
            yield console
        finally:
            code, hung = stop_process(proc, STOP_TIMEOUT)
            assert not hung and code == 0, \
                f"odradek console exited with {code} (hung: {hung})\n{console.output()}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        require_tool("chromium", installable=True,
                     install_hint="scripts/test.sh installs Debian's chromium package")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        yield page
    finally:
        context.close()


def shot(page: Any, name: str) -> None:
    """Save a screenshot for docs/console.md when CONSOLE_SCREENSHOTS is set."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"console-{name}.png"), full_page=True)
