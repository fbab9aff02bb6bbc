"""The replicas this broker hosts, the role it plays for each, and what handlers ask
of them (Kafka's ``ReplicaManager``), driven by partition states read from the
coordination store (server/cluster/metadata.py) instead of LeaderAndIsr requests.

- Roles: ``apply`` takes up the role the store gives (cluster/replication.py's
  ``replica_role``): **leader** (the state names this broker under its current
  registration), **follower** (a replica fetcher copies the leader's log:
  server/replication/fetcher.py), or **none**. The transitions themselves are
  ``Partition``'s; the fetchers, coordinator elections and ISR writes are here.
- For the handlers: ``leaders`` (a produce appends with ``Partition.append_as_leader``)
  and ``delay_produce`` (acks=all: one ``DelayedProduce`` per request in the produce
  purgatory); ``read_for_follower`` (a
  follower's fetch: throttles, the read, ``Partition.record_follower_fetch``);
  ``epoch_refusals`` and ``preferred_read_replicas`` for consumers' fetches;
  ``wait_replicated`` for the broker's own acks=all writes (coordinators, markers).
- ISR changes: the expansions follower fetches earn and the shrinks of the ISR check
  are stored conditionally on the state's version (cluster/replication.py decides;
  a shrink counts only once stored).

A leader that loses its role (the controller moved it, or this broker's ZooKeeper
session expired) stops acknowledging at once: waiting acks=all produces fail with
NOT_LEADER_OR_FOLLOWER, and the group and transaction coordinators of internal
partitions resign. Becoming leader of an internal partition elects its coordinator.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.cluster import state as zk
from odradek.cluster.quota import ReplicationQuota, is_throttled
from odradek.cluster.replica_selector import FollowerInfo, preferred_read_replica
from odradek.cluster.replication import LeaderReplication, Role, epoch_error, replica_role
from odradek.cluster.state import PartitionState, TopicPartition
from odradek.coordinator import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.server.cluster.store import BadVersionError, NoNodeError, StoreError
from odradek.server.errors import error_code
from odradek.server.replication.fetcher import ReplicaFetcher
from odradek.server.replication.partition import Partition
from odradek.server.replication.purgatory import DelayedProduce, Purgatory
from odradek.server.replication.reads import PartitionResult, Refused, Wanted
from odradek.server.tasks import TaskSet
from odradek.server.topic_ids import is_unknown
from odradek.storage import partition_metadata
from odradek.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from odradek.protocol.fetch import FetchTopic
    from odradek.server.cluster.node import ClusterNode

log = logging.getLogger(__name__)



class ReplicaManager:
    """Every partition replica this broker hosts, and the fetchers that feed followers."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.broker = node.broker
        self.config = node.config
        self.metadata = node.metadata
        self.me = node.node_id
        self.partitions: dict[TopicPartition, Partition] = {}
        self.leaders: dict[TopicPartition, Partition] = {}  # valid leadership only
        # acks=all appends waiting for their high watermarks; the fetch purgatory is
        # the broker's (a single node's long polls wait there too).
        self.produce_purgatory = Purgatory()
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._tasks = TaskSet("replica manager")
        self._isr_task: asyncio.Task[None] | None = None
        self.lag_ms: int = self.config["replica.lag.time.max.ms"]
        self.num_fetchers: int = self.config["num.replica.fetchers"]
        self.stopping = False
        self.started = False  # metadata events before start() are applied by it
        self._truncated = False  # a truncation since the checkpoints were last written
        # Replication throttles (KIP-73; cluster/quota.py): what this broker sends as a
        # leader to, and fetches as a follower for, throttled replicas out of sync.
        self.leader_quota = ReplicationQuota()
        self.follower_quota = ReplicationQuota()

    @property
    def clock(self) -> Any:
        return self.broker.clock

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Take up the roles the store gives (metadata is loaded), drop logs of partitions
        no longer assigned here, and start the ISR check."""
        assert self.broker.logs is not None
        self.started = True
        self.broker_configs_changed()
        for tp in list(self.broker.logs.logs):
            if self.me not in self.metadata.replicas(*tp):
                log.info("%s-%d is not assigned to this broker any more: deleting its log",
                         *tp)
                self.broker.logs.delete_log(*tp)
        self.apply_all()
        self._isr_task = asyncio.get_running_loop().create_task(self._check_isr(),
                                                                name="isr-check")

    def stop_waiting(self) -> None:
        """The broker is stopping: acks=all produces waiting here are answered now
        (NOT_LEADER_OR_FOLLOWER: the client retries elsewhere) rather than holding the
        stop up until their timeout."""
        for part in list(self.partitions.values()):
            part.stopped_waiting = True
        self.produce_purgatory.wake_all()

    async def stop(self) -> None:
        self.stopping = True
        if self._isr_task is not None:
            self._isr_task.cancel()
        self.stop_waiting()
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
        await self._tasks.close(self._isr_task)

    # --- metadata listener -----------------------------------------------------------------------

    def partitions_changed(self, partitions: list[TopicPartition]) -> None:
        if self.started and not self.stopping:
            for tp in partitions:
                self.apply(tp)

    def brokers_changed(self) -> None:
        for fetcher in self._fetchers.values():
            fetcher.endpoint_changed()

    def topic_removed(self, topic: str, partitions: int) -> None:
        tiered = self.broker.tiered
        for tp in [tp for tp in self.partitions if tp[0] == topic]:
            lg = self.partitions[tp].log
            topic_id = partition_metadata.read(lg.directory) if lg.tiered else None
            self._remove(tp, delete_log=True)
            if tiered is not None and lg.tiered:
                # Kafka's rule: a deleted topic's remote segments go too (every replica's
                # broker asks; deleting what is gone already is no error).
                tiered.manager.delete_partition(*tp, topic_id)

    def topic_unusable(self, topic: str) -> None:
        """Nothing here: a topic known before keeps its last good assignment, and one
        that was never usable has no replicas on this broker."""

    def configs_changed(self, topic: str) -> None:
        if self.broker.logs is not None:  # else the logs open with the new configs
            self.broker.logs.update_config(topic, self.broker.log_config_for(topic))

    def broker_configs_changed(self) -> None:
        self.leader_quota.set_rate(self.node.setting("leader.replication.throttled.rate"))
        self.follower_quota.set_rate(
            self.node.setting("follower.replication.throttled.rate"))
        self.broker.dynamic_configs_changed()  # dynamic topic-config defaults

    # --- replication throttles ---------------------------------------------------------------

    def follower_throttled(self, tp: TopicPartition) -> bool:
        """Whether this follower's fetching of ``tp`` counts against (and waits for) the
        follower quota: listed in follower.replication.throttled.replicas for this
        broker, and not in the ISR (Kafka's ReplicaFetcherThread.shouldFollowerThrottle)."""
        if self.follower_quota.unlimited:
            return False
        part = self.partitions.get(tp)
        if part is None or not is_throttled(
                part.log.config.follower_replication_throttled_replicas, tp[1], self.me):
            return False
        state = self.metadata.states.get(tp)
        return state is None or self.me not in state.isr

    def _leader_throttled(self, part: Partition, replica: int) -> bool:
        """Whether sending ``part`` to follower ``replica`` counts against (and waits
        for) the leader quota: listed in leader.replication.throttled.replicas for this
        broker, and the follower not in the ISR (Kafka's shouldLeaderThrottle)."""
        if self.leader_quota.unlimited:
            return False
        repl = part.repl
        if repl is None or replica in repl.isr:
            return False
        spec = part.log.config.leader_replication_throttled_replicas
        return is_throttled(spec, part.tp[1], self.me)

    # --- roles ----------------------------------------------------------------------------------

    def apply_all(self) -> None:
        for topic, assignment in list(self.metadata.assignments.items()):
            for p in range(assignment.partitions):
                self.apply((topic, p))

    def apply(self, tp: TopicPartition) -> None:
        """Take up the role the store gives this broker for ``tp``."""
        if self.stopping or not self.started:
            return
        replicas = self.metadata.replicas(*tp)
        if self.me not in replicas:
            if tp in self.partitions:
                self._remove(tp, delete_log=True)
            return
        part = self.partitions.get(tp)
        if part is None:
            assert self.broker.logs is not None
            # With the topic's id: a log left by an earlier topic of this name (deleted
            # while this broker was away) is deleted, not followed or served.
            lg = self.broker.logs.get_or_create_log(
                *tp, topic_id=self.metadata.assignments[tp[0]].topic_id)
            lg.set_replicated(True)
            part = self.partitions[tp] = Partition(
                tp, lg, fetches=self.broker.purgatory, produces=self.produce_purgatory)
        if part.replicas != replicas:
            part.set_replicas(replicas)
        state = self.metadata.states.get(tp)
        role = replica_role(
            self.me, state.leader if state is not None else None,
            state is not None and self.node.is_current_registration(state.leader_broker_epoch))
        if state is None or role is Role.NONE:
            self._to_none(part)
        elif role is Role.LEADER:
            if part.role is not Role.LEADER or part.leader_epoch != state.leader_epoch:
                self._become_leader(part, state)
            else:
                self._count_isr_change(part, state.isr)
                part.update_state(state)
        elif (part.role is not Role.FOLLOWER or part.leader_id != state.leader
              or part.leader_epoch != state.leader_epoch):
            self._become_follower(part, state)
        else:
            part.state = state

    def _count_isr_change(self, part: Partition, isr: Iterable[int]) -> None:
        """metrics.listen: ReplicaManager's IsrShrinksPerSec / IsrExpandsPerSec, for a
        partition this broker leads on from ``part.state`` to an ISR of ``isr``.

        Counted whoever wrote the change: this leader (a follower fell behind or caught
        up) or the controller (a broker died, bounced or is shutting down). Kafka counts
        only the leader's own writes; here the controller takes a stopped broker out of
        every ISR at once (a crashed one at its session's expiry), before the leader's
        lag check would, so that count would miss the commonest shrink."""
        stats = self.broker.stats
        old = part.state
        if stats is None or old is None or part.role is not Role.LEADER:
            return
        before, after = set(old.isr), set(isr)
        if before - after:
            stats.isr_shrinks += 1
        if after - before:
            stats.isr_expands += 1

    def _become_leader(self, part: Partition, state: PartitionState) -> None:
        self._count_isr_change(part, state.isr)  # still the leader, at a new epoch
        self._stop_fetching(part)
        start = part.make_leader(state, self.me, self.clock())
        self.leaders[part.tp] = part
        log.info("%s-%d: leader at epoch %d from offset %d, ISR %s", *part.tp,
                 state.leader_epoch, start, sorted(state.isr),
                 extra=_context(part.tp, role="leader", leader=self.me,
                                leader_epoch=state.leader_epoch, isr=sorted(state.isr)))
        # Also at a new epoch of the same leadership: the coordinator epoch moves on.
        self._coordinator(part.tp, elect=True)

    def _become_follower(self, part: Partition, state: PartitionState) -> None:
        self._stop_fetching(part)
        self._resigning(part)
        part.make_follower(state)
        self._fetcher(state.leader, part.tp).add(part.tp, state.leader_epoch)
        log.info("%s-%d: follower of broker %d at epoch %d", *part.tp, state.leader,
                 state.leader_epoch,
                 extra=_context(part.tp, role="follower", leader=state.leader,
                                leader_epoch=state.leader_epoch))

    def _to_none(self, part: Partition) -> None:
        self._stop_fetching(part)
        self._resigning(part)
        if part.role is not Role.NONE:
            log.info("%s-%d: no role (leader %s)", *part.tp,
                     part.state.leader if part.state else "unknown",
                     extra=_context(part.tp, role="none"))
        part.make_none()

    def _resigning(self, part: Partition) -> None:
        """Before a leader takes another role: out of ``leaders`` (no new appends),
        its coordinator resigns."""
        if part.role is not Role.LEADER:
            return
        self.leaders.pop(part.tp, None)
        self._coordinator(part.tp, elect=False)
        # Share groups' in-flight records of it go: the new leader reads the share
        # state from the share coordinator (what was out is delivered again).
        self.broker.share_partitions.drop_partition(*part.tp)
        log.info("%s-%d: no longer leader", *part.tp, extra=_context(part.tp, role="resigned"))

    def _remove(self, tp: TopicPartition, *, delete_log: bool) -> None:
        part = self.partitions.pop(tp, None)
        if part is None:
            return
        self._to_none(part)
        if delete_log and self.broker.logs is not None:
            self.broker.logs.delete_log(*tp)
            log.info("%s-%d: replica deleted", *tp)

    def session_lost(self) -> None:
        """Our registration is gone: every leadership ends until the controller elects
        this broker again under its next registration."""
        for part in list(self.leaders.values()):
            self._to_none(part)

    def _coordinator(self, tp: TopicPartition, *, elect: bool) -> None:
        runtime = (self.broker.groups if tp[0] == OFFSETS_TOPIC else
                   self.broker.transactions if tp[0] == TRANSACTION_STATE_TOPIC else
                   self.broker.share_state if tp[0] == SHARE_GROUP_STATE_TOPIC else None)
        if runtime is None:
            return
        try:
            if elect:
                runtime.elect(tp[1])
            else:
                runtime.resign(tp[1])
        except Exception:
            log.exception("%s-%d: the coordinator could not %s", *tp,
                          "load" if elect else "unload")

    # --- fetchers (the follower's side) -----------------------------------------------------

    def _fetcher(self, leader: int, tp: TopicPartition) -> ReplicaFetcher:
        key = (leader, hash(tp) % self.num_fetchers)
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            fetcher = self._fetchers[key] = ReplicaFetcher(self, leader, key[1])
        return fetcher

    def _stop_fetching(self, part: Partition) -> None:
        if part.role is Role.FOLLOWER:
            fetcher = self._fetchers.get((part.leader_id, hash(part.tp) % self.num_fetchers))
            if fetcher is not None:
                fetcher.remove(part.tp)

    def following(self, topic: str, partition: int) -> Partition | None:
        """The partition if this broker follows it: its fetcher copies into it, and
        consumers may read it here up to the high watermark it has from the leader
        (fetch from follower, KIP-392)."""
        part = self.partitions.get((topic, partition))
        return part if part is not None and part.role is Role.FOLLOWER else None

    def truncate(self, part: Partition, offset: int) -> None:
        part.truncate_to(offset)
        self._truncated = True

    def truncate_fully(self, part: Partition, offset: int) -> None:
        part.truncate_fully(offset)
        self._truncated = True

    def checkpoint_truncations(self) -> None:
        """After truncations: write the recovery-point (and log-start) checkpoints now, as
        Kafka's LogManager.truncateTo does. The checkpoint on disk may name a recovery
        point above the cut, and data appended there from the new leader is not synced
        yet: after a crash, recovery would trust it unvalidated."""
        if self._truncated and self.broker.logs is not None:
            self._truncated = False
            self.broker.logs.write_checkpoints()

    # --- the leader's side: produce ---------------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        part = self.leaders.get((topic, partition))
        return part.leader_epoch if part is not None else -1

    def delay_produce(self, waits: Sequence[tuple[Partition, int]], timeout_ms: int | None
                      ) -> DelayedProduce:
        """acks=all: the request's appends (partition, offset its high watermark must
        reach), each answered with its Kafka error code once settled (see
        ``DelayedProduce``), REQUEST_TIMED_OUT for those still waiting after
        ``timeout_ms`` (None: no limit)."""
        return DelayedProduce(self.produce_purgatory, waits,
                              None if timeout_ms is None else max(timeout_ms, 0) / 1000)

    def wait_replicated(self, topic: str, partition: int, end: int) -> Awaitable[int] | None:
        """For the broker's own acks=all writes (coordinator records, transaction
        markers): None if offsets below ``end`` are committed with enough replicas in
        sync, else an awaitable of the Kafka error code their acks=all answer gets."""
        part = self.leaders.get((topic, partition))
        if part is None:
            return _done(ErrorCode.not_leader_or_follower)
        part.advance_high_watermark()  # after the caller's append: an ISR of one commits
        if part.log.high_watermark >= end and part.enough_in_sync():
            return None
        return _first(DelayedProduce(self.produce_purgatory, [(part, end)], None))

    # --- the leader's side: fetches -----------------------------------------------------------

    def epoch_refusals(self, topics: Iterable[FetchTopic], follower_reads: bool) -> Refused:
        """Of a consumer's fetch: the partitions led here (or, with ``follower_reads``,
        followed here) at another epoch than the one the client names, with their
        KIP-320 error."""
        refused: Refused = {}
        leaders = self.leaders
        for t in topics:
            topic = t.topic
            for p in t.partitions:
                part = leaders.get((topic, p.partition))
                if part is None and follower_reads:
                    part = self.following(topic, p.partition)
                if part is not None:
                    code = epoch_error(p.current_leader_epoch, part.leader_epoch)
                    if code:
                        refused[(topic, p.partition)] = code
        return refused

    def preferred_read_replicas(self, wanted: list[Wanted], client_rack: str,
                                refused: Refused | None) -> dict[TopicPartition, int]:
        """On a leader, for a consumer in ``client_rack``: the partitions it should fetch
        from a follower in its rack (Kafka's ReplicaManager.findPreferredReadReplica with
        the rack-aware selector; the rule is cluster/replica_selector.py's)."""
        brokers = self.metadata.brokers
        me = self.me
        own = brokers.get(me)
        my_rack = own.rack if own is not None else (self.config["broker.rack"] or None)
        if my_rack == client_rack:
            return {}  # the leader is in the client's rack: it is the pick, everywhere
        now = self.clock()
        preferred: dict[TopicPartition, int] = {}
        for topic, partition, fetch_offset, _ in wanted:
            tp = (topic, partition)
            part = self.leaders.get(tp)
            if part is None or (refused and tp in refused):
                continue
            repl = part.repl
            if repl is None:
                continue
            isr = repl.isr
            followers = []
            for replica, state in repl.followers.items():
                info = brokers.get(replica)
                followers.append(FollowerInfo(
                    replica, info.rack if info is not None else None, info is not None,
                    replica in isr, state.log_start_offset, state.log_end_offset,
                    state.last_caught_up_ms))
            chosen = preferred_read_replica(client_rack, me, my_rack, part.log.log_end_offset,
                                            followers, fetch_offset, now)
            if chosen is not None:
                preferred[tp] = chosen
        return preferred

    def read_for_follower(self, replica: int, wanted: list[Wanted], max_bytes: int,
                          asked_epochs: dict[TopicPartition, int],
                          log_starts: dict[TopicPartition, int],
                          quota_wait: list[float] | None = None,
                          unread: list[TopicPartition] | None = None
                          ) -> tuple[list[PartitionResult], int]:
        """A follower's fetch: up to the log end, from partitions this broker leads and
        the follower replicates. The fetch offset is the follower's log end, recorded
        (it may move the high watermark, and earn the follower its ISR place) before
        the answer names the high watermark. A throttled replica (KIP-73) gets nothing
        while the leader quota is spent; ``quota_wait[0]`` then says how long until it
        frees. Partitions with records that got none (no room left in the answer, or
        held by the quota) are added to ``unread``."""
        registered = replica in self.metadata.brokers
        shutting_down = replica in self.metadata.shutting_down
        now = self.clock()
        missing = self.broker.missing_partition_error
        quota = self.leader_quota
        results = []
        total = 0
        for topic, partition, fetch_offset, partition_max_bytes in wanted:
            tp = (topic, partition)
            part = self.leaders.get(tp)
            if part is None:
                # An id this broker does not know (v13+: a follower with another
                # incarnation of the topic in its metadata) is UNKNOWN_TOPIC_ID, as
                # Kafka's leader answers it.
                code = (ErrorCode.unknown_topic_id if is_unknown(topic)
                        else missing(topic, partition))
            elif not registered or replica not in part.replicas:
                code = ErrorCode.replica_not_available  # not a broker holding a replica of it
            else:
                code = epoch_error(asked_epochs.get(tp, -1), part.leader_epoch)
            if code or part is None:
                results.append(PartitionResult(topic, partition, code, -1, -1, -1, None))
                continue
            lg = part.log
            budget = min(max_bytes - total, partition_max_bytes)
            end = lg.log_end_offset
            throttled = self._leader_throttled(part, replica)
            # The leader's replication quota spent: a throttled replica gets nothing now.
            held = throttled and quota.exceeded(time.monotonic())
            if held and quota_wait is not None:
                quota_wait[0] = max(quota_wait[0], quota.wait_s(time.monotonic()))
            try:
                # At the log end there is nothing to read (most partitions of a follower
                # that keeps up): no read, no lock.
                read = (lg.read(fetch_offset, max(budget, 0), min_one=total == 0)
                        if (budget > 0 or total == 0) and fetch_offset != end and not held
                        else None)
            except OffsetOutOfRangeError as exc:
                results.append(PartitionResult(topic, partition, error_code(exc),
                                               lg.high_watermark, -1, exc.log_start_offset,
                                               None))
                continue
            if read is not None:
                end = read.log_end_offset
            elif fetch_offset != end and unread is not None:
                unread.append(tp)
            grown = part.record_follower_fetch(replica, fetch_offset, end, now,
                                               log_starts.get(tp, -1), not shutting_down)
            if grown is not None:
                self._change_isr(part, grown, f"broker {replica} caught up")
            region = read.region if read is not None else None
            if region is not None:
                total += region.length
                if throttled:
                    quota.record(region.length, time.monotonic())
            hw = lg.high_watermark
            results.append(PartitionResult(topic, partition, 0, hw,
                                           min(lg.last_stable_offset, hw),
                                           lg.log_start_offset, region))
        return results, total

    # --- ISR changes ----------------------------------------------------------------------------

    async def _check_isr(self) -> None:
        """Kafka's isr-expiration task: every half lag period, drop lagging followers."""
        interval = max(self.lag_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = self.clock()
            for part in list(self.leaders.values()):
                repl = part.repl
                if repl is None:
                    continue
                shrunk = repl.shrink(now, self.lag_ms)
                if shrunk is not None:
                    lagging = sorted(repl.isr - shrunk)
                    self._change_isr(part, shrunk, f"broker(s) {lagging} fell behind")

    def _change_isr(self, part: Partition, isr: frozenset[int], why: str) -> None:
        repl = part.repl
        state = part.state
        if repl is None or state is None:
            return
        repl.begin_isr_change(isr)
        # A pending expansion counts for the high watermark at once (maximal ISR).
        part.advance_high_watermark()
        self._tasks.spawn(self._store_isr(part, repl, state, isr, why),
                          name=f"isr-{part.tp[0]}-{part.tp[1]}")

    async def _store_isr(self, part: Partition, repl: LeaderReplication,
                         state: PartitionState, isr: frozenset[int], why: str) -> None:
        tp = part.tp
        new = state.changed(isr=tuple(sorted(isr)))
        try:
            version = await self.node.store.set(zk.state_path(*tp), new.to_json(), state.version)
        except BadVersionError:
            # The controller changed the state (a new epoch is on its way to us), or we
            # missed our own earlier write: re-read, and let apply() sort it out.
            repl.isr_change_failed()
            await self._reread(tp)
            return
        except (StoreError, NoNodeError) as exc:
            repl.isr_change_failed()
            log.warning("%s-%d: could not store ISR %s (%s): %s", *tp, sorted(isr), why, exc,
                        extra=_context(tp, isr=sorted(isr)))
            return
        if part.repl is not repl:
            return  # resigned meanwhile
        stored = new.changed(version=version)
        self._count_isr_change(part, isr)
        part.state = stored
        repl.isr_change_stored(isr)
        log.info("%s-%d: ISR %s -> %s (%s)", *tp, sorted(state.isr), sorted(isr), why,
                 extra=_context(tp, leader=self.me, leader_epoch=state.leader_epoch,
                                isr=sorted(isr), previous_isr=sorted(state.isr)))
        self.metadata.record_state(tp, stored)
        part.advance_high_watermark()

    async def _reread(self, tp: TopicPartition) -> None:
        try:
            data, version = await self.node.store.get(zk.state_path(*tp))
        except StoreError:
            return
        try:
            state = PartitionState.from_json(data, version)
        except zk.ZnodeFormatError as exc:
            log.error("%s-%d: ignoring %s: %s", *tp, zk.state_path(*tp), exc)
            return
        self.metadata.record_state(tp, state)


def _context(tp: TopicPartition, **fields: Any) -> dict[str, Any]:
    """A partition's fields for a log record's ``extra=`` (log.format=json)."""
    return {"topic": tp[0], "partition": tp[1], **fields}


def _done(code: int) -> asyncio.Future[int]:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    fut.set_result(code)
    return fut


async def _first(delayed: DelayedProduce) -> int:
    return (await delayed)[0]
