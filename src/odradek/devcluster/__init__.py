"""A whole cluster on one machine, for development and tests: a private ZooKeeper and N
``odradek serve`` processes on consecutive (or free) ports of 127.0.0.1.

This package owns the processes and the waits between them, once, for all their users:
``odradek cluster up`` (cli/cluster.py), the ``running_cluster`` fixture of
``odradek.testing``, the test suite and the benchmarks.

- ``ZooKeeperServer``: Debian's ``zookeeper`` package (3.8) run as a plain ``java``
  process with its own zoo.cfg, data directory and log. No service manager, no root.
  It can be stopped, restarted on the same port and data (sessions survive: ZooKeeper
  keeps them in its transaction log, as it does its znodes) and paused (SIGSTOP).
  Starting takes 0.25-0.5 s here (JVM start to serving ``srvr``).
- ``BrokerProcess``: one ``python -m odradek serve`` subprocess, its output appended to a
  log file; ready when it prints its "listening on HOST:PORT" line (which a broker in a
  cluster prints once it has registered in ZooKeeper).
- ``DevCluster``: ZooKeeper (unless given one) plus the brokers, started together, ready
  once every broker's own Metadata lists every broker; a broker can be stopped and started
  again on the same port, and one more added; ``close`` stops the brokers one at a time,
  the controller last (each does a controlled shutdown), then ZooKeeper. The test suite's
  cluster (tests/cluster_processes.py: faults) and the cluster benchmark's
  (bench/cluster_bench.py: measurements) are subclasses of it.

Failures are ``ClusterError`` (ZooKeeper's: ``ZooKeeperError``) with the tail of the log
that explains them; callers turn them into an exit code or a failed test.
"""

from odradek.devcluster.broker import BROKER_START_TIMEOUT_S, BROKER_STOP_TIMEOUT_S, BrokerProcess
from odradek.devcluster.cluster import (
    DEFAULT_BASE_PORT,
    DEFAULT_CHROOT,
    FAST_SETTINGS,
    REGISTER_TIMEOUT_S,
    DevCluster,
    cluster_defaults,
    host_racks,
)
from odradek.devcluster.processes import (
    ClusterError,
    free_port,
    port_in_use,
    read_log,
    spawn,
    stop_process,
)
from odradek.devcluster.zookeeper import (
    CLASSPATH,
    INSTALL_HINT,
    JAVA_DIR,
    JVM_OPTIONS,
    ZOOKEEPER_JAR,
    ZooKeeperError,
    ZooKeeperServer,
    four_letter_word,
)

__all__ = [
    "BROKER_START_TIMEOUT_S", "BROKER_STOP_TIMEOUT_S", "CLASSPATH", "DEFAULT_BASE_PORT",
    "DEFAULT_CHROOT", "FAST_SETTINGS", "INSTALL_HINT", "JAVA_DIR", "JVM_OPTIONS",
    "REGISTER_TIMEOUT_S", "ZOOKEEPER_JAR", "BrokerProcess", "ClusterError", "DevCluster",
    "ZooKeeperError", "ZooKeeperServer", "cluster_defaults", "four_letter_word",
    "free_port", "host_racks", "port_in_use", "read_log", "spawn", "stop_process",
]
