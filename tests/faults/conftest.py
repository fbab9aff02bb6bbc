"""The cluster and fault tier: real ``odradek serve`` processes on a real ZooKeeper
(tests/cluster_processes.py), real clients, and the failures the issue lists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_processes import Cluster, run_cluster
from tests.zookeeper import ZooKeeperServer


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers of this test's own (a fresh chroot), stopped cleanly at the end."""
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path) as running:
        yield running


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failing test's report carries every broker's output."""
    report = yield
    running = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(running, Cluster):
        report.sections.append(("cluster brokers' output", running.output()))
    return report
