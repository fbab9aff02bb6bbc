"""Request handlers, one module per API family; ``HANDLERS`` maps API keys to them."""

from odradek.server.handlers import (
    api_versions,
    fetch,
    list_offsets,
    metadata,
    produce,
    producer_id,
    topics,
)
from odradek.server.handlers.base import Api

HANDLERS: dict[int, Api] = {
    api.key: api
    for api in (
        api_versions.API,
        metadata.API,
        produce.API,
        fetch.API,
        list_offsets.API,
        topics.CREATE_TOPICS,
        topics.DELETE_TOPICS,
        topics.CREATE_PARTITIONS,
        producer_id.API,
    )
}
