"""Odradek: a Kafka-compatible distributed commit log in Python."""

__version__ = "0.1.0"
