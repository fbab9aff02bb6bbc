"""Random interleavings of transactional and plain producers on a real broker, checked
after every step against a model of what read_committed and read_uncommitted readers
must see: transactions committing and aborting in any order, offsets sent with them
(TxnOffsetCommit), a producer fenced by its successor (its open transaction aborted),
and clean broker restarts in between.

The model is the log itself, record by record in write order, each record tagged with
its transaction (or none): a read_committed reader sees, in log order, the records of
committed transactions and the plain ones, up to the first record of the oldest open
transaction of the partition (the LSO); a read_uncommitted reader sees everything; a
group's committed offset is the one of its last committed transaction."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from odradek.client.wire import WireClient
from odradek.testing import running_broker
from tests.server.test_transactions import (
    READ_UNCOMMITTED,
    Txn,
    _same,
    add_offsets,
    committed_view,
    create_topic,
    fetch,
    offset_fetch,
    plain,
    produce,
    txn_offset_commit,
    values,
)

PARTITIONS = 2
IDS = ("alpha", "beta", "gamma")


@dataclass
class Model:
    # partition -> [(value, transaction number or None)] in log order
    log: dict[int, list[tuple[bytes, int | None]]] = field(
        default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    outcome: dict[int, bool | None] = field(default_factory=dict)  # None: still open
    open_txn: dict[str, int] = field(default_factory=dict)  # transactional id -> txn
    added: dict[str, set[int]] = field(default_factory=dict)
    # Offsets sent with transactions (one group per transactional id, partition 0 of
    # "t"): the committed one, and the one an open transaction would commit.
    group_offset: dict[str, int] = field(default_factory=dict)
    pending_offset: dict[int, tuple[str, int]] = field(default_factory=dict)

    def end(self, txn: int, commit: bool) -> None:
        self.outcome[txn] = commit
        pending = self.pending_offset.pop(txn, None)
        if pending is not None and commit:
            self.group_offset[pending[0]] = pending[1]

    def committed(self, partition: int) -> list[bytes]:
        out = []
        for value, txn in self.log[partition]:
            if txn is not None and self.outcome[txn] is None:
                break  # the LSO: the first record of the oldest open transaction
            if txn is None or self.outcome[txn]:
                out.append(value)
        return out

    def everything(self, partition: int) -> list[bytes]:
        return [value for value, _ in self.log[partition]]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_read_committed_matches_the_model_through_random_transactions_and_restarts(
        tmp_path, seed):
    rng = random.Random(seed)
    model = Model()
    counter = 0
    node_cm = running_broker(data_dir=str(tmp_path))
    node = node_cm.__enter__()
    c = WireClient(node.port)
    try:
        create_topic(c, "t", PARTITIONS)
        producers = {tid: Txn(c, tid) for tid in IDS}
        for step in range(45):
            action = rng.choices(
                ["write", "plain", "offsets", "commit", "abort", "fence", "restart"],
                [10, 2, 3, 3, 2, 1, 1])[0]
            tid = rng.choice(IDS)
            txn = producers[tid]
            if action == "write":
                partition = rng.randrange(PARTITIONS)
                if tid not in model.open_txn:
                    counter += 1
                    model.open_txn[tid] = counter
                    model.outcome[counter] = None
                    model.added[tid] = set()
                if partition not in model.added[tid]:
                    assert txn.add("t", partition) == {partition: 0}
                    model.added[tid].add(partition)
                batch = [f"{tid}-{step}-{i}".encode() for i in range(rng.randint(1, 3))]
                assert txn.produce("t", partition, *batch).error_code == 0
                model.log[partition] += [(v, model.open_txn[tid]) for v in batch]
            elif action == "offsets":
                if tid not in model.open_txn:
                    continue  # offsets go with an open transaction (it began by a write)
                group = f"group-{tid}"
                assert add_offsets(c, txn, group) == 0
                assert txn_offset_commit(c, txn, group, "t", step) == 0
                model.pending_offset[model.open_txn[tid]] = (group, step)
            elif action == "plain":
                partition = rng.randrange(PARTITIONS)
                value = f"plain-{step}".encode()
                assert produce(c, "t", partition, plain(value)).error_code == 0
                model.log[partition].append((value, None))
            elif action in ("commit", "abort"):
                if tid in model.open_txn:
                    assert txn.end(commit=action == "commit") == 0
                    model.end(model.open_txn.pop(tid), action == "commit")
            elif action == "fence":
                # A successor takes the id over; an open transaction of it is aborted.
                producers[tid] = Txn(c, tid)
                if tid in model.open_txn:
                    model.end(model.open_txn.pop(tid), False)
            else:  # a clean restart of the broker, clients reconnect
                c.close()
                node_cm.__exit__(None, None, None)
                node_cm = running_broker(data_dir=str(tmp_path))
                node = node_cm.__enter__()
                c = WireClient(node.port)
                producers = {t: _same(p, c) for t, p in producers.items()}
            for partition in range(PARTITIONS):
                assert committed_view(fetch(c, "t", partition=partition)) == (
                    model.committed(partition)), (seed, step, action, partition)
                assert values(fetch(c, "t", partition=partition,
                                    isolation=READ_UNCOMMITTED)) == model.everything(partition)
            for tid_ in IDS:
                assert offset_fetch(c, f"group-{tid_}", "t") == model.group_offset.get(
                    f"group-{tid_}", -1), (seed, step, action, tid_)
    finally:
        c.close()
        node_cm.__exit__(None, None, None)
