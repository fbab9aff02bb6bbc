"""Replication on a broker: the partitions it hosts and the roles it plays for them.

- ``partition``: one hosted replica (Kafka's ``Partition``): its log, its role, and as
  leader the appends, follower fetches and high-watermark steps, in one place;
- ``replica_manager``: every hosted replica (Kafka's ``ReplicaManager``): roles taken
  from the coordination store, ISR changes stored, and what the Produce and Fetch
  handlers call;
- ``fetcher``: the follower's side, copying leaders' logs (``ReplicaFetcherThread``);
- ``purgatory``: delayed operations, one class for waiting fetches and acks=all
  produces (``DelayedOperationPurgatory``, ``DelayedProduce``);
- ``reads``: what a fetch reads from a partition.

The rules they apply (high watermark, ISR, truncation, roles) are the pure ones of
``odradek.cluster.replication``.
"""
