"""The server-side task assignor of streams groups (KIP-1071): Kafka 4.4's ``sticky``
assignor in its essentials.

A task is (subtopology id, partition). Members belong to a *process* (one Kafka Streams
instance; its threads are members), and the work is balanced over members:

- active tasks: a task stays with the member that had it while that member is under
  its share (total tasks / members; the remainder's extra task to as few members as
  the remainder) and under its share of the task's subtopology (so every instance does
  some of every stage's work); the rest go one by one to the
  least loaded member, preferring the one with fewest tasks of that subtopology, then
  one that held the task as a standby (its state is warm), then the least loaded
  process, then the member id;
- standby tasks (``num.standby.replicas``): each task's copies go to members of other
  processes than the one running it active and than each other, preferring the
  members that had it as a standby, then the least loaded; a copy with no such member
  left is not assigned (as Kafka: a standby on the active's own process is useless).

Warm-up tasks (KIP-441's gradual moves) are not made: an active task moves at once,
and the new owner restores its state from the changelog. Deterministic: the same
inputs give the same assignment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

Tasks = dict[str, set[int]]  # subtopology id -> partitions
Task = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    process_id: str
    active: Mapping[str, set[int]] = field(default_factory=dict)  # held now
    standby: Mapping[str, set[int]] = field(default_factory=dict)


@dataclass(slots=True)
class MemberAssignment:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)


def _has(tasks: Mapping[str, set[int]], task: Task) -> bool:
    return task[1] in tasks.get(task[0], ())


def assign(tasks: Mapping[str, int], members: list[MemberSpec], standby_replicas: int
           ) -> dict[str, MemberAssignment]:
    """Every task of ``tasks`` (subtopology id -> task count) to one member, and
    ``standby_replicas`` standby copies where other processes allow."""
    out = {m.member_id: MemberAssignment() for m in members}
    if not members:
        return out
    ordered = sorted(members, key=lambda m: m.member_id)
    all_tasks = sorted((sid, p) for sid, n in tasks.items() for p in range(n))
    # Balanced: every member gets ``least`` tasks, ``extra`` of them one more.
    least, extra = divmod(len(all_tasks), len(ordered))
    load = {m.member_id: 0 for m in ordered}
    process_members: dict[str, list[str]] = {}
    for m in ordered:
        process_members.setdefault(m.process_id, []).append(m.member_id)
    process_of = {m.member_id: m.process_id for m in ordered}
    owner: dict[Task, str] = {}

    def give(member_id: str, task: Task) -> None:
        out[member_id].active.setdefault(task[0], set()).add(task[1])
        load[member_id] += 1
        sub_load[(member_id, task[0])] = sub_load.get((member_id, task[0]), 0) + 1
        owner[task] = member_id

    # Tasks of one subtopology are spread: a member keeps or gets at most its share of
    # each (the subtopology's tasks / members, rounded up), so that every instance does
    # some of every stage's work.
    sub_cap = {sid: math.ceil(n / len(ordered)) for sid, n in tasks.items()}
    sub_load: dict[tuple[str, str], int] = {}

    def in_sub(member_id: str, sid: str) -> int:
        return sub_load.get((member_id, sid), 0)

    # Sticky first: the previous owner keeps what it can - up to ``least``, then one
    # more while members with one more are fewer than ``extra``.
    for cap in (least, least + 1):
        for task in all_tasks:
            if task in owner:
                continue
            for m in ordered:
                if not _has(m.active, task) or load[m.member_id] >= cap:
                    continue
                if in_sub(m.member_id, task[0]) >= sub_cap[task[0]]:
                    continue
                if cap > least and sum(1 for n in load.values() if n > least) >= extra:
                    continue
                give(m.member_id, task)
                break

    def process_load(process: str) -> float:
        ids = process_members[process]
        return sum(load[i] for i in ids) / len(ids)

    for task in all_tasks:
        if task in owner:
            continue
        warm = {m.member_id for m in ordered if _has(m.standby, task)}
        best = min(ordered, key=lambda m: (load[m.member_id], in_sub(m.member_id, task[0]),
                                           m.member_id not in warm,
                                           process_load(m.process_id), m.member_id))
        give(best.member_id, task)

    if standby_replicas <= 0 or len(process_members) < 2:
        return out
    standby_load = dict(load)
    for task in all_tasks:
        used = {process_of[owner[task]]}
        for _ in range(standby_replicas):
            candidates = [m for m in ordered if m.process_id not in used]
            if not candidates:
                break
            best = min(candidates, key=lambda m: (not _has(m.standby, task),
                                                  standby_load[m.member_id], m.member_id))
            out[best.member_id].standby.setdefault(task[0], set()).add(task[1])
            standby_load[best.member_id] += 1
            used.add(best.process_id)
    return out
