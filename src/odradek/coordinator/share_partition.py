"""One share-partition's delivery state (KIP-932, "queues for Kafka"): Kafka's
``SharePartition`` as a pure state machine — no asyncio, no I/O, no clock (callers pass
``now_ms`` and run ``expire_locks`` from their own timer).

A share group's consumers share the records of a partition. For each (group, topic,
partition) the partition's leader keeps:

- ``start_offset`` (SPSO): every offset below it is done;
- ``end_offset`` (SPEO): one past the last offset ever acquired, where new records are
  read from;
- for offsets in [start, end): a delivery state — AVAILABLE 0, ACQUIRED 1, ACKNOWLEDGED 2,
  ARCHIVED 4 (Kafka's numbers; 0/2/4 are what is persisted) — a delivery count, and while
  ACQUIRED the member holding the offset and its lock deadline. Offsets in [start, end)
  not tracked at all are log gaps (no records there, e.g. compacted away): done.

The rules:

- ``acquire`` takes the AVAILABLE offsets covered by whole record batches the caller read
  from ``next_fetch_offset()`` (released offsets below end, new ones at or above it):
  count + 1, ACQUIRED by the member until now + lock. Batch mode (Kafka's default) stops
  after the batch at which ``max_records`` is reached; record mode (ShareFetch v2's
  ShareAcquireMode 1) takes exactly up to ``max_records``, splitting a batch. New offsets
  are taken only while end - start is below ``max_in_flight``
  (group.share.partition.max.record.locks), measured before each batch: a log gap
  between batches holds no records, so it never stops acquisition.
- ``acknowledge``: ACCEPT -> ACKNOWLEDGED; REJECT, GAP -> ARCHIVED; RELEASE -> AVAILABLE,
  or ARCHIVED once the count reached ``delivery_limit``; RENEW keeps the lock for another
  lock period. Every offset must be ACQUIRED by the acknowledging member, else
  INVALID_RECORD_STATE; malformed batches are INVALID_REQUEST; either way nothing is
  applied.
- ``release_member`` (a member left) and ``expire_locks`` (lock timeouts) release like
  RELEASE does.
- After every change ``start_offset`` moves over ACKNOWLEDGED, ARCHIVED and gap offsets to
  the first AVAILABLE/ACQUIRED one (or to end), and the state below it is dropped.
- ``snapshot`` is the persisted view (``share_records``): ACQUIRED is written AVAILABLE
  (locks do not survive a restart), gaps are left out; a partition rebuilt from it
  behaves the same for every offset.

Representation: sorted, non-overlapping ``_Range``s (offsets first..last sharing state,
count, member and lock) found with ``bisect``; an operation on part of a range splits it,
and neighbours that become equal are merged again. Acquiring a batch of hundreds of
records is one range, not hundreds of objects: this runs for every share fetch.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import NamedTuple

from odradek.coordinator.share_records import StateBatch

# Delivery states (Kafka's RecordState ids).
AVAILABLE = 0
ACQUIRED = 1
ACKNOWLEDGED = 2
ARCHIVED = 4
_DONE = (ACKNOWLEDGED, ARCHIVED)

# Acknowledge types (ShareAcknowledge/ShareFetch AcknowledgeTypes).
GAP = 0
ACCEPT = 1
RELEASE = 2
REJECT = 3
RENEW = 4  # KIP-1222
_ACK_TYPES = frozenset((GAP, ACCEPT, RELEASE, REJECT, RENEW))

# Kafka error codes acknowledge returns.
NONE = 0
INVALID_REQUEST = 42
INVALID_RECORD_STATE = 121


class AcquiredRange(NamedTuple):
    """Offsets handed to a consumer (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class InFlightRange(NamedTuple):
    """A read-only view of one tracked range, for describe and tests."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int
    member_id: str | None  # while ACQUIRED
    deadline_ms: int  # while ACQUIRED, else 0


class _Range:
    __slots__ = ("count", "deadline", "first", "last", "lock_ms", "member", "state")

    def __init__(self, first: int, last: int, state: int, count: int,
                 member: str | None = None, deadline: int = 0, lock_ms: int = 0) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        # Only while ACQUIRED: the holder, its deadline and the lock period RENEW extends by.
        self.member = member
        self.deadline = deadline
        self.lock_ms = lock_ms

    def same(self, other: _Range) -> bool:
        """Everything but the offsets equal: the two can be one range if adjacent."""
        return (self.state == other.state and self.count == other.count
                and self.member == other.member and self.deadline == other.deadline
                and self.lock_ms == other.lock_ms)

    def unlock(self, state: int) -> None:
        self.state = state
        self.member = None
        self.deadline = self.lock_ms = 0


_FIRST = attrgetter("first")


class SharePartition:
    """The in-flight records of one share-partition (see the module docstring)."""

    def __init__(self, start_offset: int, *, delivery_limit: int, max_in_flight: int,
                 state_batches: Iterable[StateBatch] = ()) -> None:
        """From a persisted start offset and state batches (a ``snapshot``, or a share
        coordinator's replay of its records). Batches below the start are ignored;
        overlapping batches or an unknown state raise ValueError."""
        if delivery_limit < 1 or max_in_flight < 1:
            raise ValueError("delivery_limit and max_in_flight must be at least 1")
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        # Bumped by every change, locks included: the caller persists when it moved.
        self.changes = 0
        self._start = start_offset
        self._end = start_offset
        self._ranges: list[_Range] = []
        for b in sorted(state_batches):
            first, last = max(b.first_offset, start_offset), b.last_offset
            if first > last:
                continue
            if b.delivery_state not in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED):
                raise ValueError(f"unknown delivery state {b.delivery_state}")
            if first < self._end:
                raise ValueError(f"state batches overlap at offset {first}")
            # A stored ACQUIRED (Kafka never writes one) is as available as after a restart.
            state = AVAILABLE if b.delivery_state == ACQUIRED else b.delivery_state
            self._ranges.append(_Range(first, last, state, b.delivery_count))
            self._end = last + 1
        self._coalesce(0, len(self._ranges))
        self._advance_start()

    # --- reading ---------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    def in_flight_count(self) -> int:
        """The in-flight window, end - start (what ``max_in_flight`` bounds)."""
        return self._end - self._start

    def acquired_count(self, member_id: str | None = None) -> int:
        """Offsets ACQUIRED now, by anyone or by one member."""
        return sum(r.last - r.first + 1 for r in self._ranges
                   if r.state == ACQUIRED and (member_id is None or r.member == member_id))

    def ranges(self) -> list[InFlightRange]:
        return [InFlightRange(r.first, r.last, r.state, r.count, r.member, r.deadline)
                for r in self._ranges]

    def next_fetch_offset(self) -> int:
        """Where the caller should read the log from: the first AVAILABLE offset, else end."""
        for r in self._ranges:
            if r.state == AVAILABLE:
                return r.first
        return self._end

    def next_deadline(self) -> int | None:
        """The earliest lock deadline, for the caller's timer; None if nothing is locked."""
        return min((r.deadline for r in self._ranges if r.state == ACQUIRED), default=None)

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """The persisted view: start offset and the state batches above it."""
        out: list[StateBatch] = []
        for r in self._ranges:
            state = AVAILABLE if r.state == ACQUIRED else r.state
            if out:
                prev = out[-1]
                if (prev.last_offset + 1 == r.first and prev.delivery_state == state
                        and prev.delivery_count == r.count):
                    out[-1] = prev._replace(last_offset=r.last)
                    continue
            out.append(StateBatch(r.first, r.last, state, r.count))
        return self._start, out

    # --- acquiring -------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Iterable[tuple[int, int]], max_records: int,
                lock_ms: int, now_ms: int, *, record_limit: bool = False) -> list[AcquiredRange]:
        """Lock the AVAILABLE offsets of ``batches`` — (base_offset, last_offset) of the
        record batches read from ``next_fetch_offset()``, ascending, control batches
        included — for ``member_id``. Returns the acquired offsets as ranges of equal
        delivery count, ascending."""
        got: list[tuple[int, int, int]] = []
        if max_records <= 0:
            return []
        deadline = now_ms + lock_ms
        taken = 0
        pos = self._start  # offsets below are done, or were covered by an earlier batch
        for base, last in batches:
            if taken >= max_records:
                break
            lo = max(base, pos)
            if lo > last:
                continue
            pos = last + 1
            if lo < self._end:  # released offsets inside the window
                quota = max_records - taken if record_limit else None
                taken += self._acquire_in_flight(lo, min(last, self._end - 1), member_id,
                                                 deadline, lock_ms, quota, got)
                if record_limit and taken >= max_records:
                    break
            new_first = max(lo, self._end)
            if new_first > last:
                continue
            window = self._end - self._start
            if window >= self.max_in_flight:
                break  # every later batch is new too
            new_last = last
            if record_limit:
                new_last = min(last, new_first - 1 + min(max_records - taken,
                                                         self.max_in_flight - window))
            self._append_acquired(new_first, new_last, member_id, deadline, lock_ms)
            got.append((new_first, new_last, 1))
            taken += new_last - new_first + 1
            self._end = new_last + 1  # past any log gap before new_first too
            if new_last < last:
                break  # the window or the record limit split this batch
        if not got:
            return []
        self._advance_start()  # over a log gap before the first batch taken
        self.changes += 1
        return _merge_acquired(got)

    def _acquire_in_flight(self, lo: int, hi: int, member: str, deadline: int, lock_ms: int,
                           quota: int | None, got: list[tuple[int, int, int]]) -> int:
        # First find the AVAILABLE pieces (the ranges are not touched while searching),
        # then acquire each: every piece lies inside one range.
        pieces: list[tuple[int, int]] = []
        ranges = self._ranges
        i = self._index(lo)
        while i < len(ranges) and ranges[i].first <= hi and quota != 0:
            r = ranges[i]
            i += 1
            if r.state != AVAILABLE:
                continue
            a, b = max(r.first, lo), min(r.last, hi)
            if quota is not None:
                b = min(b, a + quota - 1)
                quota -= b - a + 1
            pieces.append((a, b))
        for a, b in pieces:
            i, j = self._isolate(a, b)
            r = ranges[i]  # j == i + 1: the piece was inside one range
            r.state, r.member, r.deadline, r.lock_ms = ACQUIRED, member, deadline, lock_ms
            r.count += 1
            got.append((a, b, r.count))
            self._coalesce(i, j)
        return sum(b - a + 1 for a, b in pieces)

    def _append_acquired(self, first: int, last: int, member: str, deadline: int,
                         lock_ms: int) -> None:
        new = _Range(first, last, ACQUIRED, 1, member, deadline, lock_ms)
        ranges = self._ranges
        # Consecutive batches of one fetch become one range.
        if ranges and ranges[-1].last + 1 == first and ranges[-1].same(new):
            ranges[-1].last = last
        else:
            ranges.append(new)

    # --- acknowledging and releasing -------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]],
                    now_ms: int) -> int:
        """Apply a member's acknowledgements — (first_offset, last_offset, ack types: one
        for all offsets, or one per offset) — all or nothing. Returns a Kafka error code:
        NONE, INVALID_REQUEST (a malformed batch; batches must ascend without overlap) or
        INVALID_RECORD_STATE (an offset this member does not hold). A lock past its
        deadline still holds until ``expire_locks`` runs: the caller's timer decides."""
        runs: list[tuple[int, int, int]] = []  # (first, last, type): consecutive equal types
        prev_last: int | None = None
        for first, last, types in batches:
            if (first > last or len(types) not in (1, last - first + 1)
                    or not _ACK_TYPES.issuperset(types)
                    or (prev_last is not None and first <= prev_last)):
                return INVALID_REQUEST
            prev_last = last
            if len(types) == 1:
                runs.append((first, last, types[0]))
                continue
            run_first = first
            for k in range(1, len(types) + 1):
                if k == len(types) or types[k] != types[k - 1]:
                    runs.append((run_first, first + k - 1, types[k - 1]))
                    run_first = first + k
        for first, last, _ in batches:
            if not self._held_by(member_id, first, last):
                return INVALID_RECORD_STATE
        if not runs:
            return NONE
        ranges = self._ranges
        for first, last, ack in runs:
            i, j = self._isolate(first, last)
            for r in ranges[i:j]:
                if ack == RENEW:
                    r.deadline = now_ms + r.lock_ms
                elif ack == ACCEPT:
                    r.unlock(ACKNOWLEDGED)
                elif ack == RELEASE:
                    self._release(r)
                else:  # REJECT, GAP
                    r.unlock(ARCHIVED)
            self._coalesce(i, j)
        self._advance_start()
        self.changes += 1
        return NONE

    def _held_by(self, member: str, first: int, last: int) -> bool:
        """Every offset of first..last tracked, ACQUIRED, by ``member``."""
        ranges = self._ranges
        i = self._index(first)
        expect = first
        while expect <= last:
            if i >= len(ranges) or ranges[i].first > expect:
                return False  # a gap, below start or at/after end
            r = ranges[i]
            if r.state != ACQUIRED or r.member != member:
                return False
            expect = r.last + 1
            i += 1
        return True

    def _release(self, r: _Range) -> None:
        r.unlock(ARCHIVED if r.count >= self.delivery_limit else AVAILABLE)

    def release_member(self, member_id: str) -> bool:
        """A member left (its share session closed): its locks go. Whether anything did."""
        return self._release_where(lambda r: r.member == member_id)

    def expire_locks(self, now_ms: int) -> bool:
        """Release the locks whose deadline is due. Whether anything changed."""
        return self._release_where(lambda r: r.deadline <= now_ms)

    def _release_where(self, due: Callable[[_Range], bool]) -> bool:
        changed = False
        for r in self._ranges:
            if r.state == ACQUIRED and due(r):
                self._release(r)
                changed = True
        if changed:
            self._coalesce(0, len(self._ranges))
            self._advance_start()
            self.changes += 1
        return changed

    # --- moving the start ------------------------------------------------------------

    def advance_to(self, offset: int) -> bool:
        """Everything below ``offset`` is gone (the log start moved past it: retention,
        DeleteRecords; or AlterShareGroupOffsets forward). Whether anything changed."""
        if offset <= self._start:
            return False
        del self._ranges[: self._split(offset)]
        self._start = offset
        self._end = max(self._end, offset)
        self._advance_start()
        self.changes += 1
        return True

    def reset(self, start_offset: int) -> None:
        """Forget everything and start at ``start_offset`` (AlterShareGroupOffsets, either
        direction; Kafka allows it only while the group is empty)."""
        self._ranges.clear()
        self._start = self._end = start_offset
        self.changes += 1

    def _advance_start(self) -> None:
        # Untracked offsets in [start, end) are gaps, so the start goes to the first range
        # still to deliver (or to end); the done ranges before it are dropped.
        ranges = self._ranges
        k = 0
        while k < len(ranges) and ranges[k].state in _DONE:
            k += 1
        self._start = ranges[k].first if k < len(ranges) else self._end
        del ranges[:k]

    # --- ranges ----------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """Index of the range holding ``offset``, else of the first range after it."""
        i = bisect_right(self._ranges, offset, key=_FIRST) - 1
        if i >= 0 and self._ranges[i].last >= offset:
            return i
        return i + 1

    def _split(self, offset: int) -> int:
        """Make ``offset`` the start of a range if a range runs across it; returns the
        index of the first range starting at or after ``offset``."""
        ranges = self._ranges
        i = bisect_right(ranges, offset, key=_FIRST) - 1
        if i < 0:
            return 0
        r = ranges[i]
        if r.first == offset:
            return i
        if offset <= r.last:
            ranges.insert(i + 1, _Range(offset, r.last, r.state, r.count, r.member,
                                        r.deadline, r.lock_ms))
            r.last = offset - 1
        return i + 1

    def _isolate(self, first: int, last: int) -> tuple[int, int]:
        """Split so that ranges[i:j] are exactly the tracked offsets of first..last."""
        i = self._split(first)
        return i, self._split(last + 1)

    def _coalesce(self, lo: int, hi: int) -> None:
        """Merge equal adjacent ranges among ranges[lo:hi] and their two neighbours."""
        ranges = self._ranges
        i = min(hi, len(ranges) - 1)
        lo = max(lo, 1)
        while i >= lo:
            a, b = ranges[i - 1], ranges[i]
            if a.last + 1 == b.first and a.same(b):
                a.last = b.last
                del ranges[i]
            i -= 1


def _merge_acquired(got: list[tuple[int, int, int]]) -> list[AcquiredRange]:
    """Adjacent acquired offsets with the same delivery count as one range."""
    got.sort()
    out = [AcquiredRange(*got[0])]
    for first, last, count in got[1:]:
        prev = out[-1]
        if prev.last_offset + 1 == first and prev.delivery_count == count:
            out[-1] = prev._replace(last_offset=last)
        else:
            out.append(AcquiredRange(first, last, count))
    return out
