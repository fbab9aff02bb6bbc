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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import _drain, _stop, require_tool

CHROMIUM = "/usr/bin/chromium"
STARTUP_TIMEOUT = 30.0
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
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "".join(self.lines)


@contextmanager
def start_console(bootstrap: str, *extra: str) -> Iterator[ConsoleProcess]:
    argv = [sys.executable, "-m", "odradek", "console", "--bootstrap-server", bootstrap,
            "--listen", "127.0.0.1:0", "--sample-interval", "0.5",
            "--request-timeout-ms", "5000", *extra]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def on_line(line: str) -> None:
        match = _ADDRESS.search(line)
        if match and not found:
            found.append(match.group(1))
            ready.set()

    reader = threading.Thread(target=_drain, args=(proc.stdout, lines, on_line),
                              daemon=True)
    reader.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not ready.wait(0.05) and proc.poll() is None and time.monotonic() < deadline:
        pass
    if not found:
        _stop(proc, [reader])
        pytest.fail(f"odradek console did not start: {argv}\n{''.join(lines)}")
    console = ConsoleProcess(found[0], proc, lines)
    try:
        yield console
    finally:
        code, hung = _stop(proc, [reader])
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
