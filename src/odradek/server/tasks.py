"""The broker's background tasks: one home for starting, tracking, cancelling and
reporting them (the cluster node's re-registrations, the metadata cache's reads, the
replica manager's ISR writes, the coordinator runtimes' replication waits).

``TaskSet`` is used instead of ``asyncio.TaskGroup``, deliberately:

- a TaskGroup lives inside one ``async with`` block, while a broker component's tasks
  live from its ``start()`` to its ``stop()``, two calls made by different callers;
- a TaskGroup cancels every sibling when one task fails, where a broker wants the
  opposite: an ISR write that fails must not cancel the controller's work or another
  partition's replication wait. Here a failed task is logged (once, with its
  traceback: never "Task exception was never retrieved" at garbage collection) and
  the others go on;
- components cancel some of their tasks on their own (a coordinator that resigns a
  partition cancels that partition's waits): tasks carry an optional key.

What a TaskGroup gives that matters here is kept: every task is known, and ``close``
cancels them all and waits until each has finished, so nothing a component started
outlives its stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Hashable
from typing import Any

log = logging.getLogger(__name__)


class TaskSet:
    """The running background tasks of one component (``owner`` names it in logs)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: dict[asyncio.Task[Any], Hashable | None] = {}

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None,
              key: Hashable | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of this set (on behalf of ``key``, if given: see
        ``cancel``)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = key
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s: background task %s failed", self.owner, task.get_name(),
                      exc_info=exc)

    def cancel(self, key: Hashable) -> None:
        """Cancel the tasks started on behalf of ``key``."""
        for task, of in list(self._tasks.items()):
            if of == key:
                task.cancel()

    async def close(self, *also: asyncio.Task[Any] | None) -> None:
        """Cancel every task of the set (and ``also``, the component's long-running
        ones) and wait until each has finished."""
        tasks = [*self._tasks, *(t for t in also if t is not None)]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)
