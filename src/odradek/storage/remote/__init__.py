"""Tiered storage (KIP-405): a tiered log's rolled segments in an object store.

- ``store``: the object stores (S3-compatible through obstore, or a local directory),
  configured by ``rsm.config.*``;
- ``metadata``: what the store holds of a partition and in which state, kept in the
  store itself;
- ``manager``: the remote log manager, copying, expiring and listing segments;
- ``reader``: remote reads for fetches, through bounded caches.
"""
