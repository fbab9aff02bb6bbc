"""``odradek``: the command line.

- ``odradek selfcheck [--data-dir DIR]`` exercises the storage engine end to end on a
  real directory (append with every codec, read back, unclean-stop recovery of a torn
  tail, retention, compaction) and prints what it checked.
- ``odradek dump-log FILE.log [--records]`` prints the batches of a segment file, like
  Kafka's ``kafka-dump-log.sh``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence

from odradek import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="odradek",
        description="Odradek: a Kafka-compatible commit log in Python.",
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("selfcheck", help="exercise the storage engine on a data directory")
    check.add_argument("--data-dir", help="directory to use (default: a temporary one)")
    check.add_argument("--records", type=int, default=20_000,
                       help="records to write (default 20000)")

    dump = sub.add_parser("dump-log", help="print the record batches of a segment file")
    dump.add_argument("files", nargs="+", metavar="FILE.log")
    dump.add_argument("--records", action="store_true", help="decode and print every record")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "selfcheck":
        from odradek.cli.selfcheck import run_selfcheck

        if args.data_dir:
            return run_selfcheck(args.data_dir, args.records)
        with tempfile.TemporaryDirectory(prefix="odradek-selfcheck-") as tmp:
            return run_selfcheck(tmp, args.records)
    if args.command == "dump-log":
        from odradek.cli.dump_log import dump_log

        return dump_log(args.files, records=args.records)
    parser.print_help(sys.stderr)
    return 2
