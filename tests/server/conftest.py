"""Fixtures of the in-process broker tier: a real broker on a thread, real sockets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.testing import RunningBroker, running_broker


@pytest.fixture
def broker() -> Iterator[RunningBroker]:
    with running_broker() as running:
        yield running
