"""Dynamic broker configs in a cluster: kept in ZooKeeper as Kafka lays them out
(``/config/brokers/N`` for one broker, ``/config/brokers/<default>`` for the cluster
default), followed by every broker through its metadata cache's watches, written by any
broker for IncrementalAlterConfigs / AlterConfigs (validated by
``Broker.set_broker_configs``), and read as the settings that apply now (dynamic, this
broker's then the cluster default, else static).

Owned by the broker's ``ClusterNode`` (``node.dynamic_configs``), which answers the
``Topology`` protocol's ``broker_configs`` and ``set_broker_configs`` by asking this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from odradek.cluster import state as zk
from odradek.server.cluster.store import NoNodeError, StoreError
from odradek.server.metadata import TopicError
from odradek.server.settings import SETTINGS

if TYPE_CHECKING:
    from odradek.server.cluster.node import ClusterNode


class DynamicBrokerConfigs:
    """A cluster node's dynamic broker configs (read from its metadata cache, written to
    ZooKeeper)."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.config = node.config
        self.node_id = node.node_id
        self.store = node.store

    def dynamic_setting(self, name: str) -> tuple[str, str] | None:
        """The value of a dynamic broker config set for this broker ("broker") or for
        the cluster ("default"), with where it comes from; None: not set dynamically."""
        for key, source in ((str(self.node_id), "broker"), (zk.DEFAULT_BROKER, "default")):
            value = self.node.metadata.broker_configs.get(key, {}).get(name)
            if value is not None:
                return value, source
        return None

    def setting(self, name: str) -> Any:
        """A broker setting as it applies now: dynamic (this broker's, then the cluster
        default), else static (command line, environment, file, default)."""
        dynamic = self.dynamic_setting(name)
        if dynamic is None:
            return self.config[name]
        return SETTINGS[name].parse(name, dynamic[0])

    def broker_configs(self, resource: str) -> dict[str, str]:
        """The dynamic configs stored for a broker resource ("" is the cluster default)."""
        return dict(self.node.metadata.broker_configs.get(resource or zk.DEFAULT_BROKER, {}))

    async def set_broker_configs(self, resource: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of broker ``resource`` ("" for the cluster
        default): /config/brokers/N or /config/brokers/<default>, as Kafka stores them.
        Every broker watches its own and the default, and applies them at once. The
        caller has validated them (``Broker.set_broker_configs``)."""
        key = resource or zk.DEFAULT_BROKER
        path = zk.broker_config_path(key)
        data = zk.config_to_json(configs)
        try:
            try:
                await self.store.set(path, data)
            except NoNodeError:
                await self.store.create(path, data)
        except StoreError as exc:
            raise TopicError("REQUEST_TIMED_OUT", f"ZooKeeper: {exc}") from None
        if key in (str(self.node_id), zk.DEFAULT_BROKER):
            # As for topic configs: in force here before the answer, not a watch later.
            self.node.metadata.broker_configs[key] = dict(configs)
            self.node.replicas.broker_configs_changed()
