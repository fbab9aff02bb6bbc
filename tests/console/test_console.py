"""The web console in a real browser, against an ``odradek serve`` the test starts.

The stories an operator would try: see the brokers, browse what a producer wrote (newest
first, JSON pretty-printed, binary as hex, headers, filter, from an offset or a time),
watch a group's lag fall while a consumer runs without reloading the page, create a
topic, change and reset a setting (each after a confirmation), produce a record from the
page, reset a group's offsets (refused while the group has members), delete a topic; and
the console staying up while the broker restarts under it. What the page shows is
checked against what Kafka clients (confluent-kafka) did or read independently.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from odradek.client.wire import WireClient
from odradek.devcluster import free_port
from tests.console.conftest import shot, start_console
from tests.interop.conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with start_broker(tmp_path_factory.mktemp("console-broker")) as b:
        yield b


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Any:
    with start_console(broker.bootstrap) as c:
        yield c


_admins: dict[str, AdminClient] = {}


def _admin(broker: BrokerProcess) -> AdminClient:
    # One client per broker, kept: a client dropped while its future is pending is
    # destroyed and fails that future (_DESTROY).
    if broker.bootstrap not in _admins:
        _admins[broker.bootstrap] = AdminClient({"bootstrap.servers": broker.bootstrap})
    return _admins[broker.bootstrap]


def _create(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    (future,) = _admin(broker).create_topics([NewTopic(name, partitions, 1)]).values()
    future.result(timeout=30)


def _produce(broker: BrokerProcess, topic: str, records: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for r in records:
        producer.produce(topic, **r)
    assert producer.flush(30) == 0


def _column(page: Any, table: str, css: str) -> list[str]:
    return [t.strip() for t in page.locator(f"#{table} tbody tr {css}").all_inner_texts()]


def test_the_cluster_page_shows_the_broker(page: Any, broker: BrokerProcess,
                                           console: Any) -> None:
    page.goto(console.url + "/")
    rows = page.locator("#brokers tbody tr")
    assert rows.count() == 1
    cells = rows.first.locator("td").all_inner_texts()
    assert cells[1:3] == ["127.0.0.1", str(broker.port)]
    assert cells[4] == "controller"
    cluster_id = _admin(broker).describe_cluster().result(timeout=10).cluster_id
    assert page.locator("#cluster-id").inner_text() == cluster_id
    assert page.locator("#offline").inner_text() == "0"
    shot(page, "cluster")


def test_browsing_the_messages_a_producer_wrote(page: Any, broker: BrokerProcess,
                                                console: Any) -> None:
    _create(broker, "orders", partitions=2)
    base = int(time.time() * 1000) - 60_000
    records = [{"key": f"order-{i}", "value": json.dumps({"id": i, "item": "tea"}),
                "partition": i % 2, "timestamp": base + i * 1000,
                "headers": [("source", b"test")]} for i in range(10)]
    records.append({"key": None, "value": bytes([0, 159, 255, 1]), "partition": 0,
                    "timestamp": base + 20_000})
    _produce(broker, "orders", records)

    # Sizes, from DescribeLogDirs: what the broker's segment files hold.
    on_disk = sum(f.stat().st_size for f in broker.data_dir.glob("orders-*/*.log"))
    page.goto(console.url + "/topics")
    size = page.locator("#topics tr[data-topic=orders] td.size")
    assert size.get_attribute("title").startswith(f"{on_disk} bytes")
    assert on_disk > 0 and size.inner_text() == f"{on_disk} B"

    page.goto(console.url + "/topics/orders/messages")
    offsets = _column(page, "messages", "td:nth-child(2)")
    assert len(offsets) == 11
    # Newest first: the binary record (latest timestamp) leads, then order-9, order-8...
    assert page.locator("#messages tbody tr").first.locator("td.value").get_attribute(
        "class") == "value hex"
    assert page.locator("#messages tbody tr").first.locator("td.value").inner_text() \
        == "00 9f ff 01"
    keys = _column(page, "messages", "td.key")
    assert keys[1:4] == ["order-9", "order-8", "order-7"]
    second = page.locator("#messages tbody tr").nth(1)
    assert json.loads(second.locator("td.value").inner_text()) == {"id": 9, "item": "tea"}
    assert "\n" in second.locator("td.value").inner_text()  # pretty-printed
    assert second.locator("td.headers").inner_text().strip() == "source: test"
    shot(page, "messages")

    # The filter, through the form (htmx swaps the results in place).
    page.fill("input[name=contains]", "order-3")
    page.click("#browse button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#messages tbody tr').length == 1")
    assert _column(page, "messages", "td.key") == ["order-3"]
    assert "contains=order-3" in page.url  # the address is shareable

    # From an offset of one partition, forward.
    page.goto(console.url + "/topics/orders/messages?partition=1&offset=2&limit=2")
    assert _column(page, "messages", "td.key") == ["order-5", "order-7"]
    # From a time: the first records at or after it, oldest first.
    page.goto(console.url + f"/topics/orders/messages?timestamp={base + 7000}&limit=3")
    assert _column(page, "messages", "td.key") == ["order-7", "order-8", "order-9"]
    # As hex, whatever the bytes are.
    page.goto(console.url + "/topics/orders/messages?partition=0&limit=1&offset=0"
              "&format=hex")
    assert page.locator("#messages td.key").inner_text() == b"order-0".hex(" ")


def test_a_group_lag_falls_while_a_consumer_runs(page: Any, broker: BrokerProcess,
                                                 console: Any) -> None:
    _create(broker, "clicks", partitions=2)
    _produce(broker, "clicks", [{"value": b"x" * 20, "partition": i % 2}
                                for i in range(2000)])
    # The group committed at the start: everything is lag.
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reporting"})
    committer.commit(offsets=[TopicPartition("clicks", 0, 0), TopicPartition("clicks", 1, 0)],
                     asynchronous=False)
    committer.close()

    page.goto(console.url + "/groups")
    row = page.locator("#groups tr[data-group=reporting]")
    assert row.locator("td.lag").inner_text() == "2000"
    row.locator("a").click()
    page.wait_for_url("**/groups/reporting")
    assert page.locator("#total-lag").inner_text() == "2000"
    assert page.locator("#group-state").inner_text() == "empty"

    # A consumer works through the backlog slowly, committing as it goes; the page,
    # never reloaded, follows (htmx polls the lag table).
    stop = threading.Event()
    seen: list[int] = []

    def consume() -> None:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reporting",
                      "client.id": "slow-reader", "enable.auto.commit": False})
        c.subscribe(["clicks"])
        count = 0
        try:
            while not stop.is_set() and count < 2000:
                for msg in c.consume(num_messages=100, timeout=0.5):
                    if msg.error() is None:
                        count += 1
                if count:
                    c.commit(asynchronous=False)
                    time.sleep(0.3)
        finally:
            seen.append(count)
            c.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    lags = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            lag = int(page.locator("#total-lag").inner_text())
            if not lags or lag != lags[-1]:
                lags.append(lag)
            if lag == 0:
                break
            page.wait_for_timeout(200)
        if page.locator("#members tbody tr").count():
            members = page.locator("#members").inner_text()
            assert "slow-reader" in members or lags[-1] == 0
        shot(page, "group")
    finally:
        stop.set()
        reader.join(30)
    assert lags[0] == 2000 and lags[-1] == 0, lags
    assert len(lags) >= 3, f"the page should have shown the lag falling, saw {lags}"
    assert lags == sorted(lags, reverse=True)
    assert page.locator("#lag-chart svg polyline").count() == 1


def test_topics_made_changed_and_deleted_from_the_page(page: Any, broker: BrokerProcess,
                                                       console: Any) -> None:
    answers: list[bool] = []
    page.on("dialog", lambda d: d.accept() if answers.pop(0) else d.dismiss())

    page.goto(console.url + "/topics")
    shot(page, "topics")
    page.fill("#create-topic input[name=name]", "payments")
    page.fill("#create-topic input[name=partitions]", "3")
    page.fill("#create-topic textarea[name=configs]", "retention.ms=86400000")
    page.click("#create-topic button")
    page.wait_for_url("**/topics/payments")
    assert page.locator("#partitions tbody tr").count() == 3
    meta = _admin(broker).list_topics(timeout=10).topics["payments"]
    assert len(meta.partitions) == 3

    def setting(name: str) -> Any:
        resource = ConfigResource(ResourceType.TOPIC, "payments")
        (future,) = _admin(broker).describe_configs([resource]).values()
        return future.result(timeout=10)[name]

    assert setting("retention.ms").value == "86400000"

    # Change a setting: the page asks first; saying no changes nothing.
    page.select_option("#edit-config select[name=config]", "max.message.bytes")
    page.fill("#edit-config input[name=value]", "2048")
    answers.append(False)
    page.click("#edit-config button")
    page.wait_for_timeout(500)
    assert setting("max.message.bytes").value != "2048"
    answers.append(True)
    page.click("#edit-config button")
    page.wait_for_selector("tr[data-config='max.message.bytes'].overridden")
    assert page.locator("tr[data-config='max.message.bytes'] td.value").inner_text() \
        == "2048"
    assert setting("max.message.bytes").value == "2048"
    assert setting("max.message.bytes").source == 1  # DYNAMIC_TOPIC_CONFIG
    shot(page, "topic")

    # A value the broker refuses: its error, on the page; nothing changed.
    page.select_option("#edit-config select[name=config]", "cleanup.policy")
    page.fill("#edit-config input[name=value]", "shred")
    answers.append(True)
    page.click("#edit-config button")
    page.wait_for_selector("#outcome #error")
    assert "INVALID_CONFIG" in page.locator("#outcome").inner_text()
    assert setting("cleanup.policy").value == "delete"

    # Back to the broker's default.
    answers.append(True)
    page.locator("tr[data-config='max.message.bytes'] button").click()
    page.wait_for_function(
        "!document.querySelector(\"tr[data-config='max.message.bytes'].overridden\")")
    assert setting("max.message.bytes").is_default

    # A record from the page, read back by a Kafka consumer.
    page.fill("#produce input[name=partition]", "2")
    page.fill("#produce input[name=key]", "k1")
    page.fill("#produce textarea[name=value]", '{"amount": 12}')
    page.fill("#produce textarea[name=headers]", "origin=console")
    page.click("#produce button")
    page.wait_for_selector("#produced")
    assert page.locator("#produced").inner_text() == \
        "Produced a record at partition 2, offset 0."
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check"})
    consumer.assign([TopicPartition("payments", 2, 0)])
    msg = consumer.poll(15)
    consumer.close()
    assert msg is not None and msg.error() is None
    assert (msg.key(), msg.value(), msg.headers()) == \
        (b"k1", b'{"amount": 12}', [("origin", b"console")])

    # Delete, after saying yes.
    answers.append(True)
    page.click("#delete-topic button")
    page.wait_for_url("**/topics")
    assert page.locator("#topics tr[data-topic=payments]").count() == 0
    deadline = time.monotonic() + 10
    while "payments" in _admin(broker).list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the topic was not deleted"
        time.sleep(0.2)
    page.goto(console.url + "/topics/payments")
    assert page.locator("#error h1").inner_text() == "UNKNOWN_TOPIC_OR_PART"


def test_a_group_offsets_reset_only_while_it_has_no_members(
        page: Any, broker: BrokerProcess, console: Any) -> None:
    _create(broker, "audit")
    _produce(broker, "audit", [{"value": b"a"} for _ in range(5)])
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "auditors",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    member.subscribe(["audit"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 5 and time.monotonic() < deadline:
        got += sum(m.error() is None for m in member.consume(5, timeout=1))
    member.commit(asynchronous=False)

    page.on("dialog", lambda d: d.accept())
    page.goto(console.url + "/groups/auditors")
    assert page.locator("#group-state").inner_text() == "stable"
    page.select_option("#reset select[name=to]", "earliest")
    page.click("#reset button")
    page.wait_for_selector("#outcome #error")
    assert "NON_EMPTY_GROUP" in page.locator("#outcome").inner_text()

    member.close()
    page.goto(console.url + "/groups/auditors")
    page.wait_for_function("document.querySelector('#group-state').innerText == 'empty'",
                           timeout=30_000)
    page.select_option("#reset select[name=to]", "offset")
    page.fill("#reset input[name=value]", "2")
    page.click("#reset button")
    page.wait_for_selector("#reset-done")
    assert page.locator("#reset-done").inner_text() == \
        "Offsets reset: 0:2 (partition:offset)."
    committed = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "auditors"})
    (tp,) = committed.committed([TopicPartition("audit", 0)], timeout=10)
    committed.close()
    assert tp.offset == 2
    assert page.locator("#lag tr[data-tp='audit-0'] td.lag").inner_text() == "3"




def test_the_console_outlives_a_broker_restart(page: Any, tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    with start_broker(data, "--listen", f"127.0.0.1:{port}") as first:
        _create(first, "survivor")
        with start_console(first.bootstrap) as console:
            page.goto(console.url + "/topics")
            assert page.locator("#topics tr[data-topic=survivor]").count() == 1
            first.process.terminate()
            first.process.wait(timeout=20)
            response = page.goto(console.url + "/topics")
            assert response is not None and response.status == 502
            assert page.locator("#error").count() == 1
            with start_broker(data, "--listen", f"127.0.0.1:{port}"):
                deadline = time.monotonic() + 60
                while True:
                    response = page.goto(console.url + "/topics")
                    if response is not None and response.status == 200:
                        break
                    assert time.monotonic() < deadline, "the console never came back"
                    time.sleep(1)
                assert page.locator("#topics tr[data-topic=survivor]").count() == 1
            assert console.process.poll() is None


def test_a_tiered_topic_shows_its_local_and_remote_parts(page: Any, tmp_path: Path) -> None:
    """Tiered storage (docs/tiered-storage.md): the topic page says where each
    partition's local log starts and how far the remote tier reaches (ListOffsets -4
    and -5 to the leader)."""
    store = tmp_path / "remote"
    store.mkdir()
    args = [f"--override={k}={v}" for k, v in {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rsm.config.storage.backend.class": "filesystem",
        "rsm.config.storage.root": str(store)}.items()]
    with start_broker(tmp_path / "data", *args) as tiered:
        admin = AdminClient({"bootstrap.servers": tiered.bootstrap})
        admin.create_topics([NewTopic("archive", 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "16384",
            "local.retention.bytes": "0"})])["archive"].result(timeout=30)
        for start in range(0, 2000, 100):  # small batches: segments of 16 KiB roll
            _produce(tiered, "archive", [{"value": f"event-{i}".ljust(100, ".")}
                                         for i in range(start, start + 100)])

        def offsets() -> tuple[int, int]:
            with WireClient(tiered.port) as c:
                found = []
                for spec in (-4, -5):
                    r = c.request(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
                        {"name": "archive", "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1,
                             "timestamp": spec}]}]})
                    found.append(r.topics[0].partitions[0].offset)
            return found[0], found[1]

        # Settled: every rolled segment copied and deleted locally (local retention
        # 0), so neither offset moves while the page is read.
        deadline = time.monotonic() + 30
        while (found := offsets())[0] == 0 or found[0] != found[1] + 1:
            assert time.monotonic() < deadline, f"not settled: {found}"
            time.sleep(0.2)
        local_start, tiered_end = found
        with start_console(tiered.bootstrap) as console:
            page.goto(console.url + "/topics/archive")
            assert _column(page, "partitions", "td.local-start") == [str(local_start)]
            assert _column(page, "partitions", "td.tiered-end") == [str(tiered_end)]
            assert "remote tier" in page.locator("body").inner_text()
            # A topic without tiered storage shows no such columns.
            page.goto(console.url + "/topics/__consumer_offsets")
            assert page.locator("#partitions td.local-start").count() == 0
