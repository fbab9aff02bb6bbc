"""``odradek``: the command line.

- ``odradek serve [--listen HOST:PORT] [--data-dir DIR] [--config FILE.toml]
  [--override NAME=VALUE ...]`` runs a broker until SIGTERM/SIGINT.
- ``odradek selfcheck [--data-dir DIR]`` exercises the storage engine end to end on a
  real directory (append with every codec, read back, unclean-stop recovery of a torn
  tail, retention, compaction) and prints what it checked.
- ``odradek dump-log FILE.log [--records]`` prints the batches of a segment file, like
  Kafka's ``kafka-dump-log.sh``.
- ``odradek pipeline run|generate|stream|backfill|show``: the log-processing pipeline on
  Spark (``cli/pipeline.py``).
- ``odradek reassign generate|execute|verify|cancel`` and ``odradek elect-leaders``:
  moving partitions and leadership (``cli/reassign.py``).
- ``odradek cluster up|status``: a local development cluster in one command, and a
  cluster's brokers, controller and unhealthy partitions (``cli/cluster.py``).
- ``odradek users add|list|remove`` and ``odradek acls add|list|remove``: SCRAM users
  and ACLs, like ``kafka-configs.sh --entity-type users`` and ``kafka-acls.sh``
  (``cli/security.py``); ``odradek quotas set|remove|list``: client quotas
  (``cli/quotas.py``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence

from odradek import __version__
from odradek.cli.cluster import add_cluster_command, run_cluster_command
from odradek.cli.console import add_console_command, run_console_command
from odradek.cli.pipeline import add_pipeline_command, run_pipeline_command
from odradek.cli.quotas import add_quotas_command, run_quotas_command
from odradek.cli.reassign import add_reassign_commands, run_reassign_command
from odradek.cli.security import add_security_commands, run_security_command
from odradek.cli.tools import add_tool_commands, run_tool


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="odradek",
        description="Odradek: a Kafka-compatible commit log in Python.",
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run a broker that Kafka clients can use")
    serve.add_argument("--listen", default=None, metavar="HOST:PORT",
                       help="address to listen on (default 127.0.0.1:9092)")
    serve.add_argument("--data-dir", default=None, metavar="DIR",
                       help="where the logs live (default ./odradek-data)")
    serve.add_argument("--config", default=None, metavar="FILE.toml",
                       help="settings under their Kafka names")
    serve.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                       help="a setting, above file and environment (repeatable)")

    check = sub.add_parser("selfcheck", help="exercise the storage engine on a data directory")
    check.add_argument("--data-dir", help="directory to use (default: a temporary one)")
    check.add_argument("--records", type=int, default=20_000,
                       help="records to write (default 20000)")

    dump = sub.add_parser("dump-log", help="print the record batches of a segment file")
    dump.add_argument("files", nargs="+", metavar="FILE.log")
    dump.add_argument("--records", action="store_true", help="decode and print every record")

    add_tool_commands(sub)
    add_pipeline_command(sub)
    add_cluster_command(sub)
    add_reassign_commands(sub)
    add_security_commands(sub)
    add_quotas_command(sub)
    add_console_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        return _serve(args)
    if args.command == "selfcheck":
        from odradek.cli.selfcheck import run_selfcheck

        if args.data_dir:
            return run_selfcheck(args.data_dir, args.records)
        with tempfile.TemporaryDirectory(prefix="odradek-selfcheck-") as tmp:
            return run_selfcheck(tmp, args.records)
    if args.command == "dump-log":
        from odradek.cli.dump_log import dump_log

        return dump_log(args.files, records=args.records)
    if args.command == "pipeline":
        return run_pipeline_command(args)
    if args.command == "cluster":
        return run_cluster_command(args)
    if args.command in ("reassign", "elect-leaders"):
        return run_reassign_command(args)
    if args.command in ("users", "acls"):
        return run_security_command(args)
    if args.command == "quotas":
        return run_quotas_command(args)
    if args.command == "console":
        return run_console_command(args)
    code = run_tool(args)
    if code is not None:
        return code
    parser.print_help(sys.stderr)
    return 2


def _serve(args: argparse.Namespace) -> int:
    import asyncio

    from odradek.server.cluster.node import ClusterStartupError
    from odradek.server.config import load_config
    from odradek.server.log_setup import configure_logging
    from odradek.server.run import serve
    from odradek.server.settings import ConfigError
    from odradek.storage import LogDirLockedError

    logging.getLogger("odradek").setLevel(logging.INFO)
    overrides = {}
    for item in args.override:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"odradek serve: --override needs NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        overrides[name.strip()] = value
    try:
        config = load_config(listen=args.listen, data_dir=args.data_dir,
                             config_file=args.config, overrides=overrides)
    except ConfigError as exc:
        print(f"odradek serve: {exc}", file=sys.stderr)
        return 2
    configure_logging(config)  # log.format, log.level, log.level.<logger>
    json_logs = config["log.format"] == "json"

    def fail(text: str) -> None:
        """Why the broker did not start: a log record when lines must be JSON."""
        if json_logs:
            logging.getLogger("odradek").critical("odradek serve: %s", text)
        else:
            print(f"odradek serve: {text}", file=sys.stderr)

    def started(broker: object) -> None:
        from odradek.server.broker import Broker

        assert isinstance(broker, Broker)
        lines = [f"data directory: {broker.logs.data_dir if broker.logs else config.data_dir}",
                 "effective config:"]
        for name, value, source in config.describe():
            lines.append(f"  {name} = {value}" + ("" if source == "default" else f"  ({source})"))
        # Each listener with the port it bound (a 0 in listeners: any free port).
        for listener in config.listeners:
            lines.append(f"listener {listener.name}://{listener.host}:"
                         f"{broker.listener_ports[listener.name]} ({listener.protocol})")
        if broker.metrics_port is not None:
            host = config["metrics.listen"].rpartition(":")[0] or "0.0.0.0"
            lines.append(f"metrics http://{host}:{broker.metrics_port}/metrics")
        # Last, in the same write: tools wait for this line to know the broker is ready.
        lines.append(f"Odradek {__version__} listening on {broker.host}:{broker.port}")
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()

    try:
        asyncio.run(serve(config, started))
    except (LogDirLockedError, ClusterStartupError, ConfigError) as exc:
        fail(str(exc))
        return 1
    except OSError as exc:
        fail(f"cannot start: {exc}")
        return 1
    return 0
