"""The console's HTTP endpoints under arbitrary input (the fuzz tier's console surface).

The application runs in-process (Starlette's TestClient) over a real ``KafkaView`` of a
broker the test starts; hypothesis sends every route odd query strings, form fields and
path segments. Whatever arrives, the console answers with a page - 2xx, a redirect, or a
4xx naming what was wrong - never a 500, and nothing it was not asked to change changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from odradek.console.app import create_app
from odradek.console.kafka import KafkaView
from tests.interop.conftest import start_broker

pytestmark = pytest.mark.interop

# Values a user (or a script) might put anywhere: numbers in and out of range, times in
# several shapes, empty, huge, unicode, markup, path tricks.
ODD = st.one_of(
    st.sampled_from(["", "-1", "0", "1", "99999999999999999999", "1e3", "0x10", " 7 ",
                     "NaN", "earliest", "latest", "2026-11-26T10:00:00", "2026-13-45",
                     "<script>alert(1)</script>", "../../etc/passwd", "%00", "\u2603",
                     "a=b", "=", "offset", "timestamp", "hex", "json", "auto"]),
    st.text(max_size=40),
    st.integers(min_value=-(2**63), max_value=2**63).map(str),
)
FIELDS = ("partition", "offset", "timestamp", "limit", "format", "contains", "name",
          "partitions", "replication_factor", "configs", "config", "value", "action",
          "key", "headers", "topic", "to")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with start_broker(tmp_path_factory.mktemp("console-inputs")) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("kept", 2, 1)]).values():
            future.result(timeout=30)
        view = KafkaView({"bootstrap.servers": broker.bootstrap}, timeout=5)
        app = create_app(view, sample_interval=0.5)
        with TestClient(app, raise_server_exceptions=False) as c:
            c.broker = broker  # type: ignore[attr-defined]
            c.admin = admin  # type: ignore[attr-defined]
            yield c


def _topics(client: Any) -> set[str]:
    return set(client.admin.list_topics(timeout=10).topics)


def _check(response: Any) -> None:
    assert response.status_code < 500 or response.status_code == 502, \
        f"{response.request.method} {response.request.url}: {response.status_code}\n" \
        f"{response.text[:2000]}"
    # 502 is the cluster failing to answer; the broker is up, so none is expected here.
    assert response.status_code != 502, response.text[:2000]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(params=st.dictionaries(st.sampled_from(FIELDS), ODD, max_size=6),
       path=st.sampled_from(["/", "/topics", "/topics/kept", "/topics/kept/messages",
                             "/groups", "/groups/nobody", "/topics/missing/messages"]))
def test_pages_answer_any_query(client: TestClient, params: dict[str, str], path: str) -> None:
    _check(client.get(path, params=params))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(form=st.dictionaries(st.sampled_from(FIELDS), ODD, max_size=6),
       path=st.sampled_from(["/topics/kept/config", "/topics/kept/produce",
                             "/groups/nobody/reset", "/topics/missing/delete",
                             "/topics/missing/config"]))
# Found by hypothesis: a partition the topic does not have was a 502 (librdkafka's
# UNKNOWN_PARTITION taken for the cluster failing); it is the user's 404.
@example(form={"partition": " 7 "}, path="/topics/kept/produce")
def test_forms_answer_any_fields(client: TestClient, form: dict[str, str], path: str) -> None:
    _check(client.post(path, data=form, follow_redirects=False))
    assert "kept" in _topics(client)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(segment=st.text(min_size=1, max_size=60))
def test_any_topic_or_group_name_in_the_path(client: TestClient, segment: str) -> None:
    from urllib.parse import quote

    before = _topics(client)
    for path in (f"/topics/{quote(segment, safe='')}",
                 f"/topics/{quote(segment, safe='')}/messages",
                 f"/groups/{quote(segment, safe='')}"):
        _check(client.get(path))
    # Looking at a topic that does not exist must not create it (auto-create is on).
    assert _topics(client) == before
