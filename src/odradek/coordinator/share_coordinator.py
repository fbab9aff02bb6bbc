"""The share coordinator (KIP-932's, Kafka's ShareCoordinatorShard) as a pure state
machine: what each share partition of each share group has consumed, kept durably in
one partition of ``__share_group_state``.

A share partition's leader (``server/share/``) reads its state when the share partition
is first used (Kafka's ReadShareGroupState) and writes it whenever records are
acknowledged, released, or their locks expire (WriteShareGroupState): the start offset
and the state batches above it (``share_records.StateBatch``: offsets acknowledged,
archived, or available again with their delivery counts). Each write is one
``ShareSnapshot`` record holding the whole state (the topic is compacted, so the
latest one per share partition is what a replay finds); Kafka writes ``ShareUpdate``
deltas between snapshots, which a replay here also applies, so a log Kafka wrote
reads the same.

``state_epoch`` fences old writers: a write naming an older state epoch than the one
kept is FENCED_STATE_EPOCH (AlterShareGroupOffsets and DeleteShareGroupOffsets start
a new state epoch, so a leader still holding the old state cannot overwrite them).
Deleting a group's state writes a tombstone for each of its share partitions.

Like the rest of the package it does no I/O: operations take ``now_ms`` and return
``Effects``, whose records the runtime (``server/coordinators/share_state.py``) appends
before it releases the answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from odradek.coordinator.results import Responses
from odradek.coordinator.share_records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

ShareKey = tuple[str, uuid.UUID, int]  # group id, topic id, partition


@dataclass(slots=True)
class ShareState:
    """One share partition's durable state."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    create_timestamp: int
    write_timestamp: int
    snapshot_epoch: int = 0


class StateRecord(NamedTuple):
    """A record for ``__share_group_state`` (``KeyedRecord`` of the runtime)."""

    key: bytes
    value: bytes | None


@dataclass(slots=True)
class Effects(Responses):
    """The outcome of one call: append ``records``, then send ``responses``."""

    records: list[StateRecord] = field(default_factory=list)


class ReadResult(NamedTuple):
    error_code: int
    state: ShareState | None  # None: no state yet (the leader initializes it)


class WriteResult(NamedTuple):
    error_code: int
    error_message: str | None = None


def _merge_update(state: ShareState, update: ShareUpdateValue) -> None:
    """Apply a Kafka ShareUpdate delta: a new start offset drops batches below it; the
    update's batches replace the offsets they cover."""
    start = state.start_offset if update.start_offset < 0 else update.start_offset
    kept: list[StateBatch] = []
    for b in state.batches:
        for first, last in _minus((b.first_offset, b.last_offset), update.state_batches):
            if last >= start:
                kept.append(StateBatch(max(first, start), last, b.delivery_state,
                                       b.delivery_count))
    kept.extend(b for b in update.state_batches if b.last_offset >= start)
    kept.sort()
    state.start_offset = start
    state.batches = tuple(kept)
    state.leader_epoch = update.leader_epoch


def _minus(span: tuple[int, int], cuts: Sequence[StateBatch]) -> list[tuple[int, int]]:
    parts = [span]
    for c in cuts:
        out = []
        for first, last in parts:
            if c.last_offset < first or c.first_offset > last:
                out.append((first, last))
                continue
            if first < c.first_offset:
                out.append((first, c.first_offset - 1))
            if last > c.last_offset:
                out.append((c.last_offset + 1, last))
        parts = out
    return parts


class ShareCoordinator:
    """The share states of one ``__share_group_state`` partition. Not thread-safe: one
    caller at a time (the broker's event loop)."""

    def __init__(self) -> None:
        self.states: dict[ShareKey, ShareState] = {}

    # --- the runtime's interface (no timers) -------------------------------------------

    def next_deadline(self) -> int | None:
        return None

    def tick(self, now_ms: int) -> Effects:
        return Effects()

    # --- operations ------------------------------------------------------------------

    def read(self, key: ShareKey, *, token: Any, now_ms: int) -> Effects:
        """ReadShareGroupState: the state kept, or None (never written)."""
        fx = Effects()
        fx.respond(token, ReadResult(ErrorCode.none, self.states.get(key)))
        return fx

    def write(self, key: ShareKey, *, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Iterable[StateBatch], token: Any, now_ms: int) -> Effects:
        """WriteShareGroupState: the whole state of one share partition, as a snapshot
        record. A state epoch older than the kept one is fenced."""
        fx = Effects()
        kept = self.states.get(key)
        if kept is not None and state_epoch < kept.state_epoch:
            fx.respond(token, WriteResult(
                ErrorCode.fenced_state_epoch,
                f"state epoch {state_epoch} is older than {kept.state_epoch}"))
            return fx
        state = ShareState(
            state_epoch, leader_epoch, start_offset, tuple(batches),
            kept.create_timestamp if kept is not None and kept.state_epoch == state_epoch
            else now_ms, now_ms, (kept.snapshot_epoch + 1) if kept is not None else 0)
        self.states[key] = state
        fx.records.append(self._snapshot_record(key, state))
        fx.respond(token, WriteResult(ErrorCode.none))
        return fx

    def delete(self, keys: Iterable[ShareKey], *, token: Any, now_ms: int) -> Effects:
        """DeleteShareGroupState: tombstones for the given share partitions."""
        fx = Effects()
        for key in keys:
            if self.states.pop(key, None) is not None:
                fx.records.append(StateRecord(
                    encode_key(ShareSnapshotKey(*key)), None))
        fx.respond(token, WriteResult(ErrorCode.none))
        return fx

    def keys_of_group(self, group_id: str) -> list[ShareKey]:
        return [k for k in self.states if k[0] == group_id]

    @staticmethod
    def _snapshot_record(key: ShareKey, state: ShareState) -> StateRecord:
        return StateRecord(encode_key(ShareSnapshotKey(*key)), encode_value(ShareSnapshotValue(
            state.snapshot_epoch, state.state_epoch, state.leader_epoch, state.start_offset,
            state.create_timestamp, state.write_timestamp, state.batches)))

    # --- replay ----------------------------------------------------------------------

    def load(self, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """Replay one record (in log order). Raises ``DecodeError`` for bytes that are
        not a ``__share_group_state`` record."""
        key = decode_key(key_bytes)
        if key is None:
            return
        share_key = (key.group_id, key.topic_id, key.partition)
        if value_bytes is None:
            self.states.pop(share_key, None)
            return
        value = decode_value(key, value_bytes)
        if isinstance(key, ShareUpdateKey):
            assert isinstance(value, ShareUpdateValue)
            kept = self.states.get(share_key)
            if kept is not None:
                _merge_update(kept, value)
            return
        assert isinstance(value, ShareSnapshotValue)
        self.states[share_key] = ShareState(
            value.state_epoch, value.leader_epoch, value.start_offset,
            tuple(value.state_batches), value.create_timestamp, value.write_timestamp,
            value.snapshot_epoch)
