"""The broker: wires configuration, the log manager, topic metadata, the background log
duties, the listener and (with ``zookeeper.connect``) its part in a replicated cluster,
and owns their lifetimes.

Without ``zookeeper.connect`` it is a single node: its topics live in the data
directory (``server/metadata.py``) and it leads every partition. With it, topics,
leaders and ISRs live in ZooKeeper, and ``cluster`` (``server/cluster/node.py``) holds what
this broker knows of them and the roles it plays; ``get_log`` then hands clients only
the logs of partitions this broker leads.

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
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from odradek.coordinator import INTERNAL_TOPICS
from odradek.protocol.codec import Request, encode_response, response_schema
from odradek.protocol.framing import BufferPool
from odradek.protocol.messages import build
from odradek.security.delegation_tokens import Lifetimes
from odradek.server.config import BrokerConfig, Listener
from odradek.server.coordinators.groups import ClientViewOfInternalLog, GroupRuntime
from odradek.server.coordinators.share_state import ShareStateRuntime
from odradek.server.coordinators.transactions import TxnRuntime
from odradek.server.dynamic_configs import (
    GROUP_DOCUMENT,
    GroupConfigStore,
    validate_broker_configs,
)
from odradek.server.fetch_sessions import FetchSessionCache, sweep_interval_s
from odradek.server.group_commit import GroupCommit
from odradek.server.log_dirs import LogDirMoves
from odradek.server.metadata import MetadataStore, Topic
from odradek.server.metrics import BrokerStats, MetricsServer
from odradek.server.network.connection import Connection, Response
from odradek.server.network.session import Session
from odradek.server.replication.purgatory import Purgatory
from odradek.server.security import authorizer, credentials, quotas, tokens
from odradek.server.security.authorizer import Authorizer
from odradek.server.security.credentials import CredentialStore
from odradek.server.security.documents import Document
from odradek.server.security.quotas import ClientQuotas
from odradek.server.security.tokens import TokenStore
from odradek.server.settings import SETTINGS
from odradek.server.share.partitions import SharePartitions
from odradek.server.share.sessions import ShareSessionCache
from odradek.server.tiered import TieredStorage, open_tiered
from odradek.server.topology import SingleNode, Topology
from odradek.storage import DutyIntervals, Log, LogConfig, LogDuties, LogManager
from odradek.storage.log import wall_clock_ms

if TYPE_CHECKING:
    from odradek.server.cluster.metadata import ClusterMetadata
    from odradek.server.cluster.node import ClusterNode
    from odradek.server.cluster.store import CoordinationStore

log = logging.getLogger(__name__)

Handler = Callable[["Broker", Request], Coroutine[Any, Any, Response]]
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
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], int] = wall_clock_ms,
                 store: CoordinationStore | None = None) -> None:
        """``store``: with ``zookeeper.connect`` set, the coordination store to join the
        cluster through instead of a ZooKeeper client to it (tests run several brokers
        in one process on a shared ``MemoryStore`` tree)."""
        from odradek.server.handlers import HANDLERS

        self.config = config
        self.clock = clock
        self.node_id: int = config["node.id"]
        self.handlers: dict[int, Handler] = {key: h.handle for key, h in HANDLERS.items()}
        self.handlers_now: dict[int, HandlerNow] = {
            key: h.handle_now for key, h in HANDLERS.items() if h.handle_now is not None}
        self.supported: dict[int, tuple[int, int]] = {
            key: (h.min_version, h.max_version) for key, h in HANDLERS.items()
        }
        self.purgatory = Purgatory(coalesce=True)  # fetches waiting for data (long polls)
        self.group_commit = GroupCommit()  # fsyncs of logs with flush.messages set
        # Large receive buffers reused across this broker's connections (one event loop:
        # no locking; each in-process broker of a test run has its own).
        self.buffer_pool = BufferPool()
        self.stopping = False
        self.logs: LogManager | None = None
        self.metadata: MetadataStore | ClusterMetadata | None = None
        # Where this broker stands (server/topology.py): alone, or one of a cluster. Set
        # by start(); the broker asks it rather than branching on which it is.
        self.topology: Topology = None  # type: ignore[assignment]
        # The same object when it is a cluster's: for what only a cluster does (its
        # replica manager).
        self.cluster: ClusterNode | None = None
        self._store = store
        self.credentials: CredentialStore | None = None  # SCRAM users, from start()
        self.tokens: TokenStore | None = None  # delegation tokens, from start()
        # With authorizer.class.name, from start(); None: every request is allowed.
        self.authorizer: Authorizer | None = None
        self.quotas: ClientQuotas | None = None  # client quotas, from start()
        # Every group's group configs (server.dynamic_configs), from start().
        self.group_configs: GroupConfigStore | None = None
        # With metrics.listen: the hot paths' counters (server.metrics), else None.
        self.stats: BrokerStats | None = BrokerStats() if config["metrics.listen"] else None
        self._metrics: MetricsServer | None = None
        self._serving = False  # set once start() is done (/readyz)
        self._documents: list[Document] = []  # the security state's, to stop
        self._duties: LogDuties | None = None
        # With remote.log.storage.system.enable (server/tiered.py), from start().
        self.tiered: TieredStorage | None = None
        self.log_dir_moves = LogDirMoves(self)  # AlterReplicaLogDirs' moves
        self.groups: GroupRuntime | None = None  # consumer groups, from start()
        self.transactions: TxnRuntime | None = None  # transactions, from start()
        # Share groups (KIP-932): the share coordinator's runtime (from start()), the
        # share partitions this broker leads and their share sessions (server/share/).
        self.share_state: ShareStateRuntime | None = None
        self.share_partitions = SharePartitions(self)
        self.share_sessions = ShareSessionCache(config["group.share.max.share.sessions"])
        self._servers: list[asyncio.Server] = []  # one per listener, the main one first
        self.listener_ports: dict[str, int] = {}  # listener name -> the port it is bound to
        self._connections: dict[asyncio.Task[None], Connection] = {}
        self._idle_sweep: asyncio.Task[None] | None = None
        self.host = config.host
        self.port = config.port
        # KIP-227 sessions of this broker; followers' ones follow their partitions in
        # the fetch purgatory and are read whole every fetch_sweep_s.
        self.fetch_sessions = FetchSessionCache(self.purgatory)
        self.fetch_sweep_s = sweep_interval_s(config["replica.lag.time.max.ms"])

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        # First: a wrong rsm.config.* stops the start before anything opens.
        self.tiered = open_tiered(self)
        # Before the logs open: they open with the topics' settings and the dynamic
        # topic-config defaults the topology holds.
        await self._join_topology()
        try:
            self.logs = LogManager.open(
                cfg.log_dirs, default_config=cfg.log_config(),
                topic_config=self.log_config_for, clock=self.clock,
                flush_timer=self.stats.log_flush.observe if self.stats is not None else None)
        except BaseException:
            await self.topology.stop()
            raise
        try:
            self.topology.logs_opened()  # only now: the directory is ours
            self._duties = LogDuties(self.logs, DutyIntervals(
                retention_check_ms=cfg["log.retention.check.interval.ms"],
                flush_check_ms=cfg["log.flush.scheduler.interval.ms"],
                checkpoint_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
                cleaner_backoff_ms=cfg["log.cleaner.backoff.ms"],
                cleaner_enabled=cfg["log.cleaner.enable"],
            ))
            self._duties.start()
            # Security state: files of the data directory, or the cluster's znodes.
            self.credentials = CredentialStore(
                await self._document(credentials.DOCUMENT, credentials.FILE_MODE))
            self.tokens = TokenStore(
                await self._document(tokens.DOCUMENT, tokens.FILE_MODE),
                cfg["delegation.token.secret.key"],
                Lifetimes(cfg["delegation.token.max.lifetime.ms"],
                          cfg["delegation.token.expiry.time.ms"]),
                cfg["delegation.token.expiry.check.interval.ms"])
            if self.tokens.enabled:
                self.tokens.start()
            if cfg["authorizer.class.name"]:
                self.authorizer = Authorizer(cfg, await self._document(authorizer.DOCUMENT))
            self.quotas = ClientQuotas(cfg, await self._document(quotas.DOCUMENT))
            self.group_configs = GroupConfigStore(await self._document(GROUP_DOCUMENT))
            # The coordinator runtimes (transactions' needs the groups'), then the
            # topology has them load the partitions led here (a single node: all of
            # them, groups first), before the listener starts: no request sees them
            # loading.
            self.groups = GroupRuntime(self)
            self.groups.start()
            self.transactions = TxnRuntime(self)
            self.transactions.start()
            self.share_state = ShareStateRuntime(self)
            self.share_state.start()
            self.topology.start_replicas()  # leaders of internal partitions load them
            self.log_dir_moves.start()  # the partitions are there to take moved logs
            if self.tiered is not None:
                self.tiered.start()  # copies what the partitions led here have rolled
            await self._listen()
            self._idle_sweep = asyncio.get_running_loop().create_task(self._close_idle())
            await self.topology.register()  # the port is known: others may find us
            if cfg["metrics.listen"]:
                host, _, port = cfg["metrics.listen"].rpartition(":")
                self._metrics = MetricsServer(self, host.strip("[]") or "0.0.0.0", int(port))
        except BaseException:
            if self._metrics is not None:
                self._metrics.stop()
            for server in self._servers:
                server.close()
            if self._idle_sweep is not None:
                self._idle_sweep.cancel()
            for document in self._documents:
                document.stop()
            if self.tokens is not None:
                self.tokens.stop()
            await self.topology.stop()
            if self.share_state is not None:
                await self.share_state.stop()
            if self.transactions is not None:
                await self.transactions.stop()
            if self.groups is not None:
                await self.groups.stop()
            await self.log_dir_moves.stop()
            if self.tiered is not None:
                self.tiered.stop()
            if self._duties is not None:
                self._duties.stop()
            self.logs.close()
            raise
        self._serving = True
        log.info("listening on %s, data in %s", ", ".join(
            f"{lst.name}://{lst.host}:{self.listener_ports[lst.name]}"
            for lst in cfg.listeners), ", ".join(self.logs.log_dirs))

    async def _document(self, name: str, mode: int = 0o644) -> Document:
        """The named security document, where the topology keeps it: the cluster's
        (followed from now on) or the data directory's."""
        document = await self.topology.document(name, mode)
        self._documents.append(document)
        return document

    async def _listen(self) -> None:
        """A server socket per listener (TLS on SSL and SASL_SSL ones); the main listener's
        port becomes ``self.port`` (it may have been 0: any free port)."""
        from odradek.server.network.tls import send_handshake_alerts, server_context

        loop = asyncio.get_running_loop()
        if any(listener.tls for listener in self.config.listeners):
            send_handshake_alerts()
        for listener in self.config.listeners:
            ctx = server_context(self.config, listener.name) if listener.tls else None
            server = await loop.create_server(
                lambda lst=listener: Connection(self, lst), listener.host or None,
                listener.port, reuse_address=True, ssl=ctx)
            self._servers.append(server)
            self.listener_ports[listener.name] = server.sockets[0].getsockname()[1]
        self.port = self.listener_ports[self.config.listeners[0].name]

    async def _join_topology(self) -> None:
        """Alone (no ``zookeeper.connect``), or a cluster's member through ZooKeeper (or
        the store given): decided here, once."""
        cfg = self.config
        topology: Topology
        if cfg.clustered:
            from odradek.server.cluster.node import ClusterNode
            from odradek.server.cluster.zookeeper import ZooKeeperStore

            store = self._store or ZooKeeperStore(
                cfg["zookeeper.connect"],
                session_timeout_ms=cfg["zookeeper.session.timeout.ms"],
                connection_timeout_ms=cfg["zookeeper.connection.timeout.ms"])
            topology = self.cluster = ClusterNode(self, store)
        else:
            topology = SingleNode(self)
        self.topology = topology
        try:
            await topology.start()
        except BaseException:
            await topology.stop()
            self.cluster = None
            self.topology = None  # type: ignore[assignment]  # not started
            raise
        self.metadata = topology.metadata

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish, then flush and close the logs.
        In a cluster, leadership is moved away first (controlled shutdown), while this
        broker still answers: clients and followers see it go."""
        if self.stopping:
            return
        if self.topology is None:  # never started
            return
        await self.topology.controlled_shutdown()
        self.stopping = True
        if self._metrics is not None:
            self._metrics.stop()
        for server in self._servers:
            server.close()
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
        self.purgatory.wake_all()
        self.topology.stop_waiting()
        if self.groups is not None:
            await self.groups.stop()  # answers parked joins and syncs at once
        if self.transactions is not None:
            await self.transactions.stop()  # and InitProducerIds waiting for an abort
        self.share_partitions.stop()
        if self.share_state is not None:
            await self.share_state.stop()
        for document in self._documents:
            document.stop()
        if self.tokens is not None:
            self.tokens.stop()
        await self.topology.stop()  # a cluster's fetchers stop; its registration goes
        await self.log_dir_moves.stop()
        for task, conn in list(self._connections.items()):
            if not conn.busy:
                task.cancel()
        if self._connections:
            _, pending = await asyncio.wait(list(self._connections), timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        for server in self._servers:
            await server.wait_closed()
        if self.tiered is not None:
            self.tiered.stop()  # after the requests: none reads the remote tier now
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

    def connections(self) -> list[Connection]:
        return list(self._connections.values())

    def not_ready(self) -> str | None:
        """Why /readyz says not ready (None: ready): starting, stopping, or the cluster's
        reason (not registered, catching up)."""
        if self.stopping:
            return "stopping"
        if not self._serving:
            return "starting: logs are being recovered or listeners opened"
        return self.topology.not_ready()

    @property
    def metrics_port(self) -> int | None:
        return self._metrics.port if self._metrics is not None else None

    def accept(self, conn: Connection) -> None:
        """Start the request loop of a connection just made (its protocol calls this)."""
        if self.stopping:
            conn.close()
            return
        if self.stats is not None:
            self.stats.connection_created(conn.listener.name)
        task = asyncio.get_running_loop().create_task(conn.run())
        self._connections[task] = conn
        task.add_done_callback(self._connections.pop)
        task.add_done_callback(lambda _: self._connection_closed(conn))

    def _connection_closed(self, conn: Connection) -> None:
        """A connection's share sessions go with it, and the records their members
        hold are released (server/share/sessions.py)."""
        if not self.share_sessions.sessions:
            return
        for session in self.share_sessions.closed_connection(conn.session):
            self.share_partitions.release_member(session.group_id, session.member_id)

    # --- topics and logs ---------------------------------------------------------------

    @property
    def advertised_host(self) -> str:
        return self.advertised_endpoint[0]

    @property
    def advertised_endpoint(self) -> tuple[str, int]:
        """Where clients reach this broker through the main listener."""
        return self.endpoint(self.config.listeners[0].name)

    def endpoint(self, listener: str) -> tuple[str, int]:
        """Where clients and other brokers reach this broker through ``listener``: its
        ``advertised.listeners`` entry, else the listener's own address (the host name
        when it listens on every address)."""
        given = self.config.advertised_by_listener.get(listener)
        if given is not None:
            return given
        host = next(lst.host for lst in self.config.listeners if lst.name == listener)
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return host, self.listener_ports.get(listener, self.port)

    def endpoints(self) -> dict[str, tuple[str, int]]:
        """Every listener's endpoint (what a cluster registration publishes)."""
        return {lst.name: self.endpoint(lst.name) for lst in self.config.listeners}

    def new_session(self, listener: Listener, transport: asyncio.BaseTransport,
                    client_host: str) -> Session:
        """The session of a connection just accepted (after its TLS handshake): on a
        TLS listener with a client certificate, its principal is the certificate's mapped
        distinguished name; SASL listeners start unauthenticated."""
        from odradek.server.network.tls import distinguished_name, map_principal, principal_rules

        session = Session(listener, client_host, authenticated=not listener.sasl)
        if listener.tls and not listener.sasl:
            cert = transport.get_extra_info("peercert")
            if cert:
                rules = principal_rules(self.config.for_listener(
                    listener.name, "ssl.principal.mapping.rules"))
                session.principal = "User:" + map_principal(distinguished_name(cert), rules)
        return session

    @staticmethod
    def listener_of(request: Any) -> Listener | None:
        """The listener a request came in on (None: made inside the broker)."""
        session = request.session
        return session.listener if session is not None else None

    # --- dynamic broker configs (server.dynamic_configs) --------------------------------

    def broker_configs(self, resource: str) -> dict[str, str]:
        """The dynamic configs set on broker ``resource`` ("" is the cluster default)."""
        if self.topology is None:  # before start(): the static settings only
            return {}
        return self.topology.broker_configs(resource)

    def dynamic_setting(self, name: str) -> tuple[str, str] | None:
        """(value, "broker" or "default") of a setting set dynamically; else None."""
        for resource, source in ((str(self.node_id), "broker"), ("", "default")):
            value = self.broker_configs(resource).get(name)
            if value is not None:
                return value, source
        return None

    def setting(self, name: str) -> Any:
        """A broker setting as it applies now: dynamic, else static."""
        dynamic = self.dynamic_setting(name)
        return self.config[name] if dynamic is None else SETTINGS[name].parse(name, dynamic[0])

    async def set_broker_configs(self, resource: str, configs: dict[str, str], *,
                                 validate_only: bool = False) -> None:
        """Replace the dynamic configs of broker ``resource`` (validated as Kafka does);
        in force here before this returns."""
        validate_broker_configs(resource, configs)
        if validate_only:
            return
        await self.topology.set_broker_configs(resource, configs)

    def dynamic_configs_changed(self) -> None:
        """Dynamic topic-config defaults reach the open logs."""
        if self.logs is None:
            return
        for topic in {t for t, _ in list(self.logs.logs)}:
            self.logs.update_config(topic, self.log_config_for(topic))

    def _log_defaults(self) -> LogConfig:
        """The topic-level defaults: log.* settings, dynamic ones over static ones."""
        base = self.config.log_config()
        dynamic = {s.topic_name: self.setting(s.name) for s in SETTINGS.values()
                   if s.topic_name and self.dynamic_setting(s.name) is not None}
        return LogConfig.from_kafka(dynamic, base) if dynamic else base

    def log_config_for(self, topic: str) -> LogConfig:
        base = self._log_defaults()
        meta = self.metadata.topics.get(topic) if self.metadata else None
        return LogConfig.from_kafka(meta.configs, base) if meta and meta.configs else base

    def topic(self, name: str) -> Topic | None:
        assert self.metadata is not None
        return self.metadata.topics.get(name)

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The log of a partition clients may use here: one this broker leads (see
        ``missing_partition_error`` for why not); an internal topic's read-only."""
        lg = self.topology.leader_log(topic, partition)
        if lg is not None and topic in INTERNAL_TOPICS:
            return ClientViewOfInternalLog(lg)  # type: ignore[return-value]  # read-only
        return lg

    def missing_partition_error(self, topic: str, partition: int) -> int:
        """Why ``get_log`` gave None: NOT_LEADER_OR_FOLLOWER for a partition that exists
        in the cluster but is led elsewhere (or by nobody), else
        UNKNOWN_TOPIC_OR_PARTITION."""
        return self.topology.missing_partition_error(topic, partition)

    def create_topic(self, name: str, partitions: int | None = None,
                     configs: dict[str, str] | None = None) -> Topic:
        """A single node's topic and its logs in one step, for tests and tools (clients'
        topics are created through the topology: CreateTopics, auto-creation)."""
        assert isinstance(self.topology, SingleNode), "a single node's helper"
        return self.topology.create_topic_now(name, partitions, configs)

    # --- responses ---------------------------------------------------------------------

    def api_versions_fallback(self, correlation_id: int) -> bytes:
        """ApiVersions v0 with UNSUPPORTED_VERSION and our versions (what Kafka answers to
        an ApiVersions version it does not know, so the client can retry lower)."""
        body = build(response_schema(18, 0), {
            "error_code": 35,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(self.supported.items())],
        })
        return encode_response(18, 0, correlation_id, body)
