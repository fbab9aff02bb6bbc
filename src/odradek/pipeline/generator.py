"""Realistic web activity and service metrics, simulated from a seed and produced as JSON.

The simulation: users arrive in sessions (a Poisson process); a session is a walk of page
views, clicks and searches separated by think times; every action calls one or more
backend services (frontend, search, catalog, cart, checkout, auth), each call has a
log-normal latency and may fail with a 5xx; a failed call the user waited on shows as an
`error` activity event. One service has an incident (more errors, slower) for a stretch of
the run, so the aggregates have something to show.

Two topics get the records, as a web site's collectors would send them:
- `activity`: one JSON object per user event, keyed by user id (a user's events stay in
  order in one partition);
- `metrics`: one JSON object per backend request, keyed by service.

Event time (`ts`, ISO-8601 UTC with milliseconds) is when the thing happened; each record
reaches the broker a little later (network and batching delay, up to `max_delay_s`), so
the topics are out of event-time order, as real collected logs are. The Kafka timestamp
of a record is its arrival time.

A bounded run ends with one `heartbeat` record per partition stamped well after the last
event: a stream processor's watermark only moves when records arrive, and the heartbeat
moves it past the last window so every window is closed and emitted. The jobs drop
heartbeats before aggregating.

Same seed and config, same events: tests compute the expected aggregates from the list
this module returns, independently of Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ACTIVITY_TOPIC = "activity"
METRICS_TOPIC = "metrics"
STATS_TOPIC = "activity-stats"
HEARTBEAT = "heartbeat"

# Backend services: (median latency ms, log-normal sigma, probability of a 5xx).
SERVICES: dict[str, tuple[float, float, float]] = {
    "frontend": (35.0, 0.45, 0.004),
    "search": (80.0, 0.6, 0.01),
    "catalog": (45.0, 0.5, 0.005),
    "cart": (30.0, 0.4, 0.006),
    "checkout": (120.0, 0.55, 0.012),
    "auth": (25.0, 0.35, 0.003),
}
HOSTS_PER_SERVICE = 3
PRODUCTS = 60
DEVICES = (("desktop", 0.55), ("mobile", 0.38), ("tablet", 0.07))
COUNTRIES = (("US", 0.34), ("DE", 0.12), ("GB", 0.1), ("FR", 0.09), ("IN", 0.09),
             ("BR", 0.08), ("JP", 0.07), ("CA", 0.06), ("AU", 0.05))
SEARCH_TERMS = ("boots", "rain jacket", "usb-c cable", "espresso", "desk lamp", "headphones",
                "backpack", "yoga mat", "kettle", "notebook", "running shoes", "monitor")
CLICK_TARGETS = ("nav", "recommendation", "add-to-cart", "product-image", "filter", "banner")
THINK_TIME_MEAN_S = 12.0  # between two actions of a session
ACTIONS_MEAN = 7.0  # actions per session (geometric)
INCIDENT_SERVICE = "checkout"
INCIDENT_ERROR_RATE = 0.25  # probability of a 5xx during the incident
INCIDENT_SLOWDOWN = 3.0  # latency factor during the incident
HEARTBEAT_AFTER_S = 600.0  # heartbeat event time after the end: past any window + watermark


class GeneratorError(ValueError):
    """A generator setting is out of range."""


@dataclass(frozen=True)
class GeneratorConfig:
    """What to simulate. `start_ms` is the event time of the beginning (ms since the epoch,
    default: `duration_s` before now, so the data looks fresh)."""

    seed: int = 7
    users: int = 400
    duration_s: float = 300.0  # simulated time covered by the events
    sessions_per_s: float = 1.5  # session arrival rate (simulated time)
    max_delay_s: float = 15.0  # an event reaches the broker at most this late
    start_ms: int | None = None

    def check(self) -> None:
        if self.users < 1:
            raise GeneratorError(f"users must be at least 1, got {self.users}")
        if not 0 < self.duration_s <= 7 * 86400:
            raise GeneratorError(f"duration must be between 0 and 7 days, got {self.duration_s}s")
        if not 0 < self.sessions_per_s <= 10_000:
            raise GeneratorError(f"sessions per second must be in (0, 10000], got "
                                 f"{self.sessions_per_s}")
        if not 0 <= self.max_delay_s <= 60:
            raise GeneratorError(f"max delay must be 0 to 60 s, got {self.max_delay_s}")


@dataclass(frozen=True)
class Record:
    """One record to produce: `arrival_ms` orders them and is the Kafka timestamp."""

    topic: str
    key: str
    value: dict[str, Any]
    arrival_ms: int

    def encoded(self) -> bytes:
        return json.dumps(self.value, separators=(",", ":")).encode()


@dataclass
class Generated:
    """A simulated run: the events by topic (without heartbeats) and the records in the
    order they reach the broker."""

    config: GeneratorConfig
    start_ms: int
    end_ms: int
    activity: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


def iso(ms: int) -> str:
    """Milliseconds since the epoch -> `2026-11-22T04:07:01.123Z`."""
    stamp = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_iso(text: str) -> int:
    """`2026-11-22T04:07:01.123Z` -> milliseconds since the epoch."""
    stamp = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    return int(stamp.timestamp() * 1000 + 0.5)


def _pick(rng: random.Random, weighted: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([w[0] for w in weighted], [w[1] for w in weighted])[0]


class _Simulation:
    def __init__(self, config: GeneratorConfig, start_ms: int) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.start_ms = start_ms
        self.end_ms = start_ms + int(config.duration_s * 1000)
        # The incident covers the middle fifth of the run.
        span = self.end_ms - self.start_ms
        self.incident = (self.start_ms + span * 2 // 5, self.start_ms + span * 3 // 5)
        self.out = Generated(config, self.start_ms, self.end_ms)
        # Users come back: a Zipf-like weight makes some users far more active than others.
        self.user_weights = [1 / (i + 1) ** 0.8 for i in range(config.users)]
        self.users = [f"u{i:05d}" for i in range(config.users)]

    def _id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _arrival(self, ms: int) -> int:
        # Most records arrive within a second; a few (mobile clients on bad networks) late.
        delay = min(self.rng.expovariate(1 / 0.6), self.config.max_delay_s)
        if self.rng.random() < 0.03:
            delay = self.rng.uniform(0, self.config.max_delay_s)
        return ms + int(delay * 1000)

    def _call(self, service: str, endpoint: str, ms: int) -> dict[str, Any]:
        """One backend request: a `metrics` record."""
        median, sigma, error_p = SERVICES[service]
        if service == INCIDENT_SERVICE and self.incident[0] <= ms < self.incident[1]:
            median *= INCIDENT_SLOWDOWN
            error_p = INCIDENT_ERROR_RATE
        latency = round(self.rng.lognormvariate(math.log(median), sigma), 2)
        status = self.rng.choice((500, 502, 503)) if self.rng.random() < error_p else (
            304 if self.rng.random() < 0.05 else 200)
        host = f"{service}-{self.rng.randrange(HOSTS_PER_SERVICE)}"
        record = {"ts": iso(ms), "service": service, "host": host, "endpoint": endpoint,
                  "status": status, "latency_ms": latency}
        self.out.metrics.append(record)
        self.out.records.append(Record(METRICS_TOPIC, service, record, self._arrival(ms)))
        return record

    def _event(self, kind: str, ms: int, session: dict[str, Any], **fields: Any) -> None:
        event = {"event_id": self._id(), "type": kind, "ts": iso(ms),
                 "user_id": session["user_id"], "session_id": session["session_id"],
                 "device": session["device"], "country": session["country"], **fields}
        self.out.activity.append(event)
        self.out.records.append(Record(ACTIVITY_TOPIC, session["user_id"], event,
                                       self._arrival(ms)))

    def _action(self, ms: int, session: dict[str, Any], first: bool) -> None:
        rng = self.rng
        calls: list[tuple[str, str]]
        roll = rng.random()
        if first or roll < 0.58:
            products = [f"/products/{p}" for p in self._products(3)]
            page = "/" if first else rng.choice(
                ["/", "/cart", "/account", "/help", "/checkout", *products])
            calls = [("frontend", "GET " + page)]
            if page.startswith("/products/"):
                calls.append(("catalog", "GET /items"))
            elif page == "/cart":
                calls.append(("cart", "GET /cart"))
            elif page == "/checkout":
                calls.append(("checkout", "POST /orders"))
            elif page == "/account":
                calls.append(("auth", "GET /session"))
            results = [self._call(s, e, ms + i * 3) for i, (s, e) in enumerate(calls)]
            failed = [r for r in results if r["status"] >= 500]
            load = round(sum(r["latency_ms"] for r in results) + rng.uniform(5, 40), 2)
            session["page"] = page
            self._event("page_view", ms, session, page=page, referrer=session.get("last"),
                        latency_ms=load)
            session["last"] = page
        elif roll < 0.83:
            target = rng.choice(CLICK_TARGETS)
            calls = [("cart", "POST /cart/items")] if target == "add-to-cart" else (
                [("catalog", "GET /recommendations")] if target == "recommendation" else [])
            results = [self._call(s, e, ms) for s, e in calls]
            failed = [r for r in results if r["status"] >= 500]
            self._event("click", ms, session, page=session.get("page", "/"), element=target,
                        latency_ms=round(sum(r["latency_ms"] for r in results)
                                         + rng.uniform(1, 15), 2))
        else:
            term = rng.choice(SEARCH_TERMS)
            result = self._call("search", "GET /search", ms)
            failed = [result] if result["status"] >= 500 else []
            hits = 0 if failed else max(int(rng.gauss(40, 25)), 0)
            self._event("search", ms, session, page="/search", query=term, results=hits,
                        latency_ms=result["latency_ms"])
        for bad in failed:  # what the user saw of a failed call
            self._event("error", ms + 1, session, page=session.get("page", "/"),
                        error=f"HTTP {bad['status']} from {bad['service']}",
                        service=bad["service"], latency_ms=bad["latency_ms"])

    def _products(self, n: int) -> list[int]:
        return [min(int(self.rng.paretovariate(1.2)), PRODUCTS) for _ in range(n)]

    def run(self) -> Generated:
        rng = self.rng
        t = float(self.start_ms)
        while True:
            t += rng.expovariate(self.config.sessions_per_s) * 1000
            if t >= self.end_ms:
                break
            session = {
                "user_id": rng.choices(self.users, self.user_weights)[0],
                "session_id": self._id()[:18],
                "device": _pick(rng, DEVICES),
                "country": _pick(rng, COUNTRIES),
            }
            ms = int(t)
            self._call("auth", "POST /session", ms)  # a session starts with a login check
            actions = max(1, int(rng.expovariate(1 / ACTIONS_MEAN)) + 1)
            for i in range(actions):
                if ms >= self.end_ms:
                    break
                self._action(ms, session, first=i == 0)
                ms += int(rng.expovariate(1 / THINK_TIME_MEAN_S) * 1000) + 200
        # Arrival order; equal arrivals keep the order they were generated in.
        self.out.records.sort(key=lambda r: r.arrival_ms)
        return self.out


def generate(config: GeneratorConfig) -> Generated:
    """Simulate a run: deterministic for a given config (and start time)."""
    config.check()
    start = config.start_ms
    if start is None:
        now = int(time.time() * 1000)
        start = now - int(config.duration_s * 1000)
        start -= start % 60_000  # windows line up with whole minutes of the run
    return _Simulation(config, start).run()


def heartbeats(generated: Generated, partitions: dict[str, int]) -> list[tuple[str, int, bytes]]:
    """(topic, partition, value) of the end-of-run heartbeats: one per partition, stamped
    well after the last event so the jobs' watermarks pass every window."""
    ts = iso(generated.end_ms + int(HEARTBEAT_AFTER_S * 1000))
    out: list[tuple[str, int, bytes]] = []
    for topic, count in sorted(partitions.items()):
        value = json.dumps({"type": HEARTBEAT, "ts": ts}).encode()
        out.extend((topic, p, value) for p in range(count))
    return out


def ensure_topics(bootstrap: str, partitions: int = 3, timeout_s: float = 30.0,
                  topics: Iterable[str] = (ACTIVITY_TOPIC, METRICS_TOPIC, STATS_TOPIC),
                  replication_factor: int = -1) -> dict[str, int]:
    """Create the pipeline's topics where missing; their partition counts.

    `replication_factor` -1 takes the brokers' `default.replication.factor` (KIP-464):
    1 on a single broker, what the operator chose on a cluster. (It was 1 always, which
    on a cluster left each partition on one broker, lost with it.)"""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise GeneratorError(f"cannot reach the broker(s) {bootstrap}: {exc}") from None
    wanted = list(topics)
    missing = [t for t in wanted if t not in meta.topics]
    if missing:
        futures = admin.create_topics(
            [NewTopic(t, partitions, replication_factor) for t in missing],
            operation_timeout=timeout_s)
        for name, future in futures.items():
            try:
                future.result(timeout=timeout_s)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):  # created meanwhile: fine
                    raise GeneratorError(f"cannot create topic {name}: {exc}") from None
        meta = admin.list_topics(timeout=timeout_s)
    return {t: len(meta.topics[t].partitions) for t in wanted}


def produce(bootstrap: str, generated: Generated, *, speedup: float | None = None,
            end_with_heartbeats: bool = True, timeout_s: float = 120.0,
            progress: Callable[[int], None] | None = None) -> int:
    """Produce a run's records in arrival order (then the heartbeats): as fast as the broker
    takes them, or paced at `speedup` times real time. Returns the records produced; raises
    if any was not acknowledged."""
    if speedup is not None and speedup <= 0:
        raise GeneratorError(f"speedup must be positive, got {speedup}")
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,  # retries never duplicate an event
        "linger.ms": 20,
        "compression.type": "lz4",
    })
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}: {err}")

    def send(topic: str, value: bytes, key: bytes | None, ts: int | None,
             partition: int | None = None) -> None:
        kwargs: dict[str, Any] = {"on_delivery": delivered}
        if ts is not None:
            kwargs["timestamp"] = ts
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)

    began = time.monotonic()
    first = generated.records[0].arrival_ms if generated.records else 0
    count = 0
    for record in generated.records:
        if speedup is not None:
            due = (record.arrival_ms - first) / 1000 / speedup
            wait = due - (time.monotonic() - began)
            if wait > 0:
                producer.poll(wait)
        send(record.topic, record.encoded(), record.key.encode(), record.arrival_ms)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
            if progress is not None:
                progress(count)
    # Heartbeats only after every event is acknowledged: a micro-batch that sees one then
    # sees every event before it, so no event can be late behind a heartbeat.
    if producer.flush(timeout_s) != 0:
        raise GeneratorError(f"records not acknowledged by {bootstrap} within {timeout_s:g}s")
    if end_with_heartbeats:
        meta = producer.list_topics(timeout=timeout_s)
        counts = {t: len(meta.topics[t].partitions) for t in (ACTIVITY_TOPIC, METRICS_TOPIC)
                  if t in meta.topics}
        for topic, partition, value in heartbeats(generated, counts):
            send(topic, value, None, None, partition)
            count += 1
        if producer.flush(timeout_s) != 0:
            raise GeneratorError(f"heartbeats not acknowledged by {bootstrap}")
    if errors:
        raise GeneratorError(f"{len(errors)} records were refused, first: {errors[0]}")
    return count
