"""Running a broker: in the foreground until SIGTERM/SIGINT (``odradek serve``), or on a
thread of its own with its own event loop (``odradek.testing``)."""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import logging
import signal
import sys
import threading
from collections.abc import Callable

from odradek.server.broker import Broker
from odradek.server.config import BrokerConfig

log = logging.getLogger(__name__)

# A stop taking longer than this logs what it is waiting on (every task's stack and every
# thread's): a broker that does not stop says why, in the log the operator has.
STOP_WATCHDOG_S = 15.0


def _freeze_startup_heap() -> None:
    """Take what the start built out of the cycle collector's sight: modules, classes,
    message schemas, the logs and partitions loaded at start, the connection to
    ZooKeeper. They live as long as the process, yet a full (generation 2) collection
    walks every one of them, with the event loop stopped: on this VM 20-45 ms for the
    ~60,000 objects of a fresh cluster broker, a stall of every partition it leads or
    follows (issue 31's latency outliers). Frozen, they are freed by reference counting
    as before; only a reference cycle among them that becomes garbage later is never
    collected (a topic deleted after a restart leaves its few cycles)."""
    gc.collect()
    gc.freeze()
    log.debug("%d objects of the start frozen out of the cycle collector",
              gc.get_freeze_count())


def _report_slow_stop() -> None:
    log.warning("still stopping after %.0f s; the tasks and threads it waits on follow",
                STOP_WATCHDOG_S)
    for task in asyncio.all_tasks():
        task.print_stack(file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


async def serve(config: BrokerConfig, on_started: Callable[[Broker], None] | None = None) -> None:
    """Start, then run until SIGTERM or SIGINT; stop cleanly (in-flight requests finish,
    logs are flushed and closed). A signal during a long start (recovering thousands of
    logs) is kept and acted on once the start is done, instead of killing the process
    mid-recovery; a start that waits (for an unreachable ZooKeeper, or for a previous
    registration of this node id to expire) is abandoned at the signal instead."""
    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        starting = loop.create_task(broker.start())
        stopped = loop.create_task(stop.wait())
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            log.info("stopping on signal before the start finished")
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            return
        stopped.cancel()
        starting.result()  # a failed start raises here
        _freeze_startup_heap()
        try:
            if on_started is not None and not stop.is_set():
                on_started(broker)
            await stop.wait()
            log.info("stopping on signal")
        finally:
            watchdog = loop.call_later(STOP_WATCHDOG_S, _report_slow_stop)
            try:
                await broker.stop()
            finally:
                watchdog.cancel()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


class BrokerThread:
    """A broker on a background thread (for tests and embedding): ``start()`` returns once
    it listens; ``stop()`` stops it cleanly and joins the thread."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="odradek-broker", daemon=True)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        broker = Broker(self.config)
        try:
            await broker.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self.broker = broker
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await broker.stop()

    def start(self, timeout: float = 30.0) -> Broker:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the broker did not start in time")
        if self._error is not None:
            raise self._error
        assert self.broker is not None
        return self.broker

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
