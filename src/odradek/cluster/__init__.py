"""The replicated cluster's pure decisions.

Kafka's ZooKeeper-era design, without the I/O:

- ``placement``: where a new topic's replicas go (rack-aware or not);
- ``elections``: partition leader elections and the controller's state changes;
- ``replication``: a leader's view of its followers, the ISR and high-watermark rules;
- ``state``: the cluster state as it lives in the coordination store, and its znode layout;

The coordination store these states are kept in (its interface, watches and in-memory
implementation) runs tasks and takes locks: it lives with the I/O, in
``odradek.server.cluster.store`` beside the ZooKeeper implementation
(``odradek.server.cluster.zookeeper``).
Nothing here imports asyncio, threading or kazoo (an import-linter contract checks it).
"""
