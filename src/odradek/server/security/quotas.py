"""The broker's client quotas (issue 18): the configured quotas (a ``Document``: the
data directory's ``client-quotas.json``, or the cluster's znode, so every broker
enforces the same ones), a rate per budget (``security.quotas.WindowedRate``), and what
the handlers ask: how long a request's client is to be throttled.

How a throttle is applied is Kafka's (KIP-219): the response goes out at once with
``throttle_time_ms`` set, and the connection is then muted for that long (no request of
it is read; ``server.network.connection``). Per API, as Kafka's KafkaApis:

- Produce records the request's size against ``producer_byte_rate``;
- a consumer Fetch asks for at most one window of its quota, records the response's
  record bytes against ``consumer_byte_rate``, and when that puts it over the quota,
  gives them back and answers with no records (the client fetches them again after
  the throttle);
- every request but the exempt ones (follower fetches, SASL, ApiVersions, what the
  broker asks itself) records the time the broker spent on it against
  ``request_percentage`` (percent of one request thread: the event loop here; its
  throttle is at most one window). Departure: the request quota's throttle is decided
  from the time spent before the request, and this request's time is recorded after
  it (Kafka records first and decides after); the long-run rate is the same.

The budgets are ``security.quotas.QuotaBucket`` (a departure from Kafka's sampled rate,
explained there); ``quota.window.size.seconds`` is their depth.

With no quota configured (the default) none of this runs: ``active`` is False and the
handlers skip the calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from odradek.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Entity,
    QuotaBucket,
    QuotaFilter,
    SensorKey,
    describe_entity,
    resolve,
)
from odradek.server.config import BrokerConfig
from odradek.server.security.documents import Document

log = logging.getLogger(__name__)

DOCUMENT = "client-quotas"
EXEMPT_APIS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate
BUCKET_EXPIRY_MS = 3600_000  # Kafka drops a client's quota sensors after an idle hour
SWEEP_EVERY_MS = 60_000


@dataclass(frozen=True, slots=True)
class Limits:
    """The quotas that apply to one (user, client id): (budget key, bound) or None."""

    produce: tuple[SensorKey, float] | None
    fetch: tuple[SensorKey, float] | None
    request: tuple[SensorKey, float] | None


def _now_ms() -> float:
    return time.monotonic() * 1000


class ClientQuotas:
    def __init__(self, config: BrokerConfig, document: Document) -> None:
        self.window_s: int = config["quota.window.size.seconds"]
        self.document = document
        self.quotas: dict[Entity, dict[str, float]] = {}
        self.active = False  # any quota configured: the handlers' one check
        self.version = 0  # bumped on each change: sessions' cached limits are stale
        self._buckets: dict[tuple[str, SensorKey], QuotaBucket] = {}
        self._swept_ms = _now_ms()
        document.on_change = self._load
        self._load(document.value)

    # --- the configured quotas ---------------------------------------------------------------

    def _load(self, value: dict[str, Any]) -> None:
        quotas: dict[Entity, dict[str, float]] = {}
        for item in value.get("quotas", []):
            quotas[_entity_of(item)] = {k: float(v) for k, v in item["values"].items()}
        self.quotas = quotas
        self.active = bool(quotas)
        self.version += 1

    def describe(self, flt: QuotaFilter) -> list[tuple[Entity, dict[str, float]]]:
        return [(e, dict(v)) for e, v in sorted(self.quotas.items(), key=_sort_key)
                if flt.matches(e)]

    async def alter(self, changes: Iterable[tuple[Entity, dict[str, float | None]]]) -> None:
        """Set (a value) or remove (None) quota keys of entities, in one document change;
        an entity left with no key is dropped."""
        changes = list(changes)

        def change(value: dict[str, Any]) -> dict[str, Any]:
            quotas = {_entity_of(item): dict(item["values"]) for item in value.get("quotas", [])}
            for target, ops in changes:
                values = quotas.setdefault(target, {})
                for key, number in ops.items():
                    if number is None:
                        values.pop(key, None)
                    else:
                        values[key] = number
                if not values:
                    del quotas[target]
            return {"version": 1, "quotas": [
                {"entity": [list(p) for p in e], "values": v}
                for e, v in sorted(quotas.items(), key=_sort_key)]}

        await self.document.update(change)
        for target, ops in changes:
            log.info("client quotas of %s: %s", describe_entity(target), ", ".join(
                f"{k}={'(removed)' if v is None else _number(v)}" for k, v in ops.items()))

    # --- what applies to a request ---------------------------------------------------------------

    def limits(self, session: Any, client_id: str | None) -> Limits:
        """The quotas of the request's (user, client id), cached on its session until
        the quotas change or the client id does."""
        cached = session.quota_limits
        client = client_id or ""
        if cached is not None and cached[0] == self.version and cached[1] == client:
            return cached[2]
        principal = session.principal
        user = principal[5:] if principal.startswith("User:") else principal
        quotas = self.quotas
        limits = Limits(resolve(quotas, PRODUCER_BYTE_RATE, user, client),
                        resolve(quotas, CONSUMER_BYTE_RATE, user, client),
                        resolve(quotas, REQUEST_PERCENTAGE, user, client))
        session.quota_limits = (self.version, client, limits)
        return limits

    def _record(self, kind: str, limit: tuple[SensorKey, float], value: float) -> int:
        """Take ``value`` out of the budget of ``limit``; the throttle it earns."""
        now = _now_ms()
        bucket = self._buckets.get((kind, limit[0]))
        if bucket is None or bucket.rate != limit[1]:  # new, or its quota changed
            if now - self._swept_ms > SWEEP_EVERY_MS:
                self._swept_ms = now
                for k, b in list(self._buckets.items()):
                    if now - b.last_ms > BUCKET_EXPIRY_MS:
                        del self._buckets[k]
            bucket = self._buckets[(kind, limit[0])] = QuotaBucket(limit[1], self.window_s,
                                                                    now)
        return bucket.record(value, now)

    def produce(self, request: Any, size: int) -> int:
        """Record a produce request of ``size`` bytes; the throttle time it earns."""
        session = request.session
        if session is None:
            return 0
        limit = self.limits(session, request.client_id).produce
        return 0 if limit is None else self._record(PRODUCER_BYTE_RATE, limit, size)

    def fetch_max_bytes(self, request: Any) -> int | None:
        """The most a consumer fetch may return: one window of its quota (a fetch still
        returns one whole batch if that is larger, KIP-74); None: no bound."""
        session = request.session
        if session is None:
            return None
        limit = self.limits(session, request.client_id).fetch
        return None if limit is None else max(1, int(limit[1] * self.window_s))

    def fetch(self, request: Any, size: int) -> int:
        """Record a consumer fetch answer of ``size`` record bytes; the throttle time. A
        throttled answer carries no records, so its bytes are given back."""
        session = request.session
        if session is None:
            return 0
        limit = self.limits(session, request.client_id).fetch
        if limit is None:
            return 0
        throttle = self._record(CONSUMER_BYTE_RATE, limit, size)
        if throttle and size:
            self._record(CONSUMER_BYTE_RATE, limit, -size)
        return throttle

    def request_limit(self, request: Any) -> tuple[SensorKey, float] | None:
        """The request quota of a request that is not exempt from it."""
        session = request.session
        if session is None or request.api_key in EXEMPT_APIS:
            return None
        return self.limits(session, request.client_id).request

    def request_throttle(self, limit: tuple[SensorKey, float]) -> int:
        """The throttle the budget's use so far earns (at most one window, as Kafka)."""
        return min(self._record(REQUEST_PERCENTAGE, limit, 0), self.window_s * 1000)

    def record_request_time(self, limit: tuple[SensorKey, float], seconds: float) -> None:
        """Time the broker spent on a request, as percent-seconds of one thread."""
        self._record(REQUEST_PERCENTAGE, limit, seconds * 100)


def _entity_of(item: dict[str, Any]) -> Entity:
    """The entity of one stored quota (its [type, name] pairs, as JSON keeps them)."""
    return tuple(sorted((t, n) for t, n in item["entity"]))


def _sort_key(item: tuple[Entity, Any]) -> tuple[str, ...]:
    return tuple(f"{t}={'' if n is None else n}" for t, n in item[0])


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)

