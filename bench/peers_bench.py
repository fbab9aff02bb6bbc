"""Peers benchmark: RabbitMQ and NATS JetStream on the produce and consume workloads of
``broker_bench.py``, so that Odradek's figures there can be set beside theirs.

What it measures (issue 4: "Odradek produce at least 15x RabbitMQ's confirmed persistent
rate"): N records of 100-byte payloads (default 200,000) are produced, every one
confirmed by the server, then consumed back, against:

1. **RabbitMQ, durable queue** (``aio-pika``): a durable classic queue, persistent
   messages (delivery_mode=2), publisher confirms on; up to ``--in-flight`` (1,000)
   publishes in flight at once (``asyncio.gather`` over chunks), timed from the first
   publish to the last confirm. Then the backlog is consumed with ``basic_consume``,
   prefetch ``--in-flight``, one multiple ack every 500 messages (or half the prefetch,
   if less; and at the end), timed from ``consume()`` to the N-th message.
2. **RabbitMQ, stream** (``rstream``, the stream protocol on its own port; the
   ``rabbitmq_stream`` plugin is enabled for the node): ``send_batch`` of 1,000 messages at
   a time with at most 20,000 unconfirmed, timed to the last publish confirm; then a
   consumer from the first offset, timed to the N-th message (raw bodies, no AMQP 1.0
   decoding).
3. **NATS JetStream, file storage** (``nats-py``): a stream on one subject with file
   storage; ``js.publish_async`` of chunks of ``--in-flight`` publishes whose acks are
   awaited with ``asyncio.gather``, timed to the last ack; then a pull consumer
   (AckPolicy.ALL) fetching batches of ``--in-flight`` and acking the last message of each
   batch, timed to the N-th message.

For each, the server's CPU time (utime + stime of the server process, all threads, from
``/proc/PID/stat``: ``beam.smp`` for RabbitMQ, ``nats-server`` for NATS) over the timed
part gives **server CPU seconds per million records**; its peak RSS (``VmHWM``) is read
after each part. The client's own CPU (``getrusage``) is recorded too: these are Python
clients, and they are often the limit.

Every server is started by this script on free ports of 127.0.0.1 with a private data
directory, a fresh one for every system and round, and stopped afterwards by its pid
(RabbitMQ: ``rabbitmqctl stop PIDFILE`` for that node, then ``epmd -kill`` for the
private epmd it started on its own port). The systems alternate round by round (order
reversed every other round), as in the other benchmarks here.

Nothing is installed by the script; it says what is missing. See bench/README.md:
``apt-get install rabbitmq-server nats-server`` and ``pip install -e '.[bench]'``.

Run: ``.venv/bin/python bench/peers_bench.py [--records 200000] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import glob
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    finish,
    machine_info,
    machine_line,
    note,
    proc_cpu_s,
    proc_peak_rss_mib,
    self_cpu_s,
    shown_path,
)
from odradek.devcluster import free_port

START_TIMEOUT_S = 90.0
STALL_TIMEOUT_S = 60.0
NAME = "bench"
RMQ_QUEUE = "rabbitmq-queue"
RMQ_STREAM = "rabbitmq-stream"
NATS = "nats-jetstream"
SYSTEMS = (RMQ_QUEUE, RMQ_STREAM, NATS)
LABELS = {
    RMQ_QUEUE: "RabbitMQ (durable queue, persistent, confirms)",
    RMQ_STREAM: "RabbitMQ (stream, rstream, confirms)",
    NATS: "NATS JetStream (file storage)",
}
RMQ_LIB = "/usr/lib/rabbitmq/bin"  # Debian: /usr/sbin/rabbitmq-* su to the rabbitmq user
STREAM_MAX_UNCONFIRMED = 20_000
ACK_EVERY = 500


# --- what is installed ----------------------------------------------------------------


def missing_pieces(systems: Sequence[str]) -> list[str]:
    """A line for each program or Python package the chosen systems need and lack."""
    missing = []
    if RMQ_QUEUE in systems or RMQ_STREAM in systems:
        for prog in ("rabbitmq-server", "rabbitmqctl"):
            if not os.access(os.path.join(RMQ_LIB, prog), os.X_OK):
                missing.append(f"{RMQ_LIB}/{prog} (apt-get install rabbitmq-server)")
        if not epmd_binary():
            missing.append("epmd (comes with rabbitmq-server's erlang-base)")
    if NATS in systems and not shutil.which("nats-server"):
        missing.append("nats-server (apt-get install nats-server)")
    modules = {RMQ_QUEUE: "aio_pika", RMQ_STREAM: "rstream", NATS: "nats"}
    dists = {"aio_pika": "aio-pika", "rstream": "rstream", "nats": "nats-py"}
    for system in systems:
        try:
            __import__(modules[system])
        except ImportError:
            missing.append(f"Python package {dists[modules[system]]} "
                           "(.venv/bin/pip install -e '.[bench]')")
    return missing


def epmd_binary() -> str | None:
    found = shutil.which("epmd") or sorted(glob.glob("/usr/lib/erlang/erts-*/bin/epmd"))
    if isinstance(found, list):
        return found[-1] if found else None
    return found


# --- processes ------------------------------------------------------------------------


def wait_port(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                     timeout=1):
            return True
        time.sleep(0.1)
    return False


class RabbitMQ:
    """A private RabbitMQ node (name, ports, data, logs, epmd, cookie) on 127.0.0.1."""

    def __init__(self, tmp_root: str, stream: bool) -> None:
        self.dir = tempfile.mkdtemp(prefix="rabbitmq-", dir=tmp_root)
        self.port = free_port()
        self.stream_port = free_port()
        self.epmd_port = free_port()
        self.pid_file = os.path.join(self.dir, "rabbitmq.pid")
        conf = os.path.join(self.dir, "rabbitmq.conf")
        with open(conf, "w") as f:
            f.write(f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
                    "loopback_users = none\n")
            if stream:
                f.write(f"stream.listeners.tcp.1 = 127.0.0.1:{self.stream_port}\n"
                        "stream.advertised_host = 127.0.0.1\n"
                        f"stream.advertised_port = {self.stream_port}\n")
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write("[rabbitmq_stream].\n" if stream else "[].\n")
        self.env = {
            **os.environ,
            "HOME": self.dir,  # the Erlang cookie goes here, not in ~/.erlang.cookie
            "RABBITMQ_NODENAME": f"odbench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": os.path.join(self.dir, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(self.dir, "log"),
            "RABBITMQ_CONFIG_FILE": conf,
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.dir, "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": os.path.join(self.dir, "plugins-expand"),
            "RABBITMQ_CONF_ENV_FILE": os.path.join(self.dir, "no-rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": self.pid_file,
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
        }
        self.pid = 0
        self._run("rabbitmq-server", "-detached", timeout=30)
        self._run("rabbitmqctl", "wait", "--timeout", str(int(START_TIMEOUT_S)),
                  self.pid_file, timeout=START_TIMEOUT_S + 10)
        with open(self.pid_file) as f:
            self.pid = int(f.read().strip())
        if stream and not wait_port(self.stream_port, time.monotonic() + START_TIMEOUT_S):
            raise RuntimeError("RabbitMQ stream port never opened")

    def _run(self, prog: str, *args: str, timeout: float) -> str:
        r = subprocess.run([os.path.join(RMQ_LIB, prog), *args], env=self.env, cwd=self.dir,
                           capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"{prog} {' '.join(args)} failed ({r.returncode}):\n"
                               f"{(r.stdout + r.stderr)[-2000:]}")
        return r.stdout

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def peak_rss_mib(self) -> float:
        return proc_peak_rss_mib(self.pid)

    def stop(self) -> None:
        try:
            if self.pid:
                self._run("rabbitmqctl", "stop", self.pid_file, timeout=120)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            note(f"rabbitmqctl stop failed ({e}); SIGTERM to beam.smp pid {self.pid}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
        epmd = epmd_binary()
        if epmd:  # the private epmd this node started, on its own port
            subprocess.run([epmd, "-kill"], env=self.env, capture_output=True, timeout=30,
                           check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class NatsServer:
    def __init__(self, tmp_root: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="nats-", dir=tmp_root)
        self.port = free_port()
        self.log = open(os.path.join(self.dir, "nats.out"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            ["nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-js",
             "-sd", os.path.join(self.dir, "store")],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        if not wait_port(self.port, time.monotonic() + START_TIMEOUT_S):
            self.stop()
            raise RuntimeError("nats-server not ready")

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def peak_rss_mib(self) -> float:
        return proc_peak_rss_mib(self.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# --- measuring ------------------------------------------------------------------------


@dataclass
class Measured:
    seconds: float
    records: int
    server_cpu_s: float
    client_cpu_s: float
    server_peak_rss_mib: float

    def as_dict(self) -> dict[str, Any]:
        m = self.records / 1e6
        return {
            "seconds": round(self.seconds, 4),
            "records": self.records,
            "records_s": round(self.records / self.seconds),
            "server_cpu_s": round(self.server_cpu_s, 3),
            "server_cpu_s_per_m": round(self.server_cpu_s / m, 3),
            "server_cpu_util": round(self.server_cpu_s / self.seconds, 3),
            "client_cpu_s": round(self.client_cpu_s, 3),
            "client_cpu_s_per_m": round(self.client_cpu_s / m, 3),
            "server_peak_rss_mib": round(self.server_peak_rss_mib, 1),
        }


class Timer:
    def __init__(self, server: RabbitMQ | NatsServer) -> None:
        self.server = server

    def __enter__(self) -> Timer:
        self.cpu0, self.self0 = self.server.cpu_s(), self_cpu_s()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.t1 = time.perf_counter()
        self.cpu1, self.self1 = self.server.cpu_s(), self_cpu_s()

    def measured(self, n: int) -> Measured:
        return Measured(self.t1 - self.t0, n, self.cpu1 - self.cpu0, self.self1 - self.self0,
                        self.server.peak_rss_mib())


def chunks(n: int, size: int) -> list[int]:
    return [min(size, n - i) for i in range(0, n, size)]


# --- RabbitMQ, durable queue ----------------------------------------------------------


async def rabbit_queue(server: RabbitMQ, n: int, value: bytes, in_flight: int
                       ) -> tuple[Measured, Measured]:
    import aio_pika

    conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{server.port}/")
    try:
        ch = await conn.channel(publisher_confirms=True)
        await ch.declare_queue(NAME, durable=True)
        exchange = ch.default_exchange
        persistent = aio_pika.DeliveryMode.PERSISTENT
        with Timer(server) as t:
            for size in chunks(n, in_flight):
                await asyncio.gather(*[
                    exchange.publish(aio_pika.Message(value, delivery_mode=persistent),
                                     routing_key=NAME)
                    for _ in range(size)])
        produced = t.measured(n)
        queued = (await ch.declare_queue(NAME, durable=True, passive=True)
                  ).declaration_result.message_count
        if queued != n:
            raise RuntimeError(f"RabbitMQ queue holds {queued:,} messages, expected {n:,}")

        cch = await conn.channel()
        await cch.set_qos(prefetch_count=in_flight)
        queue = await cch.declare_queue(NAME, durable=True, passive=True)
        done = asyncio.get_running_loop().create_future()
        got = 0
        ack_every = max(1, min(ACK_EVERY, in_flight // 2))  # below prefetch, or it stalls

        async def on_message(msg: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal got
            got += 1
            if got % ack_every == 0 or got == n:
                await msg.ack(multiple=True)
            if got == n and not done.done():
                done.set_result(None)

        with Timer(server) as t:
            tag = await queue.consume(on_message, no_ack=False)
            await asyncio.wait_for(done, timeout=STALL_TIMEOUT_S + n / 1000)
        consumed = t.measured(n)
        await queue.cancel(tag)
        return produced, consumed
    finally:
        await conn.close()


# --- RabbitMQ, stream -----------------------------------------------------------------


async def rabbit_stream(server: RabbitMQ, n: int, value: bytes, in_flight: int
                        ) -> tuple[Measured, Measured]:
    from rstream import (
        ConfirmationStatus,
        Consumer,
        ConsumerOffsetSpecification,
        OffsetType,
        Producer,
    )

    creds = {"username": "guest", "password": "guest"}
    confirmed = 0
    failed = 0
    progress = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        nonlocal confirmed, failed
        confirmed += 1
        if not status.is_confirmed:
            failed += 1
        if confirmed >= n or confirmed % 1000 == 0:
            progress.set()

    async with Producer("127.0.0.1", server.stream_port, **creds) as producer:
        await producer.create_stream(NAME, exists_ok=True)
        batch = [value] * in_flight
        with Timer(server) as t:
            sent = 0
            for size in chunks(n, in_flight):
                while sent - confirmed > STREAM_MAX_UNCONFIRMED:
                    progress.clear()
                    await asyncio.wait_for(progress.wait(), timeout=STALL_TIMEOUT_S)
                await producer.send_batch(NAME, batch[:size], on_publish_confirm=on_confirm)
                sent += size
            while confirmed < n:
                progress.clear()
                await asyncio.wait_for(progress.wait(), timeout=STALL_TIMEOUT_S)
        produced = t.measured(n)
    if failed:
        raise RuntimeError(f"RabbitMQ stream: {failed:,} of {n:,} publishes not confirmed")

    got = 0
    done = asyncio.get_running_loop().create_future()

    def on_message(msg: bytes, ctx: Any) -> None:
        nonlocal got
        got += 1
        if got == n and not done.done():
            done.set_result(None)

    consumer = Consumer("127.0.0.1", server.stream_port, **creds)
    await consumer.start()
    try:
        with Timer(server) as t:
            await consumer.subscribe(
                NAME, on_message, decoder=lambda b: b,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
            await asyncio.wait_for(done, timeout=STALL_TIMEOUT_S + n / 1000)
        consumed = t.measured(n)
    finally:
        await consumer.close()
    return produced, consumed


# --- NATS JetStream -------------------------------------------------------------------


async def nats_jetstream(server: NatsServer, n: int, value: bytes, in_flight: int
                         ) -> tuple[Measured, Measured]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
    try:
        js = nc.jetstream(publish_async_max_pending=in_flight)
        await js.add_stream(name=NAME, subjects=[NAME], storage=StorageType.FILE)
        with Timer(server) as t:
            for size in chunks(n, in_flight):
                futures = [await js.publish_async(NAME, value) for _ in range(size)]
                await asyncio.gather(*futures)
        produced = t.measured(n)
        stored = (await js.stream_info(NAME)).state.messages
        if stored != n:
            raise RuntimeError(f"JetStream stream holds {stored:,} messages, expected {n:,}")

        psub = await js.pull_subscribe(NAME, durable="bench-consumer",
                                       config=ConsumerConfig(ack_policy=AckPolicy.ALL))
        got = 0
        with Timer(server) as t:
            while got < n:
                msgs = await psub.fetch(batch=min(in_flight, n - got), timeout=STALL_TIMEOUT_S)
                got += len(msgs)
                await msgs[-1].ack()
        consumed = t.measured(n)
        if got != n:
            raise RuntimeError(f"JetStream: consumed {got:,}, expected {n:,}")
        return produced, consumed
    finally:
        await nc.close()


# --- rounds ---------------------------------------------------------------------------


def one_run(system: str, n: int, value_bytes: int, in_flight: int, tmp_root: str
            ) -> dict[str, Any]:
    value = os.urandom(value_bytes)
    server: RabbitMQ | NatsServer
    if system == NATS:
        server = NatsServer(tmp_root)
    else:
        server = RabbitMQ(tmp_root, stream=system == RMQ_STREAM)
    try:
        if system == RMQ_QUEUE:
            p, c = asyncio.run(rabbit_queue(server, n, value, in_flight))  # type: ignore[arg-type]
        elif system == RMQ_STREAM:
            p, c = asyncio.run(rabbit_stream(server, n, value, in_flight))  # type: ignore[arg-type]
        else:
            p, c = asyncio.run(nats_jetstream(server, n, value, in_flight))  # type: ignore[arg-type]
    finally:
        server.stop()
    return {"produce": p.as_dict(), "consume": c.as_dict()}


def summarize(rounds: list[dict[str, Any]], systems: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system in systems:
        per: dict[str, Any] = {}
        for wl in ("produce", "consume"):
            runs = [r[system][wl] for r in rounds if system in r and "error" not in r[system]]
            if not runs:
                continue
            per[wl] = {key: statistics.median(run[key] for run in runs)
                       for key in ("records_s", "server_cpu_s_per_m", "client_cpu_s_per_m",
                                   "server_cpu_util")}
            per[wl]["server_peak_rss_mib"] = max(run["server_peak_rss_mib"] for run in runs)
            per[wl]["records_s_all"] = [run["records_s"] for run in runs]
        out[system] = per
    return out


def versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    v: dict[str, Any] = {}
    for dist in ("aio-pika", "aiormq", "rstream", "nats-py"):
        with contextlib.suppress(PackageNotFoundError):
            v[dist] = version(dist)
    for pkg in ("rabbitmq-server", "nats-server", "erlang-base"):
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg],
                           capture_output=True, text=True, check=False)
        if r.returncode == 0:
            v[pkg] = r.stdout.strip()
    return v


def markdown(results: dict[str, Any]) -> str:
    m, p, s = results["machine"], results["params"], results["summary"]
    v = m["versions"]
    lines = [
        "machine: " + machine_line(
            m, f"RabbitMQ {v.get('rabbitmq-server', '?')} (Erlang {v.get('erlang-base', '?')})",
            f"nats-server {v.get('nats-server', '?')}", f"aio-pika {v.get('aio-pika', '?')}",
            f"rstream {v.get('rstream', '?')}", f"nats-py {v.get('nats-py', '?')}"),
        f"workload: {p['records']:,} records of {p['value_bytes']}-byte payloads, one queue/"
        f"stream, every publish confirmed, up to {p['in_flight']:,} in flight; "
        f"{p['rounds']} rounds, systems alternating; medians of rounds",
        "",
        "| system | workload | records/s | server CPU s per M | peak RSS MB "
        "| client CPU s per M |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for system in p["systems"]:
        for wl in ("produce", "consume"):
            r = s.get(system, {}).get(wl)
            if r is None:
                lines.append(f"| {LABELS[system]} | {wl} | failed | | | |")
                continue
            lines.append(f"| {LABELS[system]} | {wl} | {r['records_s']:,.0f} "
                         f"| {r['server_cpu_s_per_m']:.2f} | {r['server_peak_rss_mib']:,.0f} "
                         f"| {r['client_cpu_s_per_m']:.2f} |")
    lines.append("")
    for system in p["systems"]:
        for wl in ("produce", "consume"):
            r = s.get(system, {}).get(wl)
            if r:
                runs = ", ".join(f"{x:,.0f}" for x in r["records_s_all"])
                lines.append(f"- {wl}, {LABELS[system]}: records/s per round {runs}; server "
                             f"busy {r['server_cpu_util']:.2f} CPUs during the run")
    for err in results["errors"]:
        lines.append(f"- failed: {LABELS[err['system']]}, round {err['round']}: "
                     f"{err['error']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=200_000,
                    help="records produced and consumed per run (default 200,000)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per system (default 2)")
    ap.add_argument("--value-bytes", type=int, default=100, help="payload size (100)")
    ap.add_argument("--in-flight", type=int, default=1000,
                    help="publishes in flight / prefetch / fetch batch (default 1000)")
    ap.add_argument("--only", action="append", choices=SYSTEMS,
                    help="run only this system (repeatable; default all three)")
    ap.add_argument("--dir", default="/tmp", help="where servers' data dirs go (/tmp)")
    ap.add_argument("--out", default=str(here / "results" / "peers.json"),
                    help="JSON results file (default bench/results/peers.json)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rounds < 1 or args.records < 1 or args.in_flight < 1:
        raise SystemExit("--rounds, --records and --in-flight must be at least 1")
    systems = tuple(args.only) if args.only else SYSTEMS
    missing = missing_pieces(systems)
    if missing:
        raise SystemExit("missing (this script installs nothing; see bench/README.md):\n  "
                         + "\n  ".join(missing))
    tmp_root = tempfile.mkdtemp(prefix="odradek-peers-bench-", dir=args.dir)
    results: dict[str, Any] = {
        "benchmark": "peers",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": machine_info(versions=versions()),
        "params": {"records": args.records, "rounds": args.rounds,
                   "value_bytes": args.value_bytes, "in_flight": args.in_flight,
                   "systems": list(systems), "stream_max_unconfirmed": STREAM_MAX_UNCONFIRMED,
                   "rabbitmq_queue_ack_every": ACK_EVERY},
    }
    rounds: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            order = systems if i % 2 == 0 else tuple(reversed(systems))
            rnd: dict[str, Any] = {}
            for system in order:
                note(f"round {i + 1}/{args.rounds}: {system}, {args.records:,} records ...")
                try:
                    rnd[system] = one_run(system, args.records, args.value_bytes,
                                          args.in_flight, tmp_root)
                except Exception as e:  # one system failing must not lose the others
                    msg = f"{type(e).__name__}: {e}".strip()[:500]
                    note(f"  FAILED: {msg}")
                    errors.append({"system": system, "round": i + 1, "error": msg})
                    rnd[system] = {"error": msg}
                    continue
                pr, co = rnd[system]["produce"], rnd[system]["consume"]
                note(f"  produce {pr['records_s']:,} rec/s ({pr['server_cpu_s_per_m']} server "
                     f"CPU s/M), consume {co['records_s']:,} rec/s "
                     f"({co['server_cpu_s_per_m']} server CPU s/M)")
            rounds.append(rnd)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    results["rounds"] = rounds
    results["errors"] = errors
    results["summary"] = summarize(rounds, systems)
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
