"""The broker's tiered storage (KIP-405; docs/tiered-storage.md): with
``remote.log.storage.system.enable``, the object store ``rsm.config.*`` describes, the
remote log manager over the tiered logs this broker leads, and the remote reader whose
fetched chunks wake the fetches waiting for them.

Also the broker's rules on tiered topic settings (Kafka's): ``remote.storage.enable``
only where the broker allows it, and turned off only together with
``remote.log.delete.on.disable=true`` (the remote copy is then deleted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

from kio.schema.errors import ErrorCode

from odradek.server.errors import error_code
from odradek.server.metadata import TopicError
from odradek.server.settings import ConfigError
from odradek.storage import Log
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidConfigError, RemoteStorageError
from odradek.storage.remote.manager import RemoteLogManager
from odradek.storage.remote.reader import RemoteReader
from odradek.storage.remote.store import open_store
from odradek.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage (set remote.log.storage.system.enable=true "
            "on the broker).")
TURNED_OFF = ("It is invalid to disable remote storage without deleting remote data. If "
              "you want to keep the remote data and turn to read only, please set "
              "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
              "disable remote storage and delete all remote data, please set "
              "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def check_topic_configs(broker: Broker, configs: Mapping[str, str],
                        old: LogConfig | None = None) -> None:
    """Kafka's broker-side rules on a topic's new settings (TopicError INVALID_CONFIG)."""
    if not any(name.startswith("remote.") for name in configs) and old is None:
        return
    try:
        new = LogConfig.from_kafka(configs)
    except ValueError:
        return  # the topology refuses it with the parser's message
    if new.remote_storage_enable and not broker.config["remote.log.storage.system.enable"]:
        raise TopicError("INVALID_CONFIG", DISABLED)
    if (old is not None and old.remote_storage_enable and not new.remote_storage_enable
            and not new.remote_log_delete_on_disable):
        raise TopicError("INVALID_CONFIG", TURNED_OFF)


class TieredStorage:
    """The remote log manager and reader of one broker, from ``start`` to ``stop``."""

    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.store = open_store(cfg.rsm_config)
        try:
            self.store.check()
        except RemoteStorageError as exc:
            # Unreachable now (down, slow): the broker serves; copies wait and retry.
            log.warning("the remote tier (%s) is not reachable at startup: %s; tiered "
                        "logs keep their segments locally until it is",
                        self.store.description, exc)
        self.manager = RemoteLogManager(
            self.store, broker_id=broker.node_id, leading=self._leading,
            interval_ms=cfg["remote.log.manager.task.interval.ms"])
        chunk = int(cfg.rsm_config.get("chunk.size", 4 << 20))
        self.reader = RemoteReader(
            self.manager, chunk_size=chunk,
            cache_bytes=cfg["remote.log.index.file.cache.total.size.bytes"],
            threads=cfg["remote.log.reader.threads"], on_ready=self._ready)
        self._loop: asyncio.AbstractEventLoop | None = None
        log.info("tiered storage on: remote tier %s", self.store.description)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.manager.start()

    def stop(self) -> None:
        self.manager.stop()
        self.reader.close()

    def _leading(self) -> Iterator[tuple[str, int, Log, bool]]:
        """The tiered logs this broker leads (True) or follows (False), read on the
        manager's thread: a snapshot of the event loop's state."""
        logs = self.broker.logs
        if logs is None:
            return
        topology = self.broker.topology
        leader_log, following = topology.leader_log, topology.following
        for (topic, partition), lg in list(logs.logs.items()):
            if not lg.tiered:
                continue
            if leader_log(topic, partition) is lg:
                yield topic, partition, lg, True
            elif following is not None and (part := following(topic, partition)) is not None \
                    and part.log is lg:
                yield topic, partition, lg, False

    def _ready(self, topic: str, partition: int) -> None:
        """A chunk landed (a reader thread): the fetches waiting on it read again."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.broker.purgatory.notify, (topic, partition))


class RemoteRead(NamedTuple):
    """A read of the remote tier for a fetch: ``data`` None while the reader fetches
    (or on an error); ``aborted`` for read_committed; ``error`` a Kafka error code."""

    data: bytes | None
    aborted: list[AbortedTxn]
    error: int


def read_remote(broker: Broker, topic: str, partition: int, offset: int, max_bytes: int,
                *, min_one: bool = True, read_committed: bool = False) -> RemoteRead:
    """The one place a fetch (consumers', share groups') reads the remote tier:
    KAFKA_STORAGE_ERROR when the tier fails (logged by the reader), OFFSET_OUT_OF_RANGE
    when no remote segment holds the offset or the broker has the system off."""
    tiered = broker.tiered
    if tiered is None:
        return RemoteRead(None, [], ErrorCode.offset_out_of_range)
    try:
        got = tiered.reader.read(topic, partition, offset, max_bytes, min_one=min_one,
                                 read_committed=read_committed)
    except RemoteStorageError as exc:
        return RemoteRead(None, [], error_code(exc))
    except LookupError:
        return RemoteRead(None, [], ErrorCode.offset_out_of_range)
    if got is None:
        return RemoteRead(None, [], 0)
    _, data, aborted = got
    return RemoteRead(data or None, aborted or [], 0)


def open_tiered(broker: Broker) -> TieredStorage | None:
    """The broker's tiered storage, if ``remote.log.storage.system.enable``; a wrong
    ``rsm.config.*`` (backend, bucket, credentials, root) stops the start with a
    message naming the setting."""
    if not broker.config["remote.log.storage.system.enable"]:
        return None
    try:
        return TieredStorage(broker)
    except InvalidConfigError as exc:
        raise ConfigError(f"tiered storage: {exc}") from None
