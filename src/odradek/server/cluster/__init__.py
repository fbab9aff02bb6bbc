"""A broker's membership of a replicated cluster coordinated by ZooKeeper (Kafka's
ZooKeeper-era design): the I/O side of it. The rules it applies (placement, elections,
replication, the znodes' formats) are the pure ones of the top-level ``odradek.cluster``.

- ``node``: ``ClusterNode``, one broker's part in the cluster (its session,
  registration, the ``Topology`` the broker asks), and the parts it owns:
  ``topic_admin`` (topic writes any broker makes for a client), ``producer_ids``
  (producer id blocks), ``txn_markers`` (transaction markers, to other brokers and
  here) and ``broker_configs`` (dynamic broker configs);
- ``store``: the coordination store interface and ``MemoryStore``; ``zookeeper``: the
  real one, on kazoo;
- ``metadata``: each broker's view of the cluster, kept by watches (``ClusterMetadata``);
- ``controller``: the controller role; ``topic_znodes``: its writes of topics' znodes.

The sub-modules are imported by name (``odradek.server.cluster.node``, ...): this
package imports none of them itself, so that importing the store (the replica manager,
the security documents do) does not import the node and, through it, the replica
manager again.
"""
