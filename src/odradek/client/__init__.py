"""Odradek's own Kafka client, on the same kio codecs as the broker (never imports server)."""
