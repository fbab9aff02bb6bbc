"""A streams group's topology (KIP-1071) and what it takes to run it: the tasks of each
subtopology and the internal topics to create, decided from the broker's topics as
Kafka 4.4's group coordinator decides them (its InternalTopicManager, RepartitionTopics,
CopartitionedTopicsEnforcer and ChangelogTopics).

The application sends its topology with its first heartbeat: subtopologies, each with
its source topics (names or regexes), the repartition topics it reads (with a fixed
partition count or 0) and writes, its state changelog topics, and its copartition
groups (topics whose partitions must line up: a join). From the topics that exist:

1. every source topic must exist (a regex must match one): else MISSING_SOURCE_TOPICS;
2. each repartition topic without a fixed count gets the largest partition count of
   the source topics of the subtopologies writing to it (repartition topics among them
   resolved first);
3. in a copartition group the source topics must have one partition count (else
   INCORRECTLY_PARTITIONED_TOPICS) and its repartition topics without a fixed count
   take it (none: the largest among them);
4. a subtopology has as many tasks as the largest partition count of the topics it
   reads; its changelog topics have one partition per task;
5. the internal topics (repartition and changelog) that do not exist are to be created
   (MISSING_INTERNAL_TOPICS until they are); one with another partition count is
   INCORRECTLY_PARTITIONED_TOPICS.

Only when nothing is missing or wrong is the topology *configured* and its tasks are
assigned. Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

_T = TypeVar("_T")

# StreamsGroupHeartbeatResponse's status codes.
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4


class TopologyError(Exception):
    """The topology cannot be configured (Kafka's STREAMS_INVALID_TOPOLOGY)."""


@dataclass(frozen=True, slots=True)
class InternalTopic:
    name: str
    partitions: int = 0  # 0: derived (step 2-4 of the module docstring)
    replication_factor: int = 0  # 0: the broker's default
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Indexes into the subtopology's source topics, regexes and repartition sources."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    changelog_topics: tuple[InternalTopic, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[InternalTopic, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def topic_names(self) -> set[str]:
        """Every topic named in it (not the regexes' matches)."""
        out: set[str] = set()
        for s in self.subtopologies:
            out.update(s.source_topics)
            out.update(s.repartition_sink_topics)
            out.update(t.name for t in s.repartition_source_topics)
            out.update(t.name for t in s.changelog_topics)
        return out


@dataclass(frozen=True, slots=True)
class Status:
    code: int
    detail: str


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    """The outcome: ``tasks`` (subtopology id -> task count) when the topology can run
    (no ``statuses``); the internal topics to create (name -> the topic with its
    partition count decided); the source topics each subtopology reads, resolved."""

    tasks: dict[str, int] = field(default_factory=dict)
    statuses: tuple[Status, ...] = ()
    to_create: dict[str, InternalTopic] = field(default_factory=dict)
    source_topics: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return not self.statuses


def _matches(regexes: Iterable[str], topics: Iterable[str]) -> list[str]:
    compiled = [re.compile(r) for r in regexes]
    return sorted(t for t in topics if any(c.fullmatch(t) for c in compiled))


def configure(topology: Topology, partitions: Mapping[str, int]) -> ConfiguredTopology:
    """Configure ``topology`` against the existing topics (name -> partition count);
    TopologyError when it cannot be (a repartition topic whose count cannot be derived,
    copartitioned repartition topics fixed at different counts)."""
    internal = {t.name for s in topology.subtopologies
                for t in (*s.repartition_source_topics, *s.changelog_topics)}
    external = [t for t in partitions if t not in internal]
    sources: dict[str, tuple[str, ...]] = {}
    missing: list[str] = []
    for s in topology.subtopologies:
        matched = _matches(s.source_topic_regex, external) if s.source_topic_regex else []
        if s.source_topic_regex and not matched:
            missing.extend(s.source_topic_regex)
        missing.extend(t for t in s.source_topics if t not in partitions)
        sources[s.subtopology_id] = (*s.source_topics, *matched)
    if missing:
        return ConfiguredTopology(statuses=(Status(
            MISSING_SOURCE_TOPICS, f"Source topics {', '.join(sorted(set(missing)))} are "
            "missing."),), source_topics=sources)

    counts: dict[str, int] = {}  # repartition topics' decided partition counts
    for s in topology.subtopologies:
        for t in s.repartition_source_topics:
            if t.partitions > 0:
                counts[t.name] = t.partitions
    _derive_repartition_counts(topology, sources, partitions, counts)
    wrong: list[str] = []
    for s in topology.subtopologies:
        for group in s.copartition_groups:
            wrong.extend(_enforce_copartitioning(s, group, sources[s.subtopology_id],
                                                 partitions, counts))
    if wrong:
        return ConfiguredTopology(statuses=(Status(
            INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same number "
            f"of partitions: [{', '.join(sorted(set(wrong)))}]"),), source_topics=sources)

    tasks: dict[str, int] = {}
    wanted: dict[str, InternalTopic] = {}
    for s in topology.subtopologies:
        read = [partitions[t] for t in sources[s.subtopology_id]]
        read += [counts[t.name] for t in s.repartition_source_topics]
        tasks[s.subtopology_id] = max(read, default=0)
        for t in s.repartition_source_topics:
            wanted[t.name] = InternalTopic(t.name, counts[t.name], t.replication_factor,
                                           t.configs)
        for t in s.changelog_topics:
            wanted[t.name] = InternalTopic(t.name, tasks[s.subtopology_id],
                                           t.replication_factor, t.configs)
    to_create = {n: t for n, t in wanted.items() if n not in partitions}
    misfits = sorted(n for n, t in wanted.items()
                     if n in partitions and partitions[n] != t.partitions)
    statuses: list[Status] = []
    if to_create:
        statuses.append(Status(MISSING_INTERNAL_TOPICS, "Internal topics are missing: "
                               f"[{', '.join(sorted(to_create))}]"))
    if misfits:
        statuses.append(Status(INCORRECTLY_PARTITIONED_TOPICS, "Internal topics have the "
                               f"wrong number of partitions: [{', '.join(misfits)}]"))
    return ConfiguredTopology(tasks={} if statuses else tasks, statuses=tuple(statuses),
                              to_create=to_create, source_topics=sources)


def _derive_repartition_counts(topology: Topology, sources: Mapping[str, tuple[str, ...]],
                               partitions: Mapping[str, int], counts: dict[str, int]) -> None:
    """Step 2: a repartition topic without a fixed count gets the largest count of what
    the subtopologies writing to it read (iterated: those may read repartition topics
    themselves). Topics in a copartition group are left for step 3 if nothing writes
    them."""
    todo = {t.name for s in topology.subtopologies for t in s.repartition_source_topics
            if t.name not in counts}
    while todo:
        progress = False
        for name in sorted(todo):
            writers = [s for s in topology.subtopologies if name in s.repartition_sink_topics]
            read: list[int] = []
            ready = True
            for w in writers:
                read += [partitions[t] for t in sources[w.subtopology_id]]
                for t in w.repartition_source_topics:
                    if t.name in counts:
                        read.append(counts[t.name])
                    elif t.name != name:
                        ready = False
            if ready and read:
                counts[name] = max(read)
                todo.discard(name)
                progress = True
        if not progress:
            # Left: copartitioned ones may still take their group's count (step 3).
            copartitioned = {t.name for s in topology.subtopologies
                             for g in s.copartition_groups
                             for t in _pick(s.repartition_source_topics,
                                            g.repartition_source_topics, s,
                                            "repartition source topic")}
            stuck = todo - copartitioned
            if stuck:
                raise TopologyError("Failed to compute the number of partitions of the "
                                    f"repartition topics {', '.join(sorted(stuck))}")
            return


def _pick(items: Sequence[_T], indices: Iterable[int], s: Subtopology, what: str
          ) -> list[_T]:
    """The items a copartition group names by index; an index the subtopology does not
    have makes the topology invalid (a client's mistake, not the broker's)."""
    picked = []
    for i in indices:
        if not 0 <= i < len(items):
            raise TopologyError(f"Copartition group of subtopology {s.subtopology_id} "
                                f"names {what} {i}, which it does not have")
        picked.append(items[i])
    return picked


def _enforce_copartitioning(s: Subtopology, group: CopartitionGroup,
                            resolved_sources: tuple[str, ...], partitions: Mapping[str, int],
                            counts: dict[str, int]) -> list[str]:
    """Step 3; the names of source topics that are not copartitioned."""
    external = _pick(s.source_topics, group.source_topics, s, "source topic")
    if group.source_topic_regex:
        regexes = _pick(s.source_topic_regex, group.source_topic_regex, s,
                        "source topic regex")
        external += _matches(regexes, [t for t in resolved_sources
                                       if t not in s.source_topics])
    repartition = _pick(s.repartition_source_topics, group.repartition_source_topics, s,
                        "repartition source topic")
    external_counts = {partitions[t] for t in external}
    if len(external_counts) > 1:
        return external
    fixed = {t.partitions for t in repartition if t.partitions > 0}
    if external_counts:
        target = next(iter(external_counts))
        if fixed and fixed != {target}:
            raise TopologyError(f"Copartitioned repartition topics of subtopology "
                                f"{s.subtopology_id} have a fixed number of partitions "
                                f"other than their source topics' ({target})")
    elif len(fixed) > 1:
        raise TopologyError(f"Copartitioned repartition topics of subtopology "
                            f"{s.subtopology_id} have different fixed numbers of partitions")
    elif fixed:
        target = next(iter(fixed))
    else:
        known = [counts[t.name] for t in repartition if t.name in counts]
        if not known:
            raise TopologyError(f"Failed to compute the number of partitions of the "
                                f"copartitioned topics of subtopology {s.subtopology_id}")
        target = max(known)
    for t in repartition:
        if t.partitions <= 0:
            counts[t.name] = target
    return []
