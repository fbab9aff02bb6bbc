"""Group commit for logs with ``flush.messages`` set: fsync off the event loop, one at a
time per log, shared by every request whose records it covers.

A produce request whose append makes a flush due waits here before it is answered. If an
fsync of that log is already running (it was started before these records were written),
the request waits for it to end and then for the next one, which one of the waiting
requests starts and which covers all of them: under load, one fsync acknowledges many
requests, instead of one fsync per request blocking the loop in turn.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from odradek.storage import Log

# fsyncs of different logs run in parallel (each log has one at a time at most).
SYNC_THREADS = 4


class GroupCommit:
    def __init__(self, threads: int = SYNC_THREADS) -> None:
        self._executor = ThreadPoolExecutor(max_workers=threads,
                                            thread_name_prefix="odradek-sync")
        self._running: dict[Log, asyncio.Future[int]] = {}
        self.syncs = 0  # fsync rounds started (for tests and metrics)

    async def durable(self, lg: Log, end_offset: int) -> None:
        """Return once ``lg`` is synced at least up to ``end_offset`` (exclusive).
        Raises KafkaStorageError if an fsync fails."""
        loop = asyncio.get_running_loop()
        while lg.recovery_point < end_offset:
            running = self._running.get(lg)
            if running is None:
                running = asyncio.ensure_future(loop.run_in_executor(self._executor, lg.sync))
                self._running[lg] = running
                self.syncs += 1

                def forget(_: asyncio.Future[int], lg: Log = lg) -> None:
                    self._running.pop(lg, None)

                running.add_done_callback(forget)
            # shielded: a cancelled request must not cancel the fsync others wait for
            await asyncio.shield(running)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
