"""The broker: asyncio listener, request handlers per API family, replication,
configuration and topic metadata. The only layer that owns tasks and sockets.

At the top: the broker itself (``broker``), its configuration (``config``,
``dynamic_configs``), a single node's topic metadata (``metadata``), where it stands
(``topology``: alone, or one of a cluster), and what every part uses (``errors``,
``tasks``, ``group_commit``, ``metrics``, ``log_setup``, ``run``). By area:

- ``network/``: client connections, sessions, TLS, and how brokers connect to each other;
- ``handlers/``: the requests, one module per API family;
- ``security/``: the security binding (authorizer, SCRAM credentials, client quotas)
  and the documents that keep its state;
- ``coordinators/``: the group and transaction coordinators' runtimes;
- ``cluster/``: membership of a ZooKeeper-coordinated cluster (the node, the
  coordination store, the metadata cache, the controller);
- ``replication/``: the partitions a broker hosts, the replica manager, fetchers and
  purgatories.
"""
