"""Client quotas with no I/O (``security.quotas``): which configured quota applies to a
(user, client id) and what budget it is counted in, Kafka's validation of entities,
values and DescribeClientQuotas filters, and the budget's arithmetic."""

from __future__ import annotations

import pytest

from odradek.security.quotas import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    USER,
    QuotaBucket,
    QuotaError,
    QuotaFilter,
    resolve,
    validate_entity,
    validate_value,
)

KEY = PRODUCER_BYTE_RATE


def quota(value: float, user: object = ..., client: object = ...):
    parts = []
    if client is not ...:
        parts.append((CLIENT_ID, client))
    if user is not ...:
        parts.append((USER, user))
    return tuple(parts), {KEY: value}


def test_the_most_specific_quota_applies_in_kafkas_order() -> None:
    """Kafka's DefaultQuotaCallback order, each level removed in turn, and the budget
    each one means: shared by a user's clients for a user quota, per client id for a
    default-client one."""
    levels = [
        (quota(1, "alice", "app"), ("alice", "app")),
        (quota(2, "alice", None), ("alice", "app")),
        (quota(3, "alice"), ("alice", "")),
        (quota(4, None, "app"), ("alice", "app")),
        (quota(5, None, None), ("alice", "app")),
        (quota(6, None), ("alice", "")),
        (quota(7, client="app"), ("", "app")),
        (quota(8, client=None), ("", "app")),
    ]
    configured = dict(q for q, _ in levels)
    for (entity, values), budget in levels:
        assert resolve(configured, KEY, "alice", "app") == (budget, values[KEY])
        del configured[entity]
    assert resolve(configured, KEY, "alice", "app") is None


def test_a_quota_on_another_key_or_entity_does_not_apply() -> None:
    configured = dict([quota(1, "bob"), quota(2, client="other")])
    configured[((USER, "alice"),)] = {"consumer_byte_rate": 10.0}
    assert resolve(configured, KEY, "alice", "app") is None
    assert resolve(configured, "consumer_byte_rate", "alice", "app") == (("alice", ""), 10.0)


def test_entities_and_values_are_checked_as_kafka_checks_them() -> None:
    assert validate_entity([(USER, "alice"), (CLIENT_ID, None)]) == (
        (CLIENT_ID, None), (USER, "alice"))
    for pairs, reason in [
        ([], "Invalid empty client quota entity"),
        ([(USER, "a"), (USER, "b")], "duplicate entity entry user"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([(USER, "")], "Empty user not supported"),
        ([("ip", "127.0.0.1")], "KIP-612"),
    ]:
        with pytest.raises(QuotaError, match=reason):
            validate_entity(pairs)
    assert validate_value("request_percentage", 12.5) == 12.5
    assert validate_value(KEY, 1024.0) == 1024.0
    for key, value, reason in [
        (KEY, 0.0, "must be greater than 0"),
        (KEY, -5.0, "must be greater than 0"),
        (KEY, 1.5, "cannot be a fractional value"),
        (KEY, 2.0**64, "too large for a LONG"),
        ("bytes_per_second", 1.0, "Invalid configuration key bytes_per_second"),
        ("controller_mutation_rate", 1.0, "KIP-599"),
    ]:
        with pytest.raises(QuotaError, match=reason):
            validate_value(key, value)


def test_describe_filters_match_as_kafkas() -> None:
    alice = ((USER, "alice"),)
    default_user = ((USER, None),)
    alice_app = ((CLIENT_ID, "app"), (USER, "alice"))
    app = ((CLIENT_ID, "app"),)
    everything = [alice, default_user, alice_app, app]

    def found(components, strict=False):
        flt = QuotaFilter.from_components(components, strict)
        return [e for e in everything if flt.matches(e)]

    assert found([]) == everything
    assert found([], strict=True) == []
    assert found([(USER, MATCH_EXACT, "alice")]) == [alice, alice_app]
    assert found([(USER, MATCH_EXACT, "alice")], strict=True) == [alice]
    assert found([(USER, MATCH_DEFAULT, None)]) == [default_user]
    assert found([(USER, MATCH_SPECIFIED, None)]) == [alice, default_user, alice_app]
    assert found([(CLIENT_ID, MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)],
                 strict=True) == [alice_app]
    for components, reason in [
        ([(USER, MATCH_EXACT, None)], "MATCH_TYPE_EXACT, but set match string to null"),
        ([(USER, MATCH_DEFAULT, "x")], "MATCH_TYPE_DEFAULT, but also specified"),
        ([(USER, MATCH_SPECIFIED, "x")], "MATCH_TYPE_SPECIFIED, but also specified"),
        ([(USER, 7, None)], "Unknown match type 7"),
        ([(USER, MATCH_SPECIFIED, None), (USER, MATCH_DEFAULT, None)],
         "cannot appear more than once"),
        ([("", MATCH_SPECIFIED, None)], "Invalid empty entity type"),
        ([("group", MATCH_SPECIFIED, None)], "Unsupported entity type group"),
        ([("ip", MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)],
         "IP filter component should not be used"),
    ]:
        with pytest.raises(QuotaError, match=reason):
            QuotaFilter.from_components(components, False)


def test_a_bucket_allows_one_window_at_once_then_throttles_by_the_debt() -> None:
    bucket = QuotaBucket(1000.0, 1, now_ms=0.0)
    assert bucket.record(1000, 0.0) == 0  # a full window at once: allowed
    assert bucket.record(500, 0.0) == 500  # 500 bytes of debt at 1000 B/s
    assert bucket.record(0, 250.0) == 250  # a quarter second later, half paid back
    assert bucket.record(-500, 250.0) == 0  # given back (a throttled fetch's bytes)
    assert bucket.record(0, 10_000.0) == 0 and bucket.tokens == 1000  # never above burst


@pytest.mark.parametrize("request_bytes", [16_000, 100_000, 1_000_000])
def test_a_client_that_always_sends_is_held_to_its_quota(request_bytes: int) -> None:
    """Simulated: a client sends again 1 ms after each answer, waiting out every throttle.
    Over 30 s it gets the quota plus one window of burst and one request's overshoot;
    over a minute, closer still (Kafka's sampled rate lets 1.10x through in the long run
    and 1.33x over the first 30 s in the same simulation)."""
    rate = 500_000.0

    def sent_per_quota(duration_ms: float) -> float:
        bucket = QuotaBucket(rate, 1, now_ms=0.0)
        now, sent = 0.0, 0
        while now < duration_ms:
            sent += request_bytes
            now += bucket.record(request_bytes, now) + 1
        return sent / (duration_ms / 1000) / rate

    assert 0.99 < sent_per_quota(30_000) <= 1.07
    assert 0.99 < sent_per_quota(60_000) <= 1.04
