"""Network partitions: the leader of a partition cut off from the other brokers (and from
ZooKeeper, or not) while the clients can still reach it, under the fault tier's steady
acks=all load (tests/faults/workload.py: librdkafka and kafka-python producers, 3
partitions, replication factor 3, ``min.insync.replicas=2``).

The cut is per process (tests/netcut.py: each broker in a cgroup of its own, iptables
dropping what it sends to the others' ports and they to its port). With
``min.insync.replicas=2`` the minority side (one broker) acknowledges nothing:

- cut from the brokers and ZooKeeper: its session expires, the controller elects new
  leaders on the majority side, and the old leader is a zombie until it hears its session
  is gone: still answering clients, still believing it leads, acknowledging nothing;
- cut from the brokers only: its session lives, it stays the leader, the followers leave
  its ISR after ``replica.lag.time.max.ms``, and acks=all produces fail with
  NOT_ENOUGH_REPLICAS: no acknowledgement for its partitions from the moment its ISR is
  itself alone (ZooKeeper's time of that write) to the heal.

Both then heal; the old leader catches up and rejoins every ISR, and the test ends with
the usual checks: every acknowledged record read back exactly once, in order, at its
acknowledged offset, and the replicas byte-identical after a clean stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.wire import WireClient
from odradek.records import builder
from tests.cluster_processes import FAST_SETTINGS, SESSION_TIMEOUT_MS, Cluster, run_cluster
from tests.faults import workload
from tests.faults.workload import Acked, ProducerRun, check, stop_producers
from tests.netcut import NetworkCuts, network_cuts
from tests.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.cluster

TOPIC = "jepsen"
PARTITIONS = 3
LAG_S = FAST_SETTINGS["replica.lag.time.max.ms"] / 1000
# Acknowledgements still on their way when the cut begins (answers the leader sent just
# before, a client thread yet to run its callback) are done well within this.
IN_FLIGHT_S = 1.0


@pytest.fixture
def cuts() -> Iterator[NetworkCuts]:
    with network_cuts() as made:
        yield made


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path, cuts: NetworkCuts) -> Iterator[Cluster]:
    """Three brokers, each in a cgroup of its own (the conftest's ``cluster``, cuttable)."""
    zookeeper.ensure_running()
    with run_cluster(zookeeper, tmp_path, cuts=cuts) as running:
        yield running


class TimedAcks(dict[str, Acked]):
    """A producer's acknowledgements (value -> partition/offset), and when each arrived
    (wall-clock time in the client's callback: the clock ZooKeeper stamps znodes with,
    on this one machine)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: dict[str, float] = {}

    def __setitem__(self, value: str, ack: Acked) -> None:
        self.at[value] = time.time()
        super().__setitem__(value, ack)


def _start_producer(bootstrap: str, name: str, client: str) -> ProducerRun:
    """workload.start_producer, with acknowledgements timed."""
    run = ProducerRun(name, TOPIC, PARTITIONS, client, acked=TimedAcks())
    target = workload._run_confluent if client == "confluent" else workload._run_kafka_python

    def main() -> None:
        try:
            target(run, bootstrap)
        except BaseException as exc:  # reported by stop_producers
            run.failure = exc

    run.thread = threading.Thread(target=main, name=f"producer-{name}", daemon=True)
    run.thread.start()
    return run


def _load(cluster: Cluster) -> list[ProducerRun]:
    """test_failover's load: a topic (3 partitions, RF 3, min.insync.replicas=2) and two
    producers (librdkafka, kafka-python), records flowing for 2 s."""
    cluster.create_topic(TOPIC, PARTITIONS, 3, **{"min.insync.replicas": "2"})
    runs = [_start_producer(cluster.bootstrap, "rdkafka", "confluent"),
            _start_producer(cluster.bootstrap, "kpy", "kafka-python")]
    time.sleep(2)  # records flowing before the fault
    return runs


def _stop_load(runs: list[ProducerRun]) -> None:
    """Let the producers' last records through, then stop them (and what they were told
    no longer changes)."""
    time.sleep(1)
    stop_producers(*runs)


def _finish(cluster: Cluster, runs: list[ProducerRun], minimum_acked: int = 200) -> None:
    """The Jepsen-style checks, with the producers stopped and every broker back."""
    report = check(cluster.bootstrap, *runs)
    report.assert_consistent()
    assert report.acked >= minimum_acked, report
    cluster.stop_all_and_compare_replicas(TOPIC, PARTITIONS)


def _acks_between(runs: list[ProducerRun], partitions: list[int], start: float,
                  end: float) -> list[str]:
    """Acknowledgements of ``partitions`` that arrived in [start, end]."""
    out = []
    for run in runs:
        assert isinstance(run.acked, TimedAcks)
        for value, ack in run.acked.items():
            at = run.acked.at[value]
            if ack.partition in partitions and start <= at <= end:
                out.append(f"{value} at {ack.partition}/{ack.offset}, +{at - start:.2f}s")
    return sorted(out)


def _acks_of(runs: list[ProducerRun], partitions: list[int], start: float,
             end: float) -> int:
    return len(_acks_between(runs, partitions, start, end))


def _produce_directly(cluster: Cluster, node: int, partition: int, timeout_ms: int) -> int:
    """One acks=all produce (not idempotent) sent to broker ``node`` itself, whatever the
    metadata says (a real client would go to whoever says it leads): its error code."""
    batch = builder.build_simple([b"probe-%d" % time.monotonic_ns()],
                                 timestamp=int(time.time() * 1000))
    with WireClient(cluster.brokers[node].port, timeout=timeout_ms / 1000 + 15) as client:
        response = client.request(0, 9, {"acks": -1, "timeout": timeout_ms, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]})
    return response.responses[0].partition_responses[0].error_code.value


def _state_written_at(cluster: Cluster, partition: int) -> float:
    """When the partition's state znode was last written (ZooKeeper's mtime), in s."""
    with cluster.zk() as client:
        _, stat = client.get(f"/brokers/topics/{TOPIC}/partitions/{partition}/state")
    return stat.mtime / 1000


def _led_by(cluster: Cluster, node: int) -> list[int]:
    return [p for p in range(PARTITIONS) if cluster.leader(TOPIC, p) == node]


def _timeline(events: dict[str, float], origin: float) -> str:
    return ", ".join(f"{name} +{at - origin:.1f}s" for name, at in events.items())


def _wait_for_rejoin(cluster: Cluster, node: int) -> None:
    cluster.wait_for(lambda: node in cluster.live_brokers(), 30, f"broker {node} registered")
    cluster.wait_for_full_isr(TOPIC, PARTITIONS, 90)


def test_a_leader_cut_off_from_brokers_and_zookeeper_is_replaced_and_loses_nothing(
        cluster: Cluster) -> None:
    runs = _load(cluster)
    victim = cluster.leader(TOPIC, 0)
    led = _led_by(cluster, victim)
    events: dict[str, float] = {}
    events["cut"] = cut_at = time.time()
    cluster.isolate(victim)  # clients still reach it; it reaches no broker, no ZooKeeper

    cluster.wait_for(lambda: victim not in cluster.live_brokers(),
                     SESSION_TIMEOUT_MS / 1000 + 15, f"broker {victim}'s session to expire")
    events["session expired"] = time.time()
    unelected_at = [cut_at]  # the start of the last reading with no new leader yet

    def new_leaders() -> bool:
        reading = time.time()
        if all(cluster.leader(TOPIC, p) not in (victim, -1) for p in led):
            return True
        unelected_at[0] = reading
        return False

    cluster.wait_for(new_leaders, 30, f"new leaders for {TOPIC} {led} on the majority side")
    events["new leaders"] = time.time()

    # The zombie, cut off but not told: it still answers clients and acknowledges nothing.
    zombie_error = _produce_directly(cluster, victim, 0, timeout_ms=2000)
    events["zombie answered"] = time.time()
    assert zombie_error != ErrorCode.none, (
        f"broker {victim}, cut off from every other broker and from ZooKeeper (its session "
        f"expired, partition 0 led by {cluster.leader(TOPIC, 0)}), acknowledged an acks=all "
        f"produce to partition 0")
    time.sleep(2)  # writes go on to the new leaders
    events["heal"] = healed_at = time.time()
    cluster.heal(victim)

    _wait_for_rejoin(cluster, victim)
    events["full ISR"] = time.time()
    _stop_load(runs)
    leader = cluster.leader(TOPIC, 0)
    assert leader != victim and victim in cluster.isr(TOPIC, 0), (leader, cluster.isr(TOPIC, 0))
    # Until a new leader was elected nobody could acknowledge those partitions: the old
    # leader's followers could not fetch, and the new leaders were not leaders yet.
    premature = _acks_between(runs, led, cut_at + IN_FLIGHT_S, unelected_at[0])
    print(f"\nbroker {victim} (led {led}) cut off from brokers and ZooKeeper: "
          f"{_timeline(events, cut_at)}; zombie's answer: error {zombie_error}; acks of "
          f"{led}: {_acks_of(runs, led, cut_at + IN_FLIGHT_S, healed_at)} during the cut, "
          f"{_acks_of(runs, led, healed_at, time.time())} after the heal")
    assert not premature, (f"acknowledged between the cut (+{IN_FLIGHT_S}s) and the "
                           f"election ({_timeline(events, cut_at)}): {premature[:10]}")
    _finish(cluster, runs)


def test_a_leader_cut_off_from_the_other_brokers_only_acknowledges_nothing_below_min_isr(
        cluster: Cluster) -> None:
    runs = _load(cluster)
    victim = cluster.leader(TOPIC, 0)
    led = _led_by(cluster, victim)
    events: dict[str, float] = {}
    events["cut"] = cut_at = time.time()
    cluster.isolate(victim, from_zookeeper=False)

    cluster.wait_for(lambda: all(cluster.isr(TOPIC, p) == [victim] for p in led),
                     LAG_S + 15, f"broker {victim}'s ISRs of {TOPIC} {led} down to itself")
    events["ISR shrink seen"] = time.time()
    # When the last shrink was written (the broker acts on an ISR once it is stored; it
    # does not change again during the cut): ZooKeeper's mtime of the partition state.
    events["ISR of one"] = shrunk_at = max(_state_written_at(cluster, p) for p in led)

    # A produce straight to it is refused, not appended: fewer in-sync replicas than 2.
    # (Its ISR in ZooKeeper may run a moment ahead of the one it acts on.)
    errors = _until(lambda: _produce_directly(cluster, victim, led[0], timeout_ms=2000),
                    lambda error: error in (ErrorCode.none, ErrorCode.not_enough_replicas), 10)
    events["refused"] = time.time()
    assert errors[-1] == ErrorCode.not_enough_replicas, (
        f"broker {victim}, alone in the ISR of {TOPIC}-{led[0]} with min.insync.replicas=2, "
        f"answered an acks=all produce with {errors}")
    time.sleep(3)  # the producers keep trying, and must keep failing
    assert _led_by(cluster, victim) == led and victim in cluster.live_brokers()
    events["heal"] = healed_at = time.time()
    cluster.heal(victim)

    _wait_for_rejoin(cluster, victim)
    events["full ISR"] = time.time()
    _stop_load(runs)
    during = _acks_between(runs, led, shrunk_at, healed_at)
    before = _acks_of(runs, led, cut_at + IN_FLIGHT_S, shrunk_at)
    others = [p for p in range(PARTITIONS) if p not in led]
    print(f"\nbroker {victim} (led {led}) cut off from the other brokers: "
          f"{_timeline(events, cut_at)}; direct produce: errors {errors}; acks of {led}: "
          f"{before} from the cut (+{IN_FLIGHT_S}s) to the ISR of one, {len(during)} from "
          f"there to the heal, "
          f"{_acks_of(runs, led, healed_at, time.time())} after the heal; acks of "
          f"{others} during the cut: {_acks_of(runs, others, cut_at, healed_at)}")
    # From the ISR of one to the heal, nothing: min.insync.replicas=2. (Before it, there
    # can be a few: an ISR shrinking one follower at a time, say [1,2,3] -> [2,3], lets
    # the high watermark move up to what the follower still in it had fetched before the
    # cut: records on two replicas, rightly acknowledged.)
    assert not during, (f"acknowledged by broker {victim} cut off from the others "
                        f"({_timeline(events, cut_at)}; ISR of one from "
                        f"+{shrunk_at - cut_at:.1f}s): {during[:10]}")
    _finish(cluster, runs)


def _until(attempt: Callable[[], Any], done: Callable[[Any], bool],
           timeout_s: float) -> list[Any]:
    """Every result of ``attempt`` until one is ``done`` or ``timeout_s`` has passed."""
    results = [attempt()]
    deadline = time.monotonic() + timeout_s
    while not done(results[-1]) and time.monotonic() < deadline:
        time.sleep(0.2)
        results.append(attempt())
    return results
