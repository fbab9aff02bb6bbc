"""The replicated cluster's pure decisions, and the store they are kept in.

Kafka's ZooKeeper-era design, without the I/O:

- ``placement``: where a new topic's replicas go (rack-aware or not);
- ``elections``: partition leader elections and the controller's state changes;
- ``replication``: a leader's view of its followers, the ISR and high-watermark rules;
- ``state``: the cluster state as it lives in the coordination store, and its znode layout;
- ``store``: the coordination store interface (znodes, versions, ephemeral nodes,
  watches, sessions) every piece of cluster code talks to, with an in-memory
  implementation for tests. The ZooKeeper implementation is I/O and lives in
  ``odradek.server.zookeeper``.
"""
