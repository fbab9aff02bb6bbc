"""Kafka's client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546) with no I/O: what a
quota entity is, which configured quota applies to a (user, client id), Kafka's windowed
rate and the throttle time it asks for, and which entities a DescribeClientQuotas filter
matches.

- An **entity** is a user, a client id, or a user and a client id; each part either
  named or the *default* (Kafka's ``<default>``, null on the wire). A quota config is a
  set of keys on an entity: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes/s,
  integral) and ``request_percentage`` (percent of one request-handling thread, over
  the window).
- **Which quota applies** is Kafka's ``DefaultQuotaCallback``: for user U and client C,
  the first entity with a value for the key among (U, C), (U, default client), (U),
  (default user, C), (default user, default client), (default user), (C), (default
  client). The entity found also says what is **shared**: a quota set on user U is one
  budget for all of U's clients, a default-client quota is a budget per client id (the
  sensor's key names the actual user and/or client id, with "" for a part not in the
  entity).
- The **budget** is a token bucket (``QuotaBucket``) holding ``quota.window.size.seconds``
  of the quota; what a client spends beyond it earns it a **throttle time**: how long
  it must stay silent for the bucket to be out of debt.

Departure from Kafka, deliberate: Kafka measures a rate over ``quota.window.num`` (11)
samples of ``quota.window.size.seconds`` and throttles by ``(rate - quota) / quota *
window``. That rate counts a young window as ten seconds long, so a new (or returning)
client may send ten seconds of its quota at once, and simulated against a client that
always sends, it lets through 1.10x the quota in the long run (1.33x over the first
30 s). The bucket holds what an operator sets: 1.03x over 30 s, 1.02x over 60 s in the
same simulation (``tests/security/test_quotas.py``), one window of burst.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# Kafka's keys for user/client-id entities, and whether their values are integral.
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}
# Kafka has these too; not enforced here, so refused rather than stored and ignored.
UNSERVED_KEYS = {
    "controller_mutation_rate": "controller mutation quotas (KIP-599) are not enforced by "
                                "Odradek",
    "connection_creation_rate": "IP connection-rate quotas (KIP-612) are not enforced by "
                                "Odradek",
}
LONG_MAX = 2**63 - 1

# An entity: sorted (type, name) pairs, name None for the default of that type.
Entity = tuple[tuple[str, str | None], ...]
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaError(ValueError):
    """An entity, key, value or filter Kafka refuses with INVALID_REQUEST."""


def validate_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """An entity as sent in AlterClientQuotas, checked as Kafka's ClientQuotaControlManager
    checks it: known types, each once, no empty name; IP entities are refused (their
    only key, connection_creation_rate, is not enforced here)."""
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise QuotaError(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type == IP:
            raise QuotaError(UNSERVED_KEYS["connection_creation_rate"])
        if entity_type not in ENTITY_TYPES:
            raise QuotaError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise QuotaError(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    return tuple(sorted(seen.items()))


def validate_value(key: str, value: float) -> float:
    """A quota value as Kafka's ``validateQuotaKeyValue`` accepts it (> 0, integral for
    the byte rates, within a long)."""
    if key in UNSERVED_KEYS:
        raise QuotaError(UNSERVED_KEYS[key])
    integral = QUOTA_KEYS.get(key)
    if integral is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if not value > 0.0 or math.isinf(value):
        raise QuotaError(f"Quota {key} must be greater than 0")
    if integral:
        if value > LONG_MAX:
            raise QuotaError(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise QuotaError(f"{key} cannot be a fractional value.")
    return value


def describe_entity(item: Entity) -> str:
    """``user 'alice', client-id <default>``: for logs and the CLI."""
    return ", ".join(f"{t} {'<default>' if n is None else repr(n)}" for t, n in item)


# --- which quota applies -------------------------------------------------------------------

# A sensor's key: (user, client id) with "" for a part the matched entity does not have.
SensorKey = tuple[str, str]


def resolve(quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str,
            client_id: str) -> tuple[SensorKey, float] | None:
    """The quota on ``key`` that applies to ``user``'s client ``client_id`` and the key of
    the budget it is counted in, or None if no quota applies (Kafka's DefaultQuotaCallback
    order; see the module docstring)."""
    for candidate, shared in (
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ):
        values = quotas.get(candidate)
        if values is not None and key in values:
            return shared, values[key]
    return None


# --- DescribeClientQuotas filters ------------------------------------------------------------

@dataclass(frozen=True)
class QuotaFilter:
    """A DescribeClientQuotas filter: exact names (None: the default) per type, types
    that must be present with any name, and ``strict`` (no other types)."""

    exact: Mapping[str, str | None]
    specified: frozenset[str]
    strict: bool

    @classmethod
    def from_components(cls, components: Iterable[tuple[str, int, str | None]],
                        strict: bool) -> QuotaFilter:
        """From (entity type, match type, match) triples, refused as Kafka's
        ClientQuotasImage.describe refuses them."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for entity_type, match_type, match in components:
            if not entity_type:
                raise QuotaError("Invalid empty entity type.")
            if entity_type in exact or entity_type in specified:
                raise QuotaError(f"Entity type {entity_type} cannot appear more than once "
                                 "in the filter.")
            if entity_type not in (IP, USER, CLIENT_ID):
                raise QuotaError(f"Unsupported entity type {entity_type}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise QuotaError("Request specified MATCH_TYPE_EXACT, but set match "
                                     "string to null.")
                exact[entity_type] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise QuotaError("Request specified MATCH_TYPE_DEFAULT, but also "
                                     "specified a match string.")
                exact[entity_type] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise QuotaError("Request specified MATCH_TYPE_SPECIFIED, but also "
                                     "specified a match string.")
                specified.add(entity_type)
            else:
                raise QuotaError(f"Unknown match type {match_type}")
        has_ip = IP in exact or IP in specified
        if has_ip and any(t in exact or t in specified for t in (USER, CLIENT_ID)):
            raise QuotaError("Invalid entity filter component combination. IP filter "
                             "component should not be used with user or clientId filter "
                             "component.")
        return cls(exact, frozenset(specified), strict)

    def matches(self, item: Entity) -> bool:
        parts = dict(item)
        if self.strict and len(parts) != len(self.exact) + len(self.specified):
            return False
        for entity_type, name in self.exact.items():
            if entity_type not in parts or parts[entity_type] != name:
                return False
        return all(t in parts for t in self.specified)


# --- the budget ------------------------------------------------------------------------------

class QuotaBucket:
    """A quota's budget: a token bucket filled at ``rate`` per second up to ``burst``
    (``rate`` times ``quota.window.size.seconds``). What a request costs is taken out,
    even beyond what is there; a bucket in debt earns its client the time it takes to
    refill to zero. Times are milliseconds (monotonic)."""

    __slots__ = ("burst", "last_ms", "rate", "tokens")

    def __init__(self, rate: float, burst_s: float, now_ms: float) -> None:
        self.rate = rate
        self.burst = rate * burst_s
        self.tokens = self.burst
        self.last_ms = now_ms

    def record(self, value: float, now_ms: float) -> int:
        """Take ``value`` out (a negative value gives it back); the throttle in ms."""
        tokens = self.tokens + (now_ms - self.last_ms) / 1000 * self.rate
        if tokens > self.burst:
            tokens = self.burst
        self.tokens = tokens - value
        self.last_ms = now_ms
        return self.throttle_ms()

    def throttle_ms(self) -> int:
        """How long the client must stay silent for the bucket to be out of debt."""
        return 0 if self.tokens >= 0 else math.ceil(-self.tokens / self.rate * 1000)
