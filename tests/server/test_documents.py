"""Where the security state lives (``server.security.documents``): a file of the data directory on
one node, a znode shared by a cluster's brokers (here on ``MemoryStore``, the store
contract's in-memory twin): what one broker writes the others see, concurrent writers
lose nothing, and a write that cannot be saved changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from odradek.server.cluster.store import MemoryStore, MemoryTree
from odradek.server.security.documents import DocumentError, FileDocument, StoreDocument


def add(name: str):
    def change(value: dict) -> dict:
        return {"names": [*value.get("names", []), name]}
    return change


def test_a_file_document_is_saved_whole_and_read_back(tmp_path: Path) -> None:
    doc = FileDocument(str(tmp_path), "acls", mode=0o600)
    seen: list[dict] = []
    doc.on_change = seen.append
    asyncio.run(doc.update(add("a")))
    asyncio.run(doc.update(add("b")))
    assert seen == [{"names": ["a"]}, {"names": ["a", "b"]}]
    assert json.loads((tmp_path / "acls.json").read_text()) == {"names": ["a", "b"]}
    assert os.stat(tmp_path / "acls.json").st_mode & 0o777 == 0o600
    assert FileDocument(str(tmp_path), "acls").value == {"names": ["a", "b"]}


def test_a_file_document_that_cannot_be_written_is_left_as_it_was(tmp_path: Path) -> None:
    doc = FileDocument(str(tmp_path), "quotas")
    asyncio.run(doc.update(add("a")))
    # The file's place taken by a directory: the rename onto it fails (as a full disk or
    # a read-only directory would fail the write, an OSError either way).
    (tmp_path / "quotas.json").unlink()
    (tmp_path / "quotas.json").mkdir()
    with pytest.raises(DocumentError, match="cannot write"):
        asyncio.run(doc.update(add("b")))
    assert doc.value == {"names": ["a"]}


def test_a_refused_change_saves_nothing(tmp_path: Path) -> None:
    doc = FileDocument(str(tmp_path), "acls")

    def refuse(value: dict) -> dict:
        raise ValueError("no")

    with pytest.raises(ValueError):
        asyncio.run(doc.update(refuse))
    assert not (tmp_path / "acls.json").exists() and doc.value == {}


def test_brokers_share_a_store_document_and_concurrent_writers_lose_nothing() -> None:
    tree = MemoryTree()

    async def body() -> None:
        stores = [MemoryStore(tree) for _ in range(3)]
        for store in stores:
            await store.start(5)
        docs = [StoreDocument(store, "acls") for store in stores]
        for doc in docs:
            await doc.start(5)
        assert all(doc.value == {} for doc in docs)
        heard: list[dict] = []
        docs[2].on_change = heard.append
        # Two brokers write at once: each write is conditional on what it read, and
        # the loser reads again, so both names are kept.
        await asyncio.gather(docs[0].update(add("from-1")), docs[1].update(add("from-2")))
        names = sorted(docs[0].value["names"] if len(docs[0].value["names"]) == 2
                       else docs[1].value["names"])
        assert names == ["from-1", "from-2"]
        for _ in range(100):  # the third broker hears of it by its watch
            if heard and sorted(heard[-1]["names"]) == names:
                break
            await asyncio.sleep(0.01)
        assert sorted(docs[2].value["names"]) == names
        restarted = StoreDocument(stores[2], "acls")  # a broker starting later reads it
        await restarted.start(5)
        assert sorted(restarted.value["names"]) == names
        for doc in [*docs, restarted]:
            doc.stop()
        for store in stores:
            await store.close()

    asyncio.run(body())


def test_a_znode_written_wrong_by_hand_is_ignored_and_the_last_good_content_stays() -> None:
    """An operator's zkCli writes /odradek/acls by hand: not JSON, a JSON list, an ACL
    whose operation does not exist. The broker (its real Authorizer) logs each once and
    keeps the ACLs it had; a later good write is applied; a change through the broker
    while the znode holds garbage is refused with DocumentError, writing nothing."""
    import logging

    from odradek.security.acls import Acl, Operation, PatternType, Permission, ResourceType
    from odradek.server.config import BrokerConfig
    from odradek.server.security.authorizer import Authorizer

    def acl(operation: str) -> dict:
        return {"resource_type": "TOPIC", "name": "t", "pattern_type": "LITERAL",
                "principal": "User:alice", "host": "*", "operation": operation,
                "permission": "ALLOW"}

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.ERROR)
    logging.getLogger("odradek.server.security.documents").addHandler(handler)
    tree = MemoryTree()

    async def body() -> None:
        writer, reader = MemoryStore(tree), MemoryStore(tree)
        await writer.start(5)
        await reader.start(5)
        await writer.ensure_path("/odradek")
        await writer.create("/odradek/acls", json.dumps({"acls": [acl("READ")]}).encode())
        doc = StoreDocument(reader, "acls")
        await doc.start(5)
        authorizer = Authorizer(BrokerConfig({}), doc)
        read = Acl(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", "*",
                   Operation.READ, Permission.ALLOW)

        async def written(data: bytes, good: bool = False) -> None:
            """Write the znode; wait until the reader applied it or logged it ignored."""
            before = len(records)
            await writer.set("/odradek/acls", data)
            for _ in range(200):
                if len(records) > before or (good and json.loads(data) == doc.value):
                    return
                await asyncio.sleep(0.01)

        for bad in (b"{not json", b"[1, 2]", json.dumps({"acls": [acl("PAINT")]}).encode()):
            await written(bad)
            assert list(authorizer.acls) == [read], bad
            assert doc.value == {"acls": [acl("READ")]}
        assert [r.getMessage().split(":")[0] for r in records] == [
            "ignoring it", "ignoring it", "ignoring /odradek/acls"]
        assert all(r.exc_info is None for r in records)  # one line each, no traceback
        assert "PAINT" in records[-1].getMessage()

        await writer.set("/odradek/acls", b"[]")
        with pytest.raises(DocumentError, match="not an object; fix or delete the znode"):
            await doc.update(add("x"))
        assert (await writer.get("/odradek/acls"))[0] == b"[]"

        await written(json.dumps({"acls": [acl("WRITE")]}).encode(), good=True)
        assert [a.operation for a in authorizer.acls] == [Operation.WRITE]
        doc.stop()
        await writer.close()
        await reader.close()

    try:
        asyncio.run(body())
    finally:
        logging.getLogger("odradek.server.security.documents").removeHandler(handler)
