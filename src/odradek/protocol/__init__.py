"""The Kafka wire protocol, sans-IO: framing, and request/response codecs built on kio's
schemas generated from Kafka's own message specs. Imports nothing else of Odradek's and
never touches sockets or asyncio."""
