"""Request handlers, one module per API family; ``HANDLERS`` maps API keys to them."""

from odradek.server.handlers import (
    acls,
    admin,
    api_versions,
    cluster_admin,
    consumer_groups,
    coordinator,
    features,
    fetch,
    groups,
    list_offsets,
    metadata,
    produce,
    producer_id,
    quotas,
    records,
    sasl,
    share_groups,
    topics,
    transactions,
    txn_markers,
)
from odradek.server.handlers.base import Api

HANDLERS: dict[int, Api] = {
    api.key: api
    for api in (
        api_versions.API,
        metadata.API,
        metadata.DESCRIBE_TOPIC_PARTITIONS,
        produce.API,
        fetch.API,
        list_offsets.API,
        topics.CREATE_TOPICS,
        topics.DELETE_TOPICS,
        topics.CREATE_PARTITIONS,
        producer_id.API,
        coordinator.API,
        records.DELETE_RECORDS,
        records.OFFSET_FOR_LEADER_EPOCH,
        admin.DESCRIBE_CONFIGS,
        admin.ALTER_CONFIGS,
        admin.INCREMENTAL_ALTER_CONFIGS,
        admin.DESCRIBE_LOG_DIRS,
        admin.DESCRIBE_CLUSTER,
        *groups.APIS,
        *consumer_groups.APIS,
        *share_groups.APIS,
        *transactions.APIS,
        txn_markers.API,
        features.API,
        *cluster_admin.APIS,
        *sasl.APIS,
        *acls.APIS,
        *quotas.APIS,
    )
}
