"""Dynamic broker configs and group configs in a cluster: set through one broker, in
force and described on every broker (broker configs in ZooKeeper's /config/brokers,
group configs in the /odradek/group_configs document), and kept across a restart of
the whole cluster. The single-node behaviour is in tests/interop/test_dynamic_configs.py.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from odradek.client.wire import WireClient
from tests.cluster_processes import Cluster

pytestmark = pytest.mark.slow

TIMEOUT = 30


def _describe(port: int, resource_type: int, name: str, key: str) -> tuple[str, int]:
    with WireClient(port) as client:
        response = client.request(32, 4, {"resources": [{
            "resource_type": resource_type, "resource_name": name,
            "configuration_keys": [key]}],
            "include_synonyms": False, "include_documentation": False})
    (result,) = response.results
    assert result.error_code == 0, result
    (config,) = result.configs
    return config.value, config.config_source


def test_broker_and_group_configs_reach_every_broker_and_survive_a_restart(
        cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for resource in (
            ConfigResource(ResourceType.BROKER, "2", incremental_configs=[ConfigEntry(
                "sasl.kerberos.min.time.before.relogin", "120000",
                incremental_operation=AlterConfigOpType.SET)]),
            ConfigResource(ResourceType.GROUP, "shared", incremental_configs=[ConfigEntry(
                "consumer.session.timeout.ms", "50000",
                incremental_operation=AlterConfigOpType.SET)])):
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    # The cluster default, which confluent-kafka cannot name, through broker 1.
    with WireClient(cluster.brokers[1].port) as client:
        response = client.request(44, 1, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "", "configs": [{
                "name": "log.retention.ms", "config_operation": 0, "value": "7200000"}]}]})
    assert [r.error_code for r in response.responses] == [0]

    def check() -> None:
        cluster.wait_for(lambda: all(
            _describe(b.port, 32, "shared", "consumer.session.timeout.ms")
            == ("50000", ConfigSource.GROUP_CONFIG.value)
            and _describe(b.port, 4, str(n), "log.retention.ms")
            == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
            for n, b in cluster.brokers.items()), TIMEOUT, "every broker has the configs")
        assert _describe(cluster.brokers[2].port, 4, "2",
                         "sasl.kerberos.min.time.before.relogin") == (
            "120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert _describe(cluster.brokers[3].port, 4, "3",
                         "sasl.kerberos.min.time.before.relogin") == (
            "60000", ConfigSource.DEFAULT_CONFIG.value)

    check()
    for node in list(cluster.brokers):
        cluster.stop_broker(node)
    cluster.start()
    check()
