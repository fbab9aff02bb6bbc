"""The controller: one broker at a time decides leaders and ISRs for the whole cluster.

Kafka's ZooKeeper-era ``KafkaController``: every broker tries to create the ephemeral
``/controller`` znode; the one that succeeds bumps ``/controller_epoch`` and acts until
its session ends or the znode changes hands. Every partition state it writes is one
ZooKeeper transaction that also checks ``/controller_epoch``'s version, so a controller
that lost its place (a zombie after a pause) cannot overwrite its successor's decisions.

It acts on events, one at a time (Kafka's ControllerEventManager): becoming controller,
brokers coming and going (or bouncing: registered again with a new broker epoch),
partitions without a state yet (new topics and partitions), topic deletions, brokers
asking to shed leadership before they stop (controlled shutdown), the periodic
preferred-leader check (``auto.leader.rebalance.enable``), and what admin clients ask
of the controller: leader elections (ElectLeaders, KIP-460) and partition
reassignments (KIP-455; a reassignment in progress is recorded in the topic's znode,
so a new controller carries on with it). What each event changes is
decided by ``odradek.cluster.elections`` on the cached view, then re-decided on the
state read fresh from ZooKeeper and written with a version check, because leaders
change their own ISRs concurrently (Kafka's controller re-reads states before
electing for the same reason).

Departure from Kafka: the controller sends no LeaderAndIsr/UpdateMetadata/StopReplica
requests; brokers watch the state znodes it writes (server/cluster/metadata.py).

A znode it reads that does not parse (``ZnodeFormatError``) is logged as one ERROR line
naming its path, and that partition (or reassignment) is left alone; the event goes on
with the others, so one corrupt state cannot keep the rest of the cluster leaderless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.cluster import elections, reassignment
from odradek.cluster import state as zk
from odradek.cluster.reassignment import ReassignmentError
from odradek.cluster.state import PartitionState, TopicAssignment, TopicPartition
from odradek.server.cluster.store import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    Op,
    StoreError,
    StoreUnavailableError,
    Watch,
)
from odradek.server.cluster.topic_znodes import TopicZnodes

if TYPE_CHECKING:
    from odradek.server.cluster.node import ClusterNode

log = logging.getLogger(__name__)
T = TypeVar("T")

# Attempts at one partition's write when a leader's ISR change keeps beating it.
WRITE_ATTEMPTS = 5
# Pause before an event that failed on a store error (ZooKeeper unreachable) is retried.
RETRY_BACKOFF_S = 0.5
# How long a broker that won the election but found /controller_epoch unreadable waits
# before it gives /controller up (Kafka's triggerControllerMove): every broker retries
# the election then, so a corrupt epoch costs one ERROR line per this interval, not a
# busy loop of elections, until an operator fixes the znode.
CORRUPT_EPOCH_BACKOFF_S = 10.0
# How long a stopping controller waits for its tasks to end.
STOP_TIMEOUT_S = 5.0
# ElectLeaders election types (KIP-460).
PREFERRED, UNCLEAN = 0, 1
# What one partition's admin request came to: (Kafka error name, or None; message).
Outcome = tuple[str | None, str | None]


class NotController(Exception):
    """This broker is no longer the controller (its epoch check failed)."""


class Controller:
    """The controller role of one broker: idle until elected, then the cluster's
    decision maker until it resigns."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.store = node.store
        self.me = node.node_id
        self.active = False
        self.epoch = -1
        self._epoch_version = -1
        self._events: asyncio.Queue[tuple[str, Callable[[], Awaitable[None]]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._watches: list[Watch] = []
        self._election: asyncio.Task[None] | None = None
        self._rebalance: asyncio.Task[None] | None = None
        self._known: dict[int, int] = {}  # broker id -> broker epoch, as last handled
        self._shutting_down: set[int] = set()
        # Topics with a deletion marker, as last read: no partition of theirs is given a
        # state, and no reassignment is started for them.
        self._deleting: set[str] = set()
        self.topics = TopicZnodes(self.store, self._write)
        self._pending_shutdowns: list[str] = []
        self._controller_watch: Watch | None = None
        self._calls: set[asyncio.Future[Any]] = set()  # admin requests being handled
        self.stopped = False

    # --- election ------------------------------------------------------------------------

    def start(self) -> None:
        """Take part in controller elections from now on (after registration)."""
        self._controller_watch = self.store.watch_data(zk.CONTROLLER_PATH, self._on_controller)

    def _on_controller(self, data: bytes | None, _version: int) -> None:
        if self.stopped:
            return
        holder = -1
        with contextlib.suppress(zk.ZnodeFormatError):  # the metadata cache logs it
            holder = zk.controller_from_json(data)
        if self.active and holder != self.me:
            self._resign(f"the /controller znode now names broker {holder}")
        if data is None and (self._election is None or self._election.done()):
            self._election = asyncio.get_running_loop().create_task(self._elect())

    async def _elect(self) -> None:
        try:
            await self.store.create(zk.CONTROLLER_PATH,
                                    zk.controller_to_json(self.me, _now_ms()), ephemeral=True)
        except NodeExistsError:
            return  # another broker won; the watch tells us when it goes
        except StoreError as exc:
            log.info("controller election: %s", exc)
            return
        try:
            await self._bump_epoch()
        except (StoreError, zk.ZnodeFormatError) as exc:
            if isinstance(exc, zk.ZnodeFormatError):
                log.error("won the controller election but cannot read %s: %s; giving the "
                          "election up in %.0f s", zk.CONTROLLER_EPOCH_PATH, exc,
                          CORRUPT_EPOCH_BACKOFF_S)
                await asyncio.sleep(CORRUPT_EPOCH_BACKOFF_S)
            else:
                log.warning("won the controller election but could not bump the epoch: %s",
                            exc)
            with contextlib.suppress(StoreError):
                await self.store.delete(zk.CONTROLLER_PATH)
            return
        log.info("broker %d is the controller (controller epoch %d)", self.me, self.epoch)
        self.active = True
        self._known = {}
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")
        self._watches = [
            self.store.watch_children(zk.DELETE_TOPICS_PATH, self._on_deletes),
            self.store.watch_children(zk.CONTROLLED_SHUTDOWN_PATH, self._on_shutdowns),
        ]
        self.enqueue("startup", self._on_startup)
        if self.node.config["auto.leader.rebalance.enable"]:
            self._rebalance = asyncio.get_running_loop().create_task(self._rebalance_loop())

    async def _bump_epoch(self) -> None:
        while True:
            try:
                data, version = await self.store.get(zk.CONTROLLER_EPOCH_PATH)
            except NoNodeError:
                try:
                    await self.store.create(zk.CONTROLLER_EPOCH_PATH,
                                            zk.controller_epoch_to_json(1))
                    self.epoch, self._epoch_version = 1, 0
                    return
                except NodeExistsError:
                    continue
            epoch = zk.controller_epoch_from_json(data) + 1
            try:
                new_version = await self.store.set(zk.CONTROLLER_EPOCH_PATH,
                                                   zk.controller_epoch_to_json(epoch), version)
            except BadVersionError:
                continue
            self.epoch, self._epoch_version = epoch, new_version
            return

    def _resign(self, why: str) -> None:
        if not self.active:
            return
        log.info("broker %d resigns as controller: %s", self.me, why)
        self.active = False
        for watch in self._watches:
            watch.cancel()
        self._watches = []
        if self._task is not None:
            self._task.cancel()
        if self._rebalance is not None:
            self._rebalance.cancel()
        for fut in list(self._calls):
            if not fut.done():
                fut.set_exception(NotController())

    async def stop(self) -> None:
        self.stopped = True
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        self._resign("the broker is stopping")
        tasks = [t for t in (self._task, self._election, self._rebalance) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded for the same reason as _run's loop: a swallowed cancellation must
            # not hold the broker's stop up.
            _, late = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
            if late:
                log.warning("controller: %d task(s) did not stop in %.0f s", len(late),
                            STOP_TIMEOUT_S)

    def session_lost(self) -> None:
        """Our ZooKeeper session expired: /controller went with it."""
        self._resign("its ZooKeeper session expired")

    # --- events ----------------------------------------------------------------------------

    def enqueue(self, name: str, handler: Callable[[], Awaitable[None]]) -> None:
        if self.active:
            self._events.put_nowait((name, handler))

    async def _run(self) -> None:
        # ``while self.active``, not ``while True``: on Python 3.11 asyncio.wait_for
        # (inside the store's requests) can swallow the cancellation _resign sends when
        # the answer arrives in the same loop step, and a loop waiting for the next event
        # after that would wait forever (enqueue drops events once inactive).
        while self.active:
            name, handler = await self._events.get()
            while self.active:
                try:
                    await handler()
                    break
                except NotController:
                    self._resign("another controller has a newer epoch")
                    return
                except StoreUnavailableError as exc:
                    log.info("controller: %s failed on the store (%s); retrying", name, exc)
                    await asyncio.sleep(RETRY_BACKOFF_S)
                except Exception:
                    log.exception("controller: handling %s failed", name)
                    break

    async def call(self, name: str, handler: Callable[[], Awaitable[T]]) -> T:
        """Run ``handler`` as one of the controller's events and return its result (an
        admin request the controller answers). NotController if this broker is not
        (or stops being) the controller before it ran."""
        if not self.active:
            raise NotController()
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._calls.add(fut)
        fut.add_done_callback(self._calls.discard)

        async def run() -> None:
            if fut.done():
                return
            try:
                result = await handler()
            except (NotController, StoreUnavailableError, asyncio.CancelledError):
                raise  # the event loop resigns or retries; the caller learns of it
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(exc)
                raise
            if not fut.done():
                fut.set_result(result)

        self.enqueue(name, run)
        return await fut

    def brokers_changed(self) -> None:
        self.enqueue("broker change", self._on_brokers)

    def partitions_changed(self, partitions: list[TopicPartition]) -> None:
        metadata = self.node.metadata
        new = [tp for tp in partitions if tp not in metadata.states
               and metadata.partition_exists(*tp) and tp[0] not in self._deleting]
        if new:
            self.enqueue("new partitions", lambda: self._initialize(new))
        # A reassigned partition whose target replicas are all in the ISR now (the
        # leader has just added the last one) can finish.
        done = [tp for tp in partitions if self._reassignment_complete(tp)]
        if done:
            self.enqueue("reassignment", lambda: self._finish_reassignments(done))

    def topic_removed(self, topic: str, partitions: int) -> None:
        """Nothing to decide: the deletion was this controller's own doing (or an
        earlier one's), and brokers drop their replicas themselves."""

    def topic_unusable(self, topic: str) -> None:
        """The topic's znode is there but empty or not parseable: remove it if nothing
        of a topic is below it (``TopicZnodes.remove_if_abandoned``)."""
        self.enqueue("abandoned topic", lambda: self._remove_abandoned([topic]))

    def configs_changed(self, topic: str) -> None:
        """unclean.leader.election.enable turned on elects leaders for the topic's
        offline partitions at once, as Kafka's controller does on that config change."""
        metadata = self.node.metadata
        if not self.node.unclean_election(topic):
            return
        offline = [tp for tp, st in metadata.states.items() if tp[0] == topic and st.leader < 0]
        if offline:
            self.enqueue("unclean election", lambda: self._reelect(offline, bounced=()))

    def broker_configs_changed(self) -> None:
        """Nothing for the controller: dynamic configs act on each broker's replicas."""

    def _on_deletes(self, children: list[str]) -> None:
        self._deleting = set(children)
        if children:
            self.enqueue("topic deletion", self._delete_topics)

    def _on_shutdowns(self, children: list[str]) -> None:
        self._pending_shutdowns = children
        self.enqueue("controlled shutdown", self._controlled_shutdown)

    # --- what the events do ---------------------------------------------------------------

    async def _on_startup(self) -> None:
        metadata = self.node.metadata
        self._known = {b: info.epoch for b, info in metadata.brokers.items()}
        # Deletions a previous controller left unfinished come first: a partition of a
        # topic being deleted gets no state (its predecessor may have removed some).
        await self._delete_topics()
        missing = [(t, p) for t, a in metadata.assignments.items() for p in range(a.partitions)
                   if (t, p) not in metadata.states]
        if missing:
            await self._initialize(missing)
        await self._reelect(list(metadata.states), bounced=())
        self._pending_shutdowns = await self._children(zk.CONTROLLED_SHUTDOWN_PATH)
        await self._controlled_shutdown()
        # Topic znodes that are no topic (left by interrupted deletions of earlier
        # versions), and configs of no topic: both keep a name from being created again.
        await self._remove_abandoned(
            [t for t in await self._children(zk.TOPICS_PATH) if t not in metadata.assignments])
        for name in await self.topics.remove_orphan_configs():
            log.warning("controller: removed %s: no topic %s exists or is being deleted "
                        "(an AlterConfigs raced its deletion); the name can be created again",
                        zk.config_path(name), name)
        # Reassignments a previous controller began (recorded in the topics' znodes).
        moving = [(t, p) for t, a in metadata.assignments.items() for p in range(a.partitions)
                  if a.reassigning(p)]
        if moving:
            log.info("controller: resuming %d partition reassignment(s)", len(moving))
            await self._finish_reassignments(
                [tp for tp in moving if self._reassignment_complete(tp)])

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.get_children(path)
        except NoNodeError:
            return []

    async def _on_brokers(self) -> None:
        metadata = self.node.metadata
        live = {b: info.epoch for b, info in metadata.brokers.items()}
        gone = [b for b in self._known if b not in live]
        bounced = [b for b, e in live.items() if b in self._known and self._known[b] != e]
        came = [b for b in live if b not in self._known]
        if gone or bounced or came:
            log.info("controller: brokers gone %s, bounced %s, new %s (live: %s)",
                     sorted(gone), sorted(bounced), sorted(came), sorted(live))
        self._known = live
        self._shutting_down &= set(live)
        touched = set(gone) | set(bounced) | set(came)
        if not touched:
            return
        tps = [tp for tp, st in metadata.states.items()
               if touched & set(metadata.replicas(*tp)) or st.leader < 0
               or st.leader in touched]
        await self._reelect(tps, bounced=bounced)
        # Partitions created while no replica was alive start offline: try again.
        missing = [(t, p) for t, a in metadata.assignments.items() for p in range(a.partitions)
                   if (t, p) not in metadata.states]
        if missing:
            await self._initialize(missing)

    async def _reelect(self, tps: list[TopicPartition], *, bounced: list[int] | tuple[()]
                       ) -> None:
        """Re-decide these partitions for the live brokers, excluding those shutting
        down; write what changes."""
        metadata = self.node.metadata
        live = {b: info.epoch for b, info in metadata.brokers.items()}

        def decide(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
            return elections.after_broker_change(
                state, metadata.replicas(*tp), live, live, self.epoch,
                self.node.unclean_election(tp[0]), excluded=self._shutting_down,
                bounced=bounced)

        for tp in tps:
            cached = metadata.states.get(tp)
            if cached is None or decide(tp, cached) is None:
                continue
            await self._update(tp, decide)

    async def _update(self, tp: TopicPartition,
                      decide: Callable[[TopicPartition, PartitionState], PartitionState | None]
                      ) -> None:
        """Read the state fresh, decide, write it conditionally; again on a conflict."""
        path = zk.state_path(*tp)
        for _ in range(WRITE_ATTEMPTS):
            try:
                data, version = await self.store.get(path)
            except NoNodeError:
                return  # the topic was deleted meanwhile
            try:
                state = PartitionState.from_json(data, version)
            except zk.ZnodeFormatError as exc:
                log.error("controller: leaving %s-%d alone: %s: %s", tp[0], tp[1], path, exc)
                return
            new = decide(tp, state)
            if new is None:
                return
            try:
                await self._write(
                    [Op.set(path, new.to_json(), version)])
            except BadVersionError:
                continue  # the leader changed its ISR meanwhile: decide again
            log.info("controller: %s-%d leader %d -> %d, epoch %d, ISR %s", tp[0], tp[1],
                     state.leader, new.leader, new.leader_epoch, list(new.isr))
            return
        log.warning("controller: gave up updating %s-%d after %d conflicting writes",
                    tp[0], tp[1], WRITE_ATTEMPTS)

    async def _write(self, ops: list[Op]) -> None:
        """Apply ``ops`` atomically if this broker is still the controller (the check of
        /controller_epoch's version fences a deposed controller)."""
        try:
            await self.store.multi([Op.check(zk.CONTROLLER_EPOCH_PATH, self._epoch_version),
                                    *ops])
        except BadVersionError:
            try:
                _, version = await self.store.get(zk.CONTROLLER_EPOCH_PATH)
            except NoNodeError:
                version = -2
            if version != self._epoch_version:
                raise NotController() from None
            raise

    async def _initialize(self, tps: list[TopicPartition]) -> None:
        """New partitions get their first state: the first live replica leads. Written
        under the topic's znode as read (``TopicZnodes.create_states``), never for a
        topic being deleted: a state queued before a deletion must not bring the
        topic's znodes back after it."""
        metadata = self.node.metadata
        live = {b: info.epoch for b, info in metadata.brokers.items()}
        by_topic: dict[str, list[int]] = {}
        for topic, p in tps:
            if (topic, p) not in metadata.states and topic not in self._deleting:
                by_topic.setdefault(topic, []).append(p)
        for topic, partitions in by_topic.items():
            written = await self.topics.create_states(
                topic, partitions,
                lambda replicas: elections.initial_state(replicas, live, self.epoch, live))
            for p, state in written.items():
                log.info("controller: %s-%d starts with leader %d, ISR %s", topic, p,
                         state.leader, list(state.isr))

    async def _delete_topics(self) -> None:
        """Carry out every deletion asked (the markers as they are now, not as a watch
        last delivered them: a deletion asked while this ran is not missed)."""
        self._deleting = set(await self._children(zk.DELETE_TOPICS_PATH))
        unfinished = False
        for topic in sorted(self._deleting):
            if await self.topics.delete_topic(topic):
                log.info("controller: deleted topic %s", topic)
            else:
                unfinished = True
        if unfinished:  # its znodes kept changing: once more, a little later
            asyncio.get_running_loop().call_later(
                RETRY_BACKOFF_S, self.enqueue, "topic deletion", self._delete_topics)

    async def _remove_abandoned(self, topics: list[str]) -> None:
        for topic in topics:
            if topic in self._deleting:
                continue  # the deletion removes it
            why = await self.topics.remove_if_abandoned(topic)
            if why is not None:
                log.warning("controller: removed %s: %s, so it is no topic (a deletion "
                            "that did not finish); the name can be created again",
                            zk.topic_path(topic), why)

    async def _controlled_shutdown(self) -> None:
        metadata = self.node.metadata
        wanted = {b for b in map(zk.broker_id, self._pending_shutdowns) if b is not None}
        leaving = {b for b in wanted if b in metadata.brokers} - self._shutting_down
        self._shutting_down = (self._shutting_down & wanted) | leaving
        if not leaving:
            return
        log.info("controller: moving leadership off broker(s) %s before they stop",
                 sorted(leaving))
        tps = [tp for tp in metadata.states if leaving & set(metadata.replicas(*tp))]
        await self._reelect(tps, bounced=())

    async def _rebalance_loop(self) -> None:
        interval = self.node.config["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval)
            self.enqueue("preferred leader election", self._preferred_leaders)

    def _usable(self) -> dict[int, int]:
        """Brokers that may be elected now, with their registrations: live, not shutting
        down, and registered as this controller last handled them. A broker that
        restarted stays in the ISRs until its broker-change event (maybe queued behind
        the event asking) takes it out, and its log may be behind: electing it would
        truncate acknowledged records."""
        return {b: info.epoch for b, info in self.node.metadata.brokers.items()
                if b not in self._shutting_down and self._known.get(b) == info.epoch}

    async def _preferred_leaders(self) -> None:
        metadata = self.node.metadata
        live = self._usable()
        replicas = {tp: metadata.replicas(*tp) for tp in metadata.states}
        ratio = self.node.config["leader.imbalance.per.broker.percentage"]
        for broker, tps in elections.imbalanced_brokers(metadata.states, replicas,
                                                        ratio).items():
            if broker not in live:
                continue
            for tp in tps:
                await self._update(tp, lambda tp, st: elections.preferred_leader(
                    st, metadata.replicas(*tp), live, live, self.epoch))

    # --- admin requests (each runs as one controller event, through call) ------------------

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None
                            ) -> dict[TopicPartition, Outcome]:
        """ElectLeaders (KIP-460): for each partition, elect its preferred replica (PREFERRED)
        or any live replica where no leader is alive (UNCLEAN), and say what came of it.
        With ``partitions`` None, every partition is considered and only those where an
        election ran are reported (Kafka's behaviour)."""
        return await self.call("leader election", lambda: self._elect_leaders(
            election_type, partitions))

    async def _elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None
                             ) -> dict[TopicPartition, Outcome]:
        metadata = self.node.metadata
        usable = self._usable()
        everything = partitions is None
        tps = list(metadata.states) if partitions is None else partitions
        out: dict[TopicPartition, Outcome] = {}
        for tp in tps:
            if not metadata.partition_exists(*tp) or tp not in metadata.states:
                out[tp] = ("UNKNOWN_TOPIC_OR_PARTITION", f"{tp[0]}-{tp[1]} does not exist")
                continue
            replicas = metadata.replicas(*tp)
            # The last state decide() saw and what it decided (the write follows a
            # non-None decision; _update decides again after a conflicting write).
            seen: list[tuple[PartitionState, PartitionState | None]] = []

            def decide(tp: TopicPartition, st: PartitionState,
                       replicas: tuple[int, ...] = replicas,
                       seen: list[tuple[PartitionState, PartitionState | None]] = seen
                       ) -> PartitionState | None:
                if election_type == PREFERRED:
                    new = elections.preferred_leader(st, replicas, usable, usable, self.epoch)
                elif st.leader in usable:
                    new = None
                else:
                    new = elections.unclean_leader(st, replicas, usable, usable, self.epoch)
                seen.append((st, new))
                return new

            await self._update(tp, decide)
            state, elected = seen[-1] if seen else (metadata.states[tp], None)
            if elected is not None:
                out[tp] = (None, None)
            elif election_type == PREFERRED and replicas and state.leader == replicas[0]:
                out[tp] = ("ELECTION_NOT_NEEDED", "the preferred replica leads already")
            elif election_type == UNCLEAN and state.leader in usable:
                out[tp] = ("ELECTION_NOT_NEEDED", f"broker {state.leader} leads and is alive")
            elif election_type == PREFERRED:
                out[tp] = ("PREFERRED_LEADER_NOT_AVAILABLE",
                           f"the preferred replica {replicas[0] if replicas else '?'} is not "
                           f"alive or not in the ISR {list(state.isr)}")
            else:
                out[tp] = ("ELIGIBLE_LEADERS_NOT_AVAILABLE", "no replica of it is alive")
        if everything:
            out = {tp: o for tp, o in out.items() if o[0] is None}
        return out

    async def alter_reassignments(self,
                                  wanted: dict[TopicPartition, tuple[int, ...] | None]
                                  ) -> dict[TopicPartition, Outcome]:
        """AlterPartitionReassignments (KIP-455): start moving each partition to its target
        replicas, or (None) cancel its reassignment in progress."""
        return await self.call("reassignment request", lambda: self._reassign(wanted))

    async def _reassign(self, wanted: dict[TopicPartition, tuple[int, ...] | None]
                        ) -> dict[TopicPartition, Outcome]:
        metadata = self.node.metadata
        out: dict[TopicPartition, Outcome] = {}
        by_topic: dict[str, dict[int, tuple[int, ...] | None]] = {}
        for (topic, p), target in wanted.items():
            try:
                if not metadata.partition_exists(topic, p):
                    raise ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION",
                                            f"{topic}-{p} does not exist")
                if target is None:
                    if not metadata.assignments[topic].reassigning(p):
                        raise ReassignmentError("NO_REASSIGNMENT_IN_PROGRESS",
                                                f"{topic}-{p} is not being reassigned")
                else:
                    reassignment.check_target(target, metadata.brokers)
                if topic in self._deleting:
                    raise ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION",
                                            f"topic {topic} is being deleted")
            except ReassignmentError as exc:
                out[(topic, p)] = (exc.kafka_error, str(exc))
                continue
            by_topic.setdefault(topic, {})[p] = target
        for topic, targets in by_topic.items():
            try:
                await self._start_reassignments(topic, targets)
            except ReassignmentError as exc:
                for p in targets:
                    out[(topic, p)] = (exc.kafka_error, str(exc))
                continue
            for p in targets:
                out[(topic, p)] = (None, None)
        started = [(t, p) for t, ps in by_topic.items() for p in ps
                   if out.get((t, p)) == (None, None)]
        # A target already in the ISR (a cancellation, a reordering) finishes at once.
        await self._finish_reassignments(started)
        return out

    async def _start_reassignments(self, topic: str,
                                   targets: dict[int, tuple[int, ...] | None]) -> None:
        """One topic's partitions to their RS: the topic znode and each partition's state
        (a new epoch) in one transaction, conditional on what was read."""
        store = self.store
        for _ in range(WRITE_ATTEMPTS):
            try:
                data, topic_version = await store.get(zk.topic_path(topic))
            except NoNodeError:
                raise ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION",
                                        f"topic {topic} does not exist") from None
            try:
                assignment = TopicAssignment.from_json(topic, data)
            except zk.ZnodeFormatError as exc:
                log.error("controller: cannot reassign %s: %s: %s", topic,
                          zk.topic_path(topic), exc)
                raise ReassignmentError("UNKNOWN_SERVER_ERROR",
                                        f"{zk.topic_path(topic)} is corrupt: {exc}") from None
            ops = []
            for p, target in targets.items():
                if p >= assignment.partitions:
                    raise ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION",
                                            f"{topic}-{p} does not exist")
                full, adding, removing = reassignment.plan(
                    assignment, p, assignment.origin(p) if target is None else target)
                assignment = assignment.with_partition(p, full, adding, removing)
                try:
                    raw, version = await store.get(zk.state_path(topic, p))
                except NoNodeError:
                    continue  # no state yet: the new assignment is all it needs
                try:
                    state = PartitionState.from_json(raw, version)
                except zk.ZnodeFormatError as exc:
                    raise ReassignmentError(
                        "UNKNOWN_SERVER_ERROR",
                        f"{zk.state_path(topic, p)} is corrupt: {exc}") from None
                ops.append(Op.set(zk.state_path(topic, p),
                                  reassignment.started(state, self.epoch).to_json(), version))
            try:
                await self._write([Op.set(zk.topic_path(topic), assignment.to_json(),
                                                topic_version), *ops])
            except BadVersionError:
                continue  # a leader changed an ISR meanwhile: read again
            self.node.metadata.record_topic(topic, assignment.to_json())
            for p in targets:
                log.info("controller: reassigning %s-%d: replicas %s (adding %s, removing %s)",
                         topic, p, list(assignment.replicas[p]), list(assignment.adding.get(p, ())),
                         list(assignment.removing.get(p, ())))
            return
        raise ReassignmentError("REQUEST_TIMED_OUT",
                                f"topic {topic}'s partitions kept changing; try again")

    def _reassignment_complete(self, tp: TopicPartition) -> bool:
        metadata = self.node.metadata
        assignment = metadata.assignments.get(tp[0])
        state = metadata.states.get(tp)
        return (assignment is not None and tp[1] < assignment.partitions
                and assignment.reassigning(tp[1]) and state is not None
                and reassignment.is_complete(state, assignment.target(tp[1])))

    async def _finish_reassignments(self, tps: list[TopicPartition]) -> None:
        """Finish the reassignments of ``tps`` whose target is all in the ISR: the state (a
        leader from the target, the ISR without the removed replicas) and the topic znode
        (the target alone) in one transaction. The removed replicas see they are no longer
        assigned and delete their logs."""
        store = self.store
        for tp in tps:
            for _ in range(WRITE_ATTEMPTS):
                try:
                    data, topic_version = await store.get(zk.topic_path(tp[0]))
                    raw, state_version = await store.get(zk.state_path(*tp))
                except NoNodeError:
                    break  # deleted meanwhile
                try:
                    assignment = TopicAssignment.from_json(tp[0], data)
                except zk.ZnodeFormatError as exc:
                    log.error("controller: cannot finish reassigning %s-%d: %s: %s", *tp,
                              zk.topic_path(tp[0]), exc)
                    break
                try:
                    state = PartitionState.from_json(raw, state_version)
                except zk.ZnodeFormatError as exc:
                    log.error("controller: cannot finish reassigning %s-%d: %s: %s", *tp,
                              zk.state_path(*tp), exc)
                    break
                if tp[1] >= assignment.partitions or not assignment.reassigning(tp[1]):
                    break
                target = assignment.target(tp[1])
                if not reassignment.is_complete(state, target):
                    break  # not yet: an ISR change will bring it back here
                usable = self._usable()
                new = reassignment.completed(state, target, usable, usable, self.epoch)
                if new is None:
                    log.info("controller: %s-%d: no target replica can lead yet", *tp)
                    break
                done = assignment.with_partition(tp[1], target).to_json()
                try:
                    await self._write([
                        Op.set(zk.state_path(*tp), new.to_json(), state_version),
                        Op.set(zk.topic_path(tp[0]), done, topic_version)])
                except BadVersionError:
                    continue
                self.node.metadata.record_topic(tp[0], done)
                log.info("controller: reassignment of %s-%d done: replicas %s, leader %d, "
                         "ISR %s", *tp, list(target), new.leader, list(new.isr))
                break

    def list_reassignments(self, partitions: list[TopicPartition] | None
                           ) -> dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...],
                                                           tuple[int, ...]]]:
        """ListPartitionReassignments: (replicas, adding, removing) of each partition being
        reassigned, among ``partitions`` (None: all)."""
        metadata = self.node.metadata
        out = {}
        for topic, assignment in metadata.assignments.items():
            for p in range(assignment.partitions):
                if partitions is not None and (topic, p) not in partitions:
                    continue
                if assignment.reassigning(p):
                    out[(topic, p)] = (assignment.replicas[p], assignment.adding.get(p, ()),
                                       assignment.removing.get(p, ()))
        return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
