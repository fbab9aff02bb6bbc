"""``odradek console``: the web console (``odradek.console``) on uvicorn.

``odradek console --bootstrap-server HOST:PORT [--listen 127.0.0.1:8080]`` serves the
pages until interrupted, and prints ``console http://HOST:PORT`` once it listens (with
``--listen HOST:0``, the port it was given). Security settings for the connection to the
cluster come as librdkafka settings (``-X security.protocol=SASL_SSL -X ...``), as for
the other console tools. The console needs the ``[console]`` extra (Starlette, Jinja2,
uvicorn); without it the command says which package is missing and how to install it.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
from collections.abc import Iterator
from typing import Any

from odradek.cli.tools import ToolError, _bootstrap, _common, report_errors

DEFAULT_LISTEN = "127.0.0.1:8080"


def add_console_command(subparsers: Any) -> None:
    console = subparsers.add_parser(
        "console", help="serve the web console for a Kafka cluster",
        description="A web console for any Kafka cluster (Odradek or Apache Kafka): "
                    "brokers, topics, messages, consumer groups and their lag.")
    _common(console)
    console.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                         help=f"where to serve the pages (default {DEFAULT_LISTEN}; "
                              "port 0: any free port)")
    console.add_argument("--sample-interval", type=float, default=5.0, metavar="SECONDS",
                         help="how often to sample end offsets and lag for rates and the "
                              "lag chart (default 5)")


def run_console_command(args: argparse.Namespace) -> int:
    return report_errors("console", lambda: _run(args))


def _listen_socket(text: str) -> socket.socket:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ToolError(f"--listen needs HOST:PORT, got {text!r}", code=2)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        sock.close()
        raise ToolError(f"cannot listen on {text}: {exc.strerror}") from None
    # Listening before the address is printed: a browser that connects at once waits in
    # the backlog until uvicorn accepts, instead of being refused.
    sock.listen(2048)
    return sock


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, ending with exit code 0 on SIGTERM/SIGINT like ``odradek
        serve``: uvicorn re-raises the signal after its graceful shutdown, so the
        process would end as killed by it."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = {sig: signal.signal(sig, self.handle_exit)
                        for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server


def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from odradek.console.app import create_app
        from odradek.console.kafka import KafkaView
    except ModuleNotFoundError as exc:
        raise ToolError(f"the console needs the Python package {exc.name!r}: "
                        "pip install 'odradek[console]'") from None
    if args.sample_interval <= 0:
        raise ToolError("--sample-interval must be more than 0", code=2)
    config = {"bootstrap.servers": _bootstrap(args), **dict(args.property)}
    try:
        view = KafkaView(config, timeout=args.request_timeout_ms / 1000)
    except Exception as exc:  # librdkafka refuses a setting: KafkaException or ValueError
        raise ToolError(f"invalid client setting: {exc}", code=2) from None
    sock = _listen_socket(args.listen)
    host, port = sock.getsockname()[:2]
    app = create_app(view, sample_interval=args.sample_interval)
    server = _server_class()(uvicorn.Config(app, log_level="warning", access_log=False,
                                    lifespan="on"))
    shown = f"[{host}]" if ":" in host else host
    print(f"console http://{shown}:{port} for {config['bootstrap.servers']}", flush=True)
    server.run(sockets=[sock])
    return 0 if server.started else 1
