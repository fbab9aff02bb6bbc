"""Prometheus metrics with Kafka's names (issue 19), ``/healthz`` and ``/readyz``.

With ``metrics.listen=HOST:PORT`` the broker serves, on a thread of its own (the
``prometheus_client`` library's WSGI exposition on the standard library's server):

- ``/metrics``: the Prometheus text format, named as the Prometheus JMX exporter's
  Kafka rules render Kafka's JMX metrics (``kafka_server_brokertopicmetrics_messagesin_total
  {topic=...}``, ``kafka_network_requestmetrics_requests_total{request=...,version=...}``,
  ...), and
  consumer lag as kafka-exporter names it (``kafka_consumergroup_lag``); docs/operations.md
  lists them with their Kafka counterparts;
- ``/healthz``: 200 while the process serves HTTP at all;
- ``/readyz``: 200 once the broker serves (logs recovered, listeners open; in a cluster
  registered, and in the ISR of every partition it holds), else 503 with the reason.

What the hot paths do is count: ``BrokerStats`` holds plain integers that the produce and
fetch handlers and the connections add to on the event loop's thread, per partition of
a request and per request - never per record: BrokerTopicMetrics, RequestMetrics (each
request's time split into queue, local, remote and send time: ``RequestTiming`` says
what each means here), connections per listener, and the replica manager's ISR shrinks
and expansions. Log flushes' fsync times come from the storage layer through a plain
callback (``Log.flush_timer``), on whichever thread flushes (``FlushTimes`` locks).
Everything else (log sizes and offsets,
connections, purgatory, groups, lag, the cluster's partition health) is read when
Prometheus scrapes: the scrape's thread asks the event loop for a snapshot and waits
for it, so no broker state is read from two threads. Without ``metrics.listen`` the
broker has no ``BrokerStats`` and the handlers' only cost is one ``is None`` test.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import ThreadingWSGIServer

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

# Request time buckets, milliseconds (Kafka's RequestMetrics times, as histograms; the
# lowest ones for queue and local times, which are often tens of microseconds).
TIME_BUCKETS_MS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0,
                   500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0)
SNAPSHOT_TIMEOUT_S = 5.0



class TopicStats:
    """One topic's BrokerTopicMetrics counters."""

    __slots__ = ("bytes_in", "bytes_out", "failed_fetch", "failed_produce", "fetches",
                 "messages_in", "produces")

    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.bytes_out = 0
        self.produces = self.failed_produce = self.fetches = self.failed_fetch = 0


class Histogram:
    """A histogram over TIME_BUCKETS_MS: non-cumulative bucket counts and a sum."""

    __slots__ = ("buckets", "sum_ms")

    def __init__(self) -> None:
        self.sum_ms = 0.0
        self.buckets = [0] * (len(TIME_BUCKETS_MS) + 1)

    def add(self, ms: float) -> None:
        self.sum_ms += ms
        self.buckets[bisect.bisect_left(TIME_BUCKETS_MS, ms)] += 1

    def copy(self) -> tuple[float, list[int]]:
        return self.sum_ms, list(self.buckets)


class FlushTimes(Histogram):
    """Log flushes' fsync times (Kafka's LogFlushStats LogFlushRateAndTimeMs), added by
    whichever thread flushes (the duties thread, group commit's, the loop's at close):
    the storage layer calls ``observe`` through ``Log.flush_timer``; hence the lock."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self.lock:
            self.add(seconds * 1000)

    def copy(self) -> tuple[float, list[int]]:
        with self.lock:
            return super().copy()


# RequestMetrics' time split, in the order RequestStats.times holds it (the metric name
# is kafka_network_requestmetrics_<name>).
REQUEST_TIMES = ("requestqueuetimems", "localtimems", "remotetimems",
                 "responsesendtimems", "totaltimems")


# The moments of one request in progress (``time.perf_counter`` seconds), kept by its
# connection while metrics are on: a list ``[api_key, read, start, local, ready, sent]``
# indexed by the T_ names below. A list rather than an object with named fields: it is
# made and filled on every request's path, and there an instance's ``__init__`` (a
# Python call) cost measurably more with the caches cold (see BrokerStats.request_done).
#
# ``BrokerStats.fold`` splits its time as Kafka's RequestMetrics does, in Odradek's
# asyncio terms:
#
# - queue (RequestQueueTimeMs): from the frame having been read off the socket to the
#   handler starting: decoding it, and waiting behind the connection's earlier
#   requests (answered one at a time, in order). Departure: Kafka stops reading a
#   connection while a request is in flight, so there such a wait is spent in the
#   socket's buffer and counts nowhere;
# - local (LocalTimeMs): the handler's own steps, the CPU the broker spent on it;
# - remote (RemoteTimeMs): the rest of the handler's time, while it waited for
#   something other than itself: a long poll parked in the fetch purgatory (the
#   re-read an append makes when it wakes one included), an acks=all produce waiting
#   for its followers, a flush.messages fsync on its thread, a JoinGroup waiting for
#   the group;
# - send (ResponseSendTimeMs): from the response being ready to its last bytes handed
#   to the socket (or the transport's buffer) with that buffer back under its
#   high-water mark: a slow reader's drain;
# - total (TotalTimeMs): from read to sent, the sum of the four.
RequestTiming = list[float]  # T_API .. T_VERSION
T_API = 0  # the request's API key
T_READ = 1  # the frame was read
T_START = 2  # the handler started
T_LOCAL = 3  # seconds in the handler's own steps
T_READY = 4  # the response was ready (0: not yet)
T_SENT = 5  # the response was sent (drained)
T_VERSION = 6  # the request's API version


def new_timing(api_key: int, read: float, start: float, version: int = 0) -> RequestTiming:
    """A RequestTiming for a request read at ``read`` whose handler started at ``start``
    (the hot paths write the list out instead of calling this)."""
    return [api_key, read, start, 0.0, 0.0, 0.0, version]


class RequestStats:
    """One API's request count (in all, and by version: Kafka's RequestsPerSec has a
    version tag, which KIP-896 tells operators to watch before old versions go) and its
    time split's histograms (REQUEST_TIMES)."""

    __slots__ = ("count", "times", "versions")

    def __init__(self) -> None:
        self.count = 0
        self.versions: dict[int, int] = {}
        self.times = [Histogram() for _ in REQUEST_TIMES]


# Requests done before their times go into the histograms (BrokerStats.request_done).
FOLD_EVERY = 1024


class BrokerStats:
    """The counters the hot paths add to (on the event loop's thread only)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.requests: dict[int, RequestStats] = {}
        self._done: list[RequestTiming] = []  # not yet in ``requests`` (see request_done)
        self.connections_created: dict[str, int] = {}
        # A cluster's ISR changes of partitions this broker leads (server.replication).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.log_flush = FlushTimes()  # the only one added to off the loop's thread

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def request_done(self, timing: RequestTiming, sent: float) -> None:
        """Count a request whose response was sent (drained) at ``sent``.

        Kept as it is, and put into the histograms ``FOLD_EVERY`` requests at a time
        (or when a scrape reads them: ``fold``). Why: between a consumer's fetches the
        broker's caches go cold (the client and everything else on the machine run
        there), and the histogram code - bisect, zip, five histograms' lists - met
        cold costs ~30 us per request where warm it costs 2 (measured; the
        ``paired-fetch`` load of bench/metrics_bench.py showed it as 5% of a fetch's
        CPU). An append is what the request pays now; the folding runs warm."""
        timing[T_SENT] = sent
        done = self._done
        done.append(timing)
        if len(done) >= FOLD_EVERY:
            self.fold()

    def fold(self) -> None:
        """Put the requests done since the last fold into ``requests``' histograms."""
        done, self._done = self._done, []
        requests = self.requests
        for api_key, read, start, local, ready, sent, version in done:
            key = cast(int, api_key)  # T_API holds the int API key (in a list of floats)
            stats = requests.get(key)
            if stats is None:
                stats = requests[key] = RequestStats()
            stats.count += 1
            versions = stats.versions
            v = cast(int, version)
            versions[v] = versions.get(v, 0) + 1
            ready = ready or sent
            handler_s = max(ready - start, 0.0)
            local_s = min(local, handler_s)
            # In REQUEST_TIMES' order, ms.
            for histogram, ms in zip(stats.times, (
                    max(start - read, 0.0) * 1000, local_s * 1000,
                    (handler_s - local_s) * 1000, max(sent - ready, 0.0) * 1000,
                    max(sent - read, 0.0) * 1000), strict=True):
                histogram.add(ms)

    def connection_created(self, listener: str) -> None:
        self.connections_created[listener] = self.connections_created.get(listener, 0) + 1


@dataclass
class Snapshot:
    """What a scrape reports, taken on the event loop's thread."""

    topics: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # API key -> (count by version, [(sum, buckets) of each of REQUEST_TIMES])
    requests: dict[int, tuple[dict[int, int], list[tuple[float, list[int]]]]] = field(
        default_factory=dict)
    connections_created: dict[str, int] = field(default_factory=dict)
    connections: dict[str, int] = field(default_factory=dict)
    logs: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    purgatory_fetch: int = 0
    purgatory_produce: int = 0  # acks=all appends waiting (a cluster's)
    groups: int = 0
    transactions: int = 0
    lag: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    # The topology's replica-manager and controller counts (None: a single node has none).
    health: dict[str, int] | None = None
    isr_changes: tuple[int, int] = (0, 0)  # shrinks, expands
    log_flush: tuple[float, list[int]] | None = None  # (sum, buckets) of fsync times
    ready: str | None = "starting"  # None: ready; else why not
    # Tiered storage (KIP-405, KIP-963): (topic, partition, remote bytes, bytes waiting
    # to be copied) of each tiered log, and the broker's copied and fetched bytes and
    # failed copy passes and remote reads.
    tiered: list[tuple[str, int, int, int]] = field(default_factory=list)
    tiered_totals: tuple[int, int, int, int] | None = None


def take_snapshot(broker: Broker) -> Snapshot:
    """Read everything a scrape reports (call on the event loop's thread)."""
    snap = Snapshot()
    stats = broker.stats
    if stats is not None:
        stats.fold()
        snap.topics = {t: (s.messages_in, s.bytes_in, s.bytes_out, s.produces,
                           s.failed_produce, s.fetches, s.failed_fetch)
                       for t, s in stats.topics.items()}
        snap.requests = {k: (dict(s.versions), [h.copy() for h in s.times])
                         for k, s in stats.requests.items()}
        snap.connections_created = dict(stats.connections_created)
        snap.isr_changes = (stats.isr_shrinks, stats.isr_expands)
        snap.log_flush = stats.log_flush.copy()
    for conn in broker.connections():
        name = conn.listener.name
        snap.connections[name] = snap.connections.get(name, 0) + 1
    logs = broker.logs
    if logs is not None:
        for (topic, partition), lg in list(logs.logs.items()):
            snap.logs.append((topic, partition, lg.size_bytes, lg.log_start_offset,
                              lg.log_end_offset))
    tiered = broker.tiered
    if tiered is not None and logs is not None:
        for (topic, partition), lg in list(logs.logs.items()):
            if lg.tiered:
                snap.tiered.append((topic, partition,
                                    tiered.manager.remote_size(topic, partition),
                                    lg.pending_upload_bytes()))
        snap.tiered_totals = (tiered.manager.copied_bytes, tiered.reader.fetched_bytes,
                              tiered.manager.failures, tiered.reader.errors)
    snap.purgatory_fetch = broker.purgatory.size()
    if broker.groups is not None:
        for coordinator in list(broker.groups.coordinators.values()):
            snap.groups += len(coordinator.groups) + len(coordinator.consumer_groups)
            snap.lag.extend(_lag(broker, coordinator))
    if broker.transactions is not None:
        snap.transactions = sum(len(getattr(c, "transactions", ()))
                                for c in broker.transactions.coordinators.values())
    topology = broker.topology
    if topology is not None:  # (started)
        snap.purgatory_produce = topology.produce_waiting()
        snap.health = topology.health()
    snap.ready = broker.not_ready()
    return snap


def _lag(broker: Broker, coordinator: Any) -> Iterator[tuple[str, str, int, int, int]]:
    """(group, topic, partition, committed offset, lag) of every committed offset whose
    partition this broker holds: the lag is the high watermark less the offset."""
    assert broker.logs is not None
    for groups in (coordinator.groups, coordinator.consumer_groups):
        for group_id, group in list(groups.items()):
            for (topic, partition), committed in list(group.offsets.items()):
                lg = broker.logs.get_log(topic, partition)
                if lg is None:
                    continue
                yield (group_id, topic, partition, committed.offset,
                       max(0, lg.high_watermark - committed.offset))


class BrokerCollector:
    """A prometheus_client collector: each scrape takes a snapshot on the broker's loop."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.loop = loop

    def snapshot(self) -> Snapshot:
        async def take() -> Snapshot:
            return take_snapshot(self.broker)
        return asyncio.run_coroutine_threadsafe(take(), self.loop).result(SNAPSHOT_TIMEOUT_S)

    def collect(self) -> Iterable[Any]:
        snap = self.snapshot()
        yield from _topic_families(snap)
        yield from _request_families(snap)
        yield from _broker_families(snap)


def _tiered_families(snap: Snapshot) -> Iterator[Any]:
    """Kafka's tiered-storage metrics (KIP-405, KIP-963), where tiered storage is on."""
    if snap.tiered_totals is None:
        return
    size = GaugeMetricFamily("kafka_server_brokertopicmetrics_remotelogsizebytes",
                             "bytes of the partition in the remote tier",
                             labels=["topic", "partition"])
    lag = GaugeMetricFamily("kafka_server_brokertopicmetrics_remotecopylagbytes",
                            "bytes of rolled segments not yet copied to the remote tier "
                            "(kept locally whatever local.retention says)",
                            labels=["topic", "partition"])
    for topic, partition, remote, waiting in sorted(snap.tiered):
        size.add_metric([topic, str(partition)], remote)
        lag.add_metric([topic, str(partition)], waiting)
    yield size
    yield lag
    copied, fetched, copy_errors, fetch_errors = snap.tiered_totals
    yield CounterMetricFamily("kafka_server_brokertopicmetrics_remotecopybytes",
                              "bytes copied to the remote tier", value=copied)
    yield CounterMetricFamily("kafka_server_brokertopicmetrics_remotefetchbytes",
                              "bytes read from the remote tier", value=fetched)
    yield CounterMetricFamily("kafka_server_brokertopicmetrics_remotecopyerrors",
                              "copy passes the remote tier failed", value=copy_errors)
    yield CounterMetricFamily("kafka_server_brokertopicmetrics_remotefetcherrors",
                              "reads of the remote tier that failed", value=fetch_errors)


def _topic_families(snap: Snapshot) -> Iterator[Any]:
    names = ("messagesin", "bytesin", "bytesout", "totalproducerequests",
             "failedproducerequests", "totalfetchrequests", "failedfetchrequests")
    helps = ("records appended", "bytes of produce requests' records appended",
             "record bytes sent to consumers", "produce requests (per topic)",
             "produce requests refused", "consumer fetch requests (per topic)",
             "consumer fetch requests refused")
    families = [CounterMetricFamily(f"kafka_server_brokertopicmetrics_{n}", h,
                                    labels=["topic"]) for n, h in zip(names, helps,
                                                                      strict=True)]
    for topic, values in sorted(snap.topics.items()):
        for family, value in zip(families, values, strict=True):
            family.add_metric([topic], value)
    yield from families


def _request_families(snap: Snapshot) -> Iterator[Any]:
    # Kafka's names of the APIs (RequestMetrics' request label): the handlers' own.
    # Imported here, at a scrape: the handlers import the connection, which imports
    # this module.
    from odradek.server.handlers import HANDLERS

    requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                   "requests answered", labels=["request", "version"])
    helps = {
        "requestqueuetimems": "from the request read to its handler starting, ms",
        "localtimems": "in the handler's own steps, ms",
        "remotetimems": "the handler waiting (purgatory, replicas, fsyncs), ms",
        "responsesendtimems": "from the response ready to it sent and drained, ms",
        "totaltimems": "from the request read to its response sent, ms",
    }
    times = [HistogramMetricFamily(f"kafka_network_requestmetrics_{name}", helps[name],
                                   labels=["request"]) for name in REQUEST_TIMES]
    for key, (versions, histograms) in sorted(snap.requests.items()):
        api = HANDLERS.get(key)
        name = api.name if api is not None else str(key)
        for version, count in sorted(versions.items()):
            requests.add_metric([name, str(version)], count)
        for family, (sum_ms, buckets) in zip(times, histograms, strict=True):
            family.add_metric([name], _cumulative(buckets), sum_ms)
    yield requests
    yield from times
    if snap.log_flush is not None:
        flush = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                      "time a log flush spent in fsyncs, ms")
        sum_ms, buckets = snap.log_flush
        flush.add_metric([], _cumulative(buckets), sum_ms)
        yield flush


def _cumulative(buckets: list[int]) -> list[tuple[str, int]]:
    """Prometheus' cumulative buckets (le, count) from non-cumulative counts."""
    out, total = [], 0
    for bound, n in zip([*map(str, TIME_BUCKETS_MS), "+Inf"], buckets, strict=True):
        total += n
        out.append((bound, total))
    return out


def _broker_families(snap: Snapshot) -> Iterator[Any]:
    # The exporter's rule for socket-server-metrics keeps the type's hyphens (as
    # underscores): kafka_server_socket_server_metrics_connection_creation_total.
    created = CounterMetricFamily("kafka_server_socket_server_metrics_connection_creation",
                                  "connections accepted", labels=["listener"])
    for name, n in sorted(snap.connections_created.items()):
        created.add_metric([name], n)
    yield created
    count = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                              "open connections", labels=["listener"])
    for name, n in sorted(snap.connections.items()):
        count.add_metric([name], n)
    yield count
    gauges = {
        "size": GaugeMetricFamily("kafka_log_log_size", "partition log size, bytes",
                                  labels=["topic", "partition"]),
        "start": GaugeMetricFamily("kafka_log_log_logstartoffset", "log start offset",
                                   labels=["topic", "partition"]),
        "end": GaugeMetricFamily("kafka_log_log_logendoffset", "log end offset",
                                 labels=["topic", "partition"]),
    }
    for topic, partition, size, start, end in sorted(snap.logs):
        labels = [topic, str(partition)]
        gauges["size"].add_metric(labels, size)
        gauges["start"].add_metric(labels, start)
        gauges["end"].add_metric(labels, end)
    yield from gauges.values()
    yield from _tiered_families(snap)
    purgatory = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                  "requests waiting", labels=["delayedOperation"])
    purgatory.add_metric(["Fetch"], snap.purgatory_fetch)
    purgatory.add_metric(["Produce"], snap.purgatory_produce)
    yield purgatory
    yield GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                            "groups coordinated here", value=snap.groups)
    yield GaugeMetricFamily(
        "kafka_coordinator_transaction_transactionstatemanager_numtransactions",
        "transactional ids coordinated here", value=snap.transactions)
    lag = GaugeMetricFamily("kafka_consumergroup_lag", "high watermark less the group's "
                            "committed offset", labels=["consumergroup", "topic", "partition"])
    current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                "the group's committed offset",
                                labels=["consumergroup", "topic", "partition"])
    for group, topic, partition, offset, behind in sorted(snap.lag):
        labels = [group, topic, str(partition)]
        lag.add_metric(labels, behind)
        current.add_metric(labels, offset)
    yield lag
    yield current
    if snap.health is not None:
        names = {
            "partitions": ("kafka_server_replicamanager_partitioncount",
                           "partitions this broker holds a replica of"),
            "leaders": ("kafka_server_replicamanager_leadercount", "partitions it leads"),
            "under_replicated": ("kafka_server_replicamanager_underreplicatedpartitions",
                                 "partitions it leads with fewer in-sync replicas than "
                                 "replicas"),
            "under_min_isr": ("kafka_server_replicamanager_underminisrpartitioncount",
                              "partitions it leads with fewer in-sync replicas than "
                              "min.insync.replicas"),
            "active_controller": ("kafka_controller_kafkacontroller_activecontrollercount",
                                  "1 on the controller"),
            "offline": ("kafka_controller_kafkacontroller_offlinepartitionscount",
                        "partitions without a live leader (the controller's count)"),
        }
        for key, (name, text) in names.items():
            yield GaugeMetricFamily(name, text, value=snap.health.get(key, 0))
        shrinks, expands = snap.isr_changes
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks",
                                  "ISR shrinks of partitions led here", value=shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands",
                                  "ISR expansions of partitions led here", value=expands)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """The HTTP endpoint of ``metrics.listen``: a thread serving ``/metrics``,
    ``/healthz`` and ``/readyz`` until ``stop``."""

    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.collector = BrokerCollector(broker, asyncio.get_running_loop())
        registry = CollectorRegistry()
        registry.register(self.collector)
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics_app(environ, start_response)
            if path == "/healthz":
                return _text(start_response, "200 OK", "ok\n")
            if path == "/readyz":
                try:
                    why = self.collector.snapshot().ready
                except Exception as exc:  # the loop did not answer in time
                    why = f"no answer from the broker: {exc!r}"
                if why is None:
                    return _text(start_response, "200 OK", "ready\n")
                return _text(start_response, "503 Service Unavailable", f"not ready: {why}\n")
            return _text(start_response, "404 Not Found",
                         "not found: /metrics, /healthz and /readyz are served\n")

        self.server = make_server(host, port, app, ThreadingWSGIServer,
                                  handler_class=_QuietHandler)
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.5},
                                       name="odradek-metrics", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _text(start_response: Callable[..., Any], status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(data)))])
    return [data]
