"""A private, real ZooKeeper server for tests: Debian's ``zookeeper`` package (3.8) run
as a plain ``java`` process on a free 127.0.0.1 port with its own data directory. No
service manager, no root, no Docker.

    with ZooKeeperServer(tmp_path) as zk:
        store = ZooKeeperStore(zk.connect_string, ...)

The launcher itself is the package's (``odradek.devcluster.ZooKeeperServer``, which
``odradek cluster up`` and ``odradek.testing.running_cluster`` use too); this module
keeps the tests' names for it and turns its failures into failed tests with the
server's log. It can be stopped, restarted on the same port and data (sessions survive a
restart), paused (SIGSTOP) to look like a hung server, and its log is kept
(``output()``) for failure reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.devcluster import (
    CLASSPATH,
    JAVA_DIR,
    JVM_OPTIONS,
    ZOOKEEPER_JAR,
    ZooKeeperError,
    four_letter_word,
)
from odradek.devcluster import ZooKeeperServer as _ZooKeeperServer

__all__ = ["CLASSPATH", "INSTALL_HINT", "JAVA_DIR", "JVM_OPTIONS", "ZOOKEEPER_JAR",
           "ZooKeeperServer", "four_letter_word"]

INSTALL_HINT = ("the ZooKeeper tests need Debian's zookeeper package "
                "(`apt-get install zookeeper`; scripts/test.sh installs it)")


class ZooKeeperServer(_ZooKeeperServer):
    """One standalone ZooKeeper in ``directory`` (its zoo.cfg, data and log go there);
    a server that cannot start fails the test, with its log."""

    install_hint = INSTALL_HINT

    def __init__(self, directory: Path, *, tick_time_ms: int = 200,
                 max_session_timeout_ms: int = 60_000, start_timeout_s: float = 30.0) -> None:
        super().__init__(directory, tick_time_ms=tick_time_ms,
                         max_session_timeout_ms=max_session_timeout_ms,
                         start_timeout_s=start_timeout_s)

    def start(self) -> None:
        """Start the server and wait until it serves requests (``start_timeout_s``)."""
        try:
            super().start()
        except ZooKeeperError as exc:
            pytest.fail(str(exc), pytrace=False)
