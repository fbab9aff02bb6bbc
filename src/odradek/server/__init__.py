"""The broker: asyncio listener, request handlers per API family, fetch purgatory,
configuration and topic metadata. The only layer that owns tasks and sockets."""
