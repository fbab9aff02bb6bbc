"""Kafka v2 record batches: the header view and its checks (hot path), CRC-32C, the five
codecs, and a builder/decoder of whole batches for tests and the broker's own records.

Imports nothing else of Odradek's and never touches sockets or asyncio.
"""
