"""Fixtures every tier may ask for: one real ZooKeeper for the whole test session
(started only when a test asks for it; the cluster tiers do), and a fresh chroot per
test so tests never see each other's znodes."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator

import pytest

from tests.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A ``zookeeper.connect`` string with a chroot of this test's own."""
    zookeeper.ensure_running()  # an earlier test may have failed with it stopped or paused
    return f"{zookeeper.connect_string}/test-{uuid.uuid4().hex}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # A failing test that used ZooKeeper gets the tail of the server's log in its report.
    report = yield
    server = getattr(item, "funcargs", {}).get("zookeeper")
    if report.failed and isinstance(server, ZooKeeperServer):
        report.sections.append(("ZooKeeper log (tail)", server.output(tail=40)))
    return report
