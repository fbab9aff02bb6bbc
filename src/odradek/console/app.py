"""The console's web layer: Starlette routes, Jinja2 templates, htmx for the live parts.

Pages are rendered on the server, whole; htmx (vendored in ``static/``, 0BSD) swaps
parts of them in place: a group's lag table and chart refresh every few seconds, forms
post without a page load and ask for confirmation before they change the cluster. Every
page also works as a plain page load, so a test or a user without JavaScript sees the
same thing.

The cluster is reached only through ``KafkaView`` (``console/kafka.py``), whose blocking
calls run on Starlette's thread pool. A ``Sampler`` task asks the cluster, every
``sample_interval`` seconds, for each topic's end offsets and each group's lag, and
keeps the last hour or so: the message rates on the topics page and the lag-over-time
chart come from it. When the cluster does not answer, pages say so (502) and the
console keeps running; librdkafka reconnects by itself once brokers are back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from odradek.console.kafka import ConsoleError, KafkaView, render_bytes

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
HISTORY = 720  # samples kept per series: an hour at the default 5 s


@dataclass
class Series:
    """One quantity over time: (unix time, value) samples, oldest first."""

    points: deque[tuple[float, float]]

    def rate(self) -> float | None:
        """Per second, between the last two samples (for counters such as end offsets)."""
        if len(self.points) < 2:
            return None
        (t0, v0), (t1, v1) = self.points[-2], self.points[-1]
        return max(0.0, (v1 - v0) / (t1 - t0)) if t1 > t0 else None


class Sampler:
    """Samples topic end offsets and group lag on a timer, from the console's own view."""

    def __init__(self, view: KafkaView, interval: float) -> None:
        self.view, self.interval = view, interval
        self.topic_ends: dict[str, Series] = {}
        self.group_lag: dict[str, Series] = {}
        self.last_error: str | None = None

    def _add(self, table: dict[str, Series], key: str, now: float, value: float) -> None:
        series = table.setdefault(key, Series(deque(maxlen=HISTORY)))
        series.points.append((now, value))

    async def sample(self) -> None:
        topics = await run_in_threadpool(self.view.topics, True, False)
        groups = await run_in_threadpool(self.view.groups)
        now = time.time()
        for t in topics:
            self._add(self.topic_ends, t.name, now, t.end_total)
        for g in groups:
            self._add(self.group_lag, g.group_id, now, g.lag)

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
                self.last_error = None
            except ConsoleError as exc:
                self.last_error = str(exc)
            except Exception:  # the console must outlive any one bad sample
                log.exception("sampling the cluster failed")
            await asyncio.sleep(self.interval)


def lag_chart(series: Series | None, width: int = 640, height: int = 160) -> dict[str, Any]:
    """An SVG polyline of a group's lag over time (drawn by the template)."""
    points = list(series.points) if series else []
    if len(points) < 2:
        return {"points": "", "width": width, "height": height, "max": 0, "samples":
                len(points), "span": 0}
    t0, t1 = points[0][0], points[-1][0]
    top = max(v for _, v in points) or 1
    coords = " ".join(
        f"{(t - t0) / (t1 - t0) * width:.1f},{height - v / top * (height - 10):.1f}"
        for t, v in points)
    return {"points": coords, "width": width, "height": height, "max": int(top),
            "samples": len(points), "span": round(t1 - t0), "last": int(points[-1][1])}


def human_bytes(size: int | None) -> str:
    """1536 -> '1.5 KiB'; None (not known) -> '-'."""
    if size is None:
        return "-"
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


INT16_MAX, INT32_MAX, INT64_MAX = 2**15 - 1, 2**31 - 1, 2**63 - 1


def _int(text: str | None, name: str, minimum: int = 0,
         maximum: int = INT32_MAX) -> int | None:
    """A whole number from a form or query, within the bounds of its Kafka field."""
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConsoleError("INVALID_REQUEST", f"{name} must be a whole number, got "
                           f"{text!r}", 400) from None
    if not minimum <= value <= maximum:
        raise ConsoleError("INVALID_REQUEST", f"{name} must be from {minimum} to "
                           f"{maximum}, got {value}", 400)
    return value


def _timestamp_ms(text: str | None) -> int | None:
    """A time from the browser: ms since the epoch, or an ISO date-time (UTC unless it
    says otherwise)."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    try:
        return _int(text, "a time in ms since the epoch", 0, INT64_MAX)
    except ConsoleError:
        if text.lstrip("+-").isdigit():
            raise
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConsoleError("INVALID_REQUEST", f"not a time: {text!r} (use ms since the "
                           "epoch or 2026-11-26T10:00:00)", 400) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the pages show times in UTC
    ms = int(moment.timestamp() * 1000)
    if ms < 0:
        raise ConsoleError("INVALID_REQUEST", f"{text!r} is before 1970", 400)
    return ms


def _headers(text: str) -> list[tuple[str, bytes]]:
    """``name=value`` per line."""
    out = []
    for line in text.splitlines():
        if line.strip():
            name, _, value = line.partition("=")
            out.append((name.strip(), value.encode()))
    return out


def _redirect(request: Request, url: str) -> Response:
    """After a change: htmx follows HX-Redirect, a plain form post a 303."""
    if request.headers.get("HX-Request"):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


def create_app(view: KafkaView, *, sample_interval: float = 5.0,
               title: str = "Odradek console") -> Starlette:
    """The console application over one cluster view."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals.update(render_bytes=render_bytes, title=title, quote=quote)
    templates.env.filters["bytes"] = human_bytes
    sampler = Sampler(view, sample_interval)

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("sampler_error", sampler.last_error)
        return templates.TemplateResponse(request, name, context, status_code=status)

    async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(fn, *args, **kwargs)

    async def cluster(request: Request) -> Response:
        info = await call(view.cluster)
        return page(request, "cluster.html", info=info, nav="cluster",
                    bootstrap=view.config.get("bootstrap.servers"))

    async def topics(request: Request) -> Response:
        internal = request.query_params.get("internal") == "1"
        listed = await call(view.topics, internal)
        rates = {t.name: s.rate() for t, s in
                 ((t, sampler.topic_ends.get(t.name)) for t in listed) if s}
        return page(request, "topics.html", topics=listed, rates=rates, nav="topics",
                    internal=internal)

    async def create_topic(request: Request) -> Response:
        form = await request.form()
        name = str(form.get("name", "")).strip()
        if not name:
            raise ConsoleError("INVALID_REQUEST", "a topic needs a name", 400)
        configs = dict(_pair(line) for line in str(form.get("configs", "")).splitlines()
                       if line.strip())
        await call(view.create_topic, name,
                   _int(_text(form, "partitions"), "partitions", 1) or 1,
                   _int(_text(form, "replication_factor"), "replication factor", 1,
                        INT16_MAX) or -1,
                   configs)
        return _redirect(request, f"/topics/{quote(name, safe='')}")

    async def topic(request: Request) -> Response:
        name = request.path_params["name"]
        info = await call(view.topic, name)
        configs = await call(view.configs, name)
        series = sampler.topic_ends.get(name)
        return page(request, "topic.html", topic=info, configs=configs, nav="topics",
                    rate=series.rate() if series else None,
                    produced=request.query_params.get("produced"))

    async def delete_topic(request: Request) -> Response:
        await call(view.delete_topic, request.path_params["name"])
        return _redirect(request, "/topics")

    async def set_config(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        key = str(form.get("config", "")).strip()
        if not key:
            raise ConsoleError("INVALID_REQUEST", "which setting?", 400)
        value = None if form.get("action") == "reset" else str(form.get("value", ""))
        await call(view.set_config, name, key, value)
        # No #fragment: HX-Redirect to the page's own address plus a fragment would
        # only scroll, not reload.
        return _redirect(request, f"/topics/{quote(name, safe='')}")

    async def produce(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        key = _text(form, "key")
        value = _text(form, "value")
        partition, offset = await call(
            view.produce, name, _int(_text(form, "partition"), "partition"),
            key.encode() if key else None, value.encode() if value is not None else None,
            _headers(_text(form, "headers") or ""))
        return _redirect(request, f"/topics/{quote(name, safe='')}?produced="
                                  f"{partition}:{offset}")

    async def messages(request: Request) -> Response:
        name = request.path_params["name"]
        q = request.query_params
        partition = _int(q.get("partition"), "partition")
        offset = _int(q.get("offset"), "offset", 0, INT64_MAX)
        timestamp = _timestamp_ms(q.get("timestamp"))
        limit = min(_int(q.get("limit"), "limit", 1) or 50, 1000)
        mode = q.get("format", "auto")
        contains = q.get("contains", "")
        info = await call(view.topic, name, False)
        found, scanned = await call(view.messages, name, partition, offset=offset,
                                    timestamp_ms=timestamp, limit=limit, contains=contains)
        return page(request, "messages.html", topic=info, messages=found, scanned=scanned,
                    nav="topics", partition=partition, offset=offset,
                    timestamp=q.get("timestamp", ""), limit=limit, mode=mode,
                    contains=contains)

    async def groups(request: Request) -> Response:
        listed = await call(view.groups)
        return page(request, "groups.html", groups=listed, nav="groups")

    async def group(request: Request) -> Response:
        group_id = request.path_params["group"]
        info = await call(view.group, group_id)
        topics = sorted({p.topic for p in info.offsets})
        return page(request, "group.html", group=info, nav="groups", topics=topics,
                    chart=lag_chart(sampler.group_lag.get(group_id)),
                    interval=sampler.interval, reset=request.query_params.get("reset"))

    async def reset_offsets(request: Request) -> Response:
        group_id = request.path_params["group"]
        form = await request.form()
        to = str(form.get("to", ""))
        raw = _text(form, "value")
        value = _timestamp_ms(raw) if to == "timestamp" else _int(raw, "offset", 0, INT64_MAX)
        moved = await call(view.reset_offsets, group_id, str(form.get("topic", "")), to,
                           value)
        summary = ",".join(f"{p}:{o}" for p, o in moved)
        return _redirect(request, f"/groups/{quote(group_id, safe='')}?reset={summary}")

    async def on_console_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConsoleError)
        return page(request, "error.html", status=exc.status, error=exc,
                    nav=request.url.path.split("/")[1] or "cluster")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(sampler.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await run_in_threadpool(view.close)

    routes = [
        Route("/", cluster),
        Route("/topics", topics),
        Route("/topics", create_topic, methods=["POST"]),
        Route("/topics/{name}", topic),
        Route("/topics/{name}/delete", delete_topic, methods=["POST"]),
        Route("/topics/{name}/config", set_config, methods=["POST"]),
        Route("/topics/{name}/produce", produce, methods=["POST"]),
        Route("/topics/{name}/messages", messages),
        Route("/groups", groups),
        Route("/groups/{group}", group),
        Route("/groups/{group}/reset", reset_offsets, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={ConsoleError: on_console_error})
    app.state.sampler = sampler
    return app


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def _pair(line: str) -> tuple[str, str]:
    name, sep, value = line.partition("=")
    if not sep or not name.strip():
        raise ConsoleError("INVALID_REQUEST", f"expected NAME=VALUE, got {line!r}", 400)
    return name.strip(), value.strip()
