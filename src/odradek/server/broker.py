"""The single-node broker: wires configuration, the log manager, topic metadata, the
background log duties and the listener, and owns their lifetimes.

Runs on the standard library's asyncio loop: its ``loop.sendfile`` is zero-copy
(``os.sendfile``), while uvloop's is not implemented (it would read the bytes through
Python), and fetch is where the bytes are.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable

from odradek.coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.protocol.codec import Request, encode_response
from odradek.protocol.framing import BufferPool
from odradek.protocol.messages import build
from odradek.server.config import BrokerConfig
from odradek.server.connection import Connection, Response
from odradek.server.group_commit import GroupCommit
from odradek.server.groups import ClientViewOfInternalLog, GroupRuntime
from odradek.server.metadata import MetadataStore, Topic
from odradek.server.purgatory import FetchPurgatory
from odradek.server.transactions import TxnRuntime
from odradek.storage import DutyIntervals, Log, LogConfig, LogDuties, LogManager
from odradek.storage.log import wall_clock_ms

log = logging.getLogger(__name__)

Handler = Callable[["Broker", Request], Awaitable[Response]]
HandlerNow = Callable[["Broker", Request], Response | Awaitable[Response]]

# How long a stopping broker waits for requests in flight (a long-poll fetch is woken at
# once; a produce finishes its append) before it closes their connections anyway.
STOP_GRACE_S = 10.0
# The idle-connection sweep runs at most this often: a connection is closed at most this
# much after connections.max.idle.ms (Kafka's default is 10 minutes). Each wake-up of an
# idle broker's event loop costs ~0.3 ms of CPU on a small VM; a sweep a second was a
# fifth of what an idle broker spent.
IDLE_SWEEP_MAX_S = 5.0


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        from odradek.server.handlers import HANDLERS
        from odradek.server.handlers.fetch import FetchSessionCache

        self.config = config
        self.clock = clock
        self.node_id: int = config["node.id"]
        self.handlers: dict[int, Handler] = {key: h.handle for key, h in HANDLERS.items()}
        self.handlers_now: dict[int, HandlerNow] = {
            key: h.handle_now for key, h in HANDLERS.items() if h.handle_now is not None}
        self.supported: dict[int, tuple[int, int]] = {
            key: (h.min_version, h.max_version) for key, h in HANDLERS.items()
        }
        self.purgatory = FetchPurgatory()
        self.group_commit = GroupCommit()  # fsyncs of logs with flush.messages set
        # Large receive buffers reused across this broker's connections (one event loop:
        # no locking; each in-process broker of a test run has its own).
        self.buffer_pool = BufferPool()
        self.stopping = False
        self.logs: LogManager | None = None
        self.metadata: MetadataStore | None = None
        self._duties: LogDuties | None = None
        self.groups: GroupRuntime | None = None  # consumer groups, from start()
        self.transactions: TxnRuntime | None = None  # transactions, from start()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], Connection] = {}
        self._idle_sweep: asyncio.Task[None] | None = None
        self.host = config.host
        self.port = config.port
        self.fetch_sessions = FetchSessionCache()  # KIP-227 sessions of this broker

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        # Read first: every log opens (and recovers) with its topic's own settings.
        self.metadata = MetadataStore(os.path.abspath(cfg.data_dir), self.node_id)
        self.logs = LogManager.open(cfg.data_dir, default_config=cfg.log_config(),
                                    topic_config=self.log_config_for, clock=self.clock)
        try:
            self.metadata.persist()  # only now: the directory is ours
            for topic in self.metadata.topics.values():
                for partition in range(topic.partitions):
                    self.logs.get_or_create_log(topic.name, partition)
            self._duties = LogDuties(self.logs, DutyIntervals(
                retention_check_ms=cfg["log.retention.check.interval.ms"],
                flush_check_ms=cfg["log.flush.scheduler.interval.ms"],
                checkpoint_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
                cleaner_backoff_ms=cfg["log.cleaner.backoff.ms"],
                cleaner_enabled=cfg["log.cleaner.enable"],
            ))
            self._duties.start()
            # Groups are loaded before the listener starts: no request sees them loading.
            self.groups = GroupRuntime(self)
            self.groups.start()
            # Then transactions: markers of prepared transactions written at load may
            # complete TxnOffsetCommits the group runtime has just loaded as pending.
            self.transactions = TxnRuntime(self)
            self.transactions.start()
            self._server = await asyncio.get_running_loop().create_server(
                lambda: Connection(self), cfg.host, cfg.port, reuse_address=True)
            self._idle_sweep = asyncio.get_running_loop().create_task(self._close_idle())
        except BaseException:
            if self.transactions is not None:
                await self.transactions.stop()
            if self.groups is not None:
                await self.groups.stop()
            if self._duties is not None:
                self._duties.stop()
            self.logs.close()
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("listening on %s:%d, data in %s", self.host, self.port, self.logs.data_dir)

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish, then flush and close the logs."""
        if self.stopping:
            return
        self.stopping = True
        if self._server is not None:
            self._server.close()
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
        self.purgatory.wake_all()
        if self.groups is not None:
            await self.groups.stop()  # answers parked joins and syncs at once
        if self.transactions is not None:
            await self.transactions.stop()  # and InitProducerIds waiting for an abort
        for task, conn in list(self._connections.items()):
            if not conn.in_request:
                task.cancel()
        if self._connections:
            _, pending = await asyncio.wait(list(self._connections), timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._server is not None:
            await self._server.wait_closed()
        if self._duties is not None:
            self._duties.stop()
        self.group_commit.close()  # requests are done: no fsync is waited for any more
        if self.logs is not None:
            self.logs.close()
        log.info("stopped; logs flushed and closed")

    async def _close_idle(self) -> None:
        """Close connections idle for connections.max.idle.ms: one sweep every
        ``IDLE_SWEEP_MAX_S`` (or four per idle period, if shorter) instead of a timer per
        read."""
        idle_s = self.config["connections.max.idle.ms"] / 1000
        interval = min(IDLE_SWEEP_MAX_S, idle_s / 4)
        while not self.stopping:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self._connections.values()):
                conn.close_if_idle(now)

    def accept(self, conn: Connection) -> None:
        """Start the request loop of a connection just made (its protocol calls this)."""
        if self.stopping:
            conn.close()
            return
        task = asyncio.get_running_loop().create_task(conn.run())
        self._connections[task] = conn
        task.add_done_callback(self._connections.pop)

    # --- topics and logs ---------------------------------------------------------------

    @property
    def advertised_host(self) -> str:
        return self.host if self.host not in ("0.0.0.0", "::", "") else socket.gethostname()

    def log_config_for(self, topic: str) -> LogConfig:
        base = self.config.log_config()
        meta = self.metadata.topics.get(topic) if self.metadata else None
        return LogConfig.from_kafka(meta.configs, base) if meta and meta.configs else base

    def topic(self, name: str) -> Topic | None:
        assert self.metadata is not None
        return self.metadata.topics.get(name)

    def get_log(self, topic: str, partition: int) -> Log | None:
        assert self.logs is not None
        lg = self.logs.get_log(topic, partition)
        if lg is not None and topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            return ClientViewOfInternalLog(lg)  # type: ignore[return-value]  # read-only
        return lg

    def create_topic(self, name: str, partitions: int | None = None,
                     configs: dict[str, str] | None = None, *,
                     validate_only: bool = False) -> Topic:
        assert self.metadata is not None and self.logs is not None
        count = self.config["num.partitions"] if partitions is None or partitions < 0 else (
            partitions)
        topic = self.metadata.create_topic(name, count, configs, validate_only=validate_only)
        if not validate_only:
            for partition in range(topic.partitions):
                self.logs.get_or_create_log(name, partition)
            log.info("created topic %s with %d partition(s)", name, topic.partitions)
        return topic

    def delete_topic(self, name: str) -> Topic:
        assert self.metadata is not None and self.logs is not None
        topic = self.metadata.delete_topic(name)
        for partition in range(topic.partitions):
            self.logs.delete_log(name, partition)
        log.info("deleted topic %s", name)
        return topic

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> Topic:
        assert self.metadata is not None and self.logs is not None
        topic = self.metadata.add_partitions(name, count, validate_only=validate_only)
        if not validate_only:
            for partition in range(topic.partitions):
                self.logs.get_or_create_log(name, partition)
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str], *,
                          validate_only: bool = False) -> Topic:
        assert self.metadata is not None and self.logs is not None
        topic = self.metadata.set_configs(name, configs, validate_only=validate_only)
        if not validate_only:
            self.logs.update_config(name, self.log_config_for(name))
        return topic

    # --- responses ---------------------------------------------------------------------

    def api_versions_fallback(self, correlation_id: int) -> bytes:
        """ApiVersions v0 with UNSUPPORTED_VERSION and our versions (what Kafka answers to
        an ApiVersions version it does not know, so the client can retry lower)."""
        from kio.index import load_response_schema

        body = build(load_response_schema(18, 0), {
            "error_code": 35,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(self.supported.items())],
        })
        return encode_response(18, 0, correlation_id, body)
