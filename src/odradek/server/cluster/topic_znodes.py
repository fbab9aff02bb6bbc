"""What the controller writes to bring a topic's partitions to life and to delete a topic,
each write conditional, so that no write re-creates a topic a deletion has removed.

A topic is ``/brokers/topics/T`` (its assignment, written by the broker that took the
CreateTopics, together with ``/config/topics/T``), then ``partitions/P/state`` below it,
written by the controller. Kafka's ZooKeeper-era controller writes those states with
plain creates under its epoch check (``KafkaZkClient.createTopicPartitionStatesRaw``)
and deletes a topic's znodes under the same check. The rules here, and why:

- **A state is created only under the topic's znode as read** (a transaction that
  checks the topic znode's version and creates ``partitions``, ``partitions/P`` and the
  state without ever creating a parent implicitly). Creating parents implicitly
  (``ensure_path``) is how a state write queued before a deletion re-created
  ``/brokers/topics/T`` as an empty znode after it: the name then answered
  TOPIC_ALREADY_EXISTS forever (issue 29).
- **A deletion ends in one transaction**: the partitions' znodes go first (in
  transactions of at most ``MAX_OPS``), then the topic's znode, its config and the
  deletion marker together. Until that last transaction the marker stays, so a
  controller that dies mid-way leaves its successor the whole deletion to finish;
  after it, nothing of the topic is left for a later write to find.
- **An abandoned topic znode is removed**: one that is empty (no broker writes a topic
  with no data: it was a parent created implicitly, by the bug above or a hand with
  zkCli) or that does not parse and has no partition state below it. Such a znode is
  no topic to any broker and only blocks its name. A znode that does not parse but has
  states is left alone (docs/operations.md: a corrupt topic keeps its last good
  assignment), and so is its config.

Every write goes through the controller's ``write`` (its epoch check), so a deposed
controller cannot delete or create anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from odradek.cluster import state as zk
from odradek.cluster.state import PartitionState, TopicAssignment
from odradek.server.cluster.store import (
    BadVersionError,
    CoordinationStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    child_path,
)

log = logging.getLogger(__name__)

# Operations in one ZooKeeper transaction at most: a delete is ~60-100 bytes of request
# and a state create ~200, and ZooKeeper refuses a request over jute.maxbuffer (1 MiB by
# default); 1,000 stays well inside it for a topic of any partition count.
MAX_OPS = 1000
# Attempts at a topic's writes when something changes under them (a partition added, a
# znode created or removed meanwhile) before the event gives up, to be retried later.
WRITE_ATTEMPTS = 5

Write = Callable[[list[Op]], Awaitable[None]]
# A new partition's first state, from its replicas.
FirstState = Callable[[tuple[int, ...]], PartitionState]


class TopicZnodes:
    """The controller's writes of topics' znodes. ``write`` applies a transaction under
    the controller's epoch check."""

    def __init__(self, store: CoordinationStore, write: Write) -> None:
        self.store = store
        self.write = write

    # --- partition states -----------------------------------------------------------

    async def create_states(self, topic: str, partitions: Sequence[int],
                            first_state: FirstState) -> dict[int, PartitionState]:
        """Give the partitions of ``topic`` among ``partitions`` that have no state yet
        their first one, under the topic's znode as read now (replicas from there, not
        from a cache). Returns what was written; nothing if the topic is gone (or its
        znode does not parse: the metadata cache has logged that)."""
        written: dict[int, PartitionState] = {}
        for _ in range(WRITE_ATTEMPTS):
            try:
                data, version = await self.store.get(zk.topic_path(topic))
                assignment = TopicAssignment.from_json(topic, data)
            except (NoNodeError, zk.ZnodeFormatError):
                return written
            wanted = sorted({p for p in partitions if 0 <= p < assignment.partitions}
                            - set(written))
            try:
                existing = set(await self.store.get_children(zk.partitions_path(topic)))
                have_parent = True
            except NoNodeError:
                existing, have_parent = set(), False
            topic_check = Op.check(zk.topic_path(topic), version)
            try:
                # Partitions with no znode yet, many per transaction (a new topic's).
                fresh = [p for p in wanted if str(p) not in existing]
                for start in range(0, len(fresh), MAX_OPS // 2):
                    ops = [topic_check]
                    if not have_parent:
                        ops.append(Op.create(zk.partitions_path(topic)))
                    states = {p: first_state(assignment.replicas[p])
                              for p in fresh[start:start + MAX_OPS // 2]}
                    for p, st in states.items():
                        ops += [Op.create(zk.partition_path(topic, p)),
                                Op.create(zk.state_path(topic, p), st.to_json())]
                    await self.write(ops)
                    have_parent = True
                    written.update(states)
                # Partitions whose znode exists: most have their state already.
                for p in wanted:
                    if str(p) not in existing:
                        continue
                    st = first_state(assignment.replicas[p])
                    try:
                        await self.write([topic_check,
                                          Op.create(zk.state_path(topic, p), st.to_json())])
                    except NodeExistsError:
                        continue
                    written[p] = st
                return written
            except (BadVersionError, NoNodeError, NodeExistsError):
                continue  # the topic changed (partitions added, deleted): read again
        log.warning("controller: gave up creating states of %s after %d conflicting "
                    "writes", topic, WRITE_ATTEMPTS)
        return written

    # --- deletion --------------------------------------------------------------------

    async def delete_topic(self, topic: str) -> bool:
        """Finish the deletion of ``topic`` asked by its marker: every znode of the
        topic, its config and the marker. False if the marker is gone (another
        controller finished it) or the znodes kept changing (the event tries again)."""
        marker = zk.delete_marker_path(topic)
        for _ in range(WRITE_ATTEMPTS):
            if await self.store.exists(marker) is None:
                return False
            below = await self._subtree(zk.topic_path(topic))
            last = [Op.delete(marker)]
            if await self.store.exists(zk.config_path(topic)) is not None:
                last.insert(0, Op.delete(zk.config_path(topic)))
            if below:
                last.insert(0, Op.delete(below.pop()))  # the topic's znode itself
            try:
                await self._delete_all(below, last)
            except (NoNodeError, NotEmptyError):
                continue  # something appeared or went meanwhile: walk again
            return True
        log.warning("controller: the deletion of topic %s kept meeting changes; it is "
                    "retried at the next deletion event", topic)
        return False

    async def remove_if_abandoned(self, topic: str) -> str | None:
        """Remove ``/brokers/topics/<topic>`` (with everything below and its config) if
        it is abandoned: empty, or not parseable with no partition state below it. Says
        why it was removed, or None (a topic, gone, or corrupt with states)."""
        for _ in range(WRITE_ATTEMPTS):
            try:
                data, version = await self.store.get(zk.topic_path(topic))
            except NoNodeError:
                return None
            below = await self._subtree(zk.topic_path(topic))
            if not data:
                why = "it is empty"
            else:
                try:
                    TopicAssignment.from_json(topic, data)
                    return None
                except zk.ZnodeFormatError as exc:
                    why = f"it does not parse ({exc})"
                if any(path.endswith("/state") for path in below):
                    return None
                why += " and no partition state is below it"
            if not below:
                continue  # deleted between the two reads: look again
            below.pop()  # the topic's own znode: deleted last, at the version read
            last = [Op.delete(zk.topic_path(topic), version)]
            if await self.store.exists(zk.config_path(topic)) is not None:
                last.append(Op.delete(zk.config_path(topic)))
            try:
                await self._delete_all(below, last)
            except (NoNodeError, NotEmptyError, BadVersionError):
                continue
            return why
        return None

    async def remove_orphan_configs(self) -> list[str]:
        """Remove each ``/config/topics/<name>`` with no topic of that name and no
        deletion asked for it: left by an AlterConfigs that raced a deletion before such
        writes were made conditional, it made CreateTopics of the name answer
        TOPIC_ALREADY_EXISTS. Returns the names."""
        configs = await self._children(zk.CONFIG_TOPICS_PATH)
        topics = set(await self._children(zk.TOPICS_PATH))
        marked = set(await self._children(zk.DELETE_TOPICS_PATH))
        removed = []
        for name in configs:
            if name in topics or name in marked:
                continue
            # ZooKeeper has no "absent" check: creating the topic's znode and deleting
            # it in the same transaction is one, so a topic created meanwhile (its
            # config with it) keeps its config.
            try:
                await self.write([Op.create(zk.topic_path(name)),
                                  Op.delete(zk.topic_path(name)),
                                  Op.delete(zk.config_path(name))])
            except (NodeExistsError, NoNodeError):
                continue
            removed.append(name)
        return removed

    # --- helpers ---------------------------------------------------------------------

    async def _delete_all(self, paths: list[str], last: list[Op]) -> None:
        """Delete ``paths`` (each after its descendants) in transactions of at most
        ``MAX_OPS``, then ``last`` in one transaction of its own with the remainder."""
        ops = [Op.delete(path) for path in paths]
        while len(ops) > MAX_OPS:
            await self.write(ops[:MAX_OPS])
            ops = ops[MAX_OPS:]
        await self.write(ops + last)

    async def _subtree(self, path: str) -> list[str]:
        """``path`` and every znode below it, each after its descendants ([] if there
        is no ``path``). Siblings are read concurrently: a topic of thousands of
        partitions is walked in a few round trips' time, not thousands."""
        try:
            children = await self.store.get_children(path)
        except NoNodeError:
            return []
        below = await asyncio.gather(*(self._subtree(child_path(path, name))
                                       for name in children))
        return [p for sub in below for p in sub] + [path]

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.get_children(path)
        except NoNodeError:
            return []
