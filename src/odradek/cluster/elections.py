"""The controller's decisions about partition leadership, as pure functions.

Kafka's ``PartitionLeaderElectionAlgorithms`` and the state changes of its ZooKeeper-era
``PartitionStateMachine``/``ReplicaStateMachine``: given a partition's replicas, its
current state (leader, epoch, ISR) and the live brokers, what the new state is. Every
state the controller writes bumps the leader epoch, as Kafka's controller does, so
leaders, followers and clients can tell an old leader's view from the new one.

Safety rules these functions keep (and tests/cluster checks against random histories):
- a leader is always an ISR member, unless ``unclean`` allows otherwise;
- the ISR is never empty: when no member is alive it stays as it was, so that any of
  them (each holds every committed record) can lead again when it returns;
- only live brokers are elected.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from odradek.cluster.state import NO_LEADER, PartitionState, TopicPartition


def offline_leader(replicas: Sequence[int], isr: Collection[int], live: Collection[int],
                   unclean: bool) -> int | None:
    """Kafka's offlinePartitionLeaderElection: the first replica (in assignment order)
    that is alive and in the ISR; failing that, with unclean election enabled, the
    first live replica (which may lack committed records)."""
    for replica in replicas:
        if replica in live and replica in isr:
            return replica
    if unclean:
        for replica in replicas:
            if replica in live:
                return replica
    return None


def initial_state(replicas: Sequence[int], live: Collection[int],
                  controller_epoch: int, broker_epochs: Mapping[int, int]) -> PartitionState:
    """A new partition: the first live replica leads, the live replicas are the ISR
    (Kafka's NewPartition -> OnlinePartition). With no replica alive it starts offline
    with every replica in its ISR: all are empty, so any may lead."""
    alive = [r for r in replicas if r in live]
    if not alive:
        return PartitionState(NO_LEADER, 0, tuple(replicas), controller_epoch)
    leader = alive[0]
    return PartitionState(leader, 0, tuple(alive), controller_epoch,
                          broker_epochs.get(leader, -1))


def after_broker_change(state: PartitionState, replicas: Sequence[int],
                        live: Collection[int], broker_epochs: Mapping[int, int],
                        controller_epoch: int, unclean: bool, *,
                        excluded: Collection[int] = (),
                        bounced: Collection[int] = ()) -> PartitionState | None:
    """The partition's new state after brokers died, bounced or came back (None: no
    change). ``live`` are the brokers registered now and ``broker_epochs`` their current
    registrations; ``excluded`` brokers are alive but may neither lead nor stay in the
    ISR (they are shutting down: Kafka's controlled shutdown); ``bounced`` brokers
    registered again since the controller last saw them (a restart, or an expired
    session): Kafka handles them as a failure followed by a startup.

    - A leader that is gone, excluded or bounced, or whose registration is not the one
      it was elected under, is replaced by the first ISR member (in replica order) that
      is none of those. Failing that, a bounced ISR member may lead (it lost at most an
      unsynced tail, and nobody has more); failing that, with unclean election, any
      usable replica; otherwise the partition goes offline (leader -1, ISR unchanged) —
      except that a stopping leader nobody can replace keeps it while it is alive.
    - ISR members that are gone, excluded or bounced leave the ISR (never emptying it),
      so an acks=all producer does not wait ``replica.lag.time.max.ms`` for a dead
      follower, and a restarted follower rejoins only once it has caught up.
    - An offline partition whose ISR member is back gets that member as leader.
    """

    leader = state.leader
    if (leader != NO_LEADER and leader in live
            and broker_epochs.get(leader, -1) != state.leader_broker_epoch):
        # Elected under a registration it no longer has: it bounced unseen.
        bounced = {*bounced, leader}

    def ok(broker: int) -> bool:
        return broker in live and broker not in excluded and broker not in bounced

    if leader != NO_LEADER and ok(leader):
        isr = tuple(r for r in state.isr if ok(r))  # holds the leader: never empty
        if isr == state.isr:
            return None
        return state.changed(isr=isr, leader_epoch=state.leader_epoch + 1,
                             controller_epoch=controller_epoch)
    candidates = [r for r in state.isr if ok(r)]
    new_leader = offline_leader(replicas, candidates, live, False)
    isr = tuple(candidates)
    if new_leader is None:
        returning = [r for r in state.isr if r in live and r not in excluded]
        new_leader = offline_leader(replicas, returning, live, False)
        isr = (new_leader,) if new_leader is not None else ()
    if new_leader is None and unclean:
        usable = [r for r in live if r not in excluded]
        new_leader = offline_leader(replicas, (), usable, True)
        isr = (new_leader,) if new_leader is not None else ()
    if new_leader is None:
        if leader == NO_LEADER:
            return None  # already offline, nobody to elect
        if leader in excluded and leader in live and leader not in bounced:
            # A stopping leader nobody can take over from keeps the partition until it
            # is gone (Kafka's controlled shutdown leaves such partitions too).
            return None
        return state.changed(leader=NO_LEADER, leader_epoch=state.leader_epoch + 1,
                             controller_epoch=controller_epoch, leader_broker_epoch=-1)
    return state.changed(leader=new_leader, isr=isr, leader_epoch=state.leader_epoch + 1,
                         controller_epoch=controller_epoch,
                         leader_broker_epoch=broker_epochs.get(new_leader, -1))


def preferred_leader(state: PartitionState, replicas: Sequence[int], live: Collection[int],
                     broker_epochs: Mapping[int, int],
                     controller_epoch: int) -> PartitionState | None:
    """Kafka's preferredReplicaPartitionLeaderElection: the first replica leads again if
    it is alive and in the ISR (None: it already leads, or cannot)."""
    if not replicas:
        return None
    preferred = replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return state.changed(leader=preferred, leader_epoch=state.leader_epoch + 1,
                         controller_epoch=controller_epoch,
                         leader_broker_epoch=broker_epochs.get(preferred, -1))


def unclean_leader(state: PartitionState, replicas: Sequence[int], usable: Collection[int],
                   broker_epochs: Mapping[int, int],
                   controller_epoch: int) -> PartitionState | None:
    """ElectLeaders' UNCLEAN election (KIP-460) for a partition whose leader is gone: the
    first usable ISR member, else the first usable replica, which may lack committed
    records (None: nobody usable). The caller answers ELECTION_NOT_NEEDED where the
    leader is alive."""
    leader = offline_leader(replicas, state.isr, usable, True)
    if leader is None:
        return None
    isr = state.isr if leader in state.isr else (leader,)
    return state.changed(leader=leader, isr=isr, leader_epoch=state.leader_epoch + 1,
                         controller_epoch=controller_epoch,
                         leader_broker_epoch=broker_epochs.get(leader, -1))


def imbalanced_brokers(states: Mapping[TopicPartition, PartitionState],
                       replicas: Mapping[TopicPartition, Sequence[int]],
                       max_ratio_percent: int) -> dict[int, list[TopicPartition]]:
    """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, the partitions
    it should lead but does not, for brokers whose share of such partitions exceeds
    ``leader.imbalance.per.broker.percentage``."""
    preferred_of: dict[int, list[TopicPartition]] = {}
    for tp, reps in replicas.items():
        if reps:
            preferred_of.setdefault(reps[0], []).append(tp)
    out: dict[int, list[TopicPartition]] = {}
    for broker, tps in preferred_of.items():
        not_led = [tp for tp in tps if tp in states and states[tp].leader != broker]
        if tps and len(not_led) * 100 > max_ratio_percent * len(tps):
            out[broker] = not_led
    return out
