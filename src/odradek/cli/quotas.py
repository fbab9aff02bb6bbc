"""``odradek quotas``: client quotas (KIP-546), as ``kafka-configs.sh --entity-type
users|clients`` manages them, over DescribeClientQuotas / AlterClientQuotas on this
package's own client (librdkafka has no client quota API), so it works against Apache
Kafka as against Odradek.

- ``quotas set ENTITY KEY=VALUE ...``: set ``producer_byte_rate``,
  ``consumer_byte_rate`` (bytes/s) or ``request_percentage``;
- ``quotas remove ENTITY [KEY ...]``: remove those keys (all of the entity's, if none);
- ``quotas list [ENTITY]``: the quotas set, one line per entity, as kafka-configs.sh
  prints them (``Quota configs for user-principal 'alice' are producer_byte_rate=1024``).

ENTITY is ``--user NAME`` or ``--user-default`` and/or ``--client-id ID`` or
``--client-id-default``; for ``list`` each is a filter (left out: any). ``--command-config``
and ``-X`` give the connection's security settings as for ``odradek users``. Exit codes as
the console tools: 0 done, 1 the broker refused or could not be reached, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from odradek.cli.tools import ToolError, _bootstrap, report_errors

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
USER, CLIENT_ID = "user", "client-id"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def add_quotas_command(subparsers: Any) -> None:
    from odradek.cli.security import _security_common

    quotas = subparsers.add_parser(
        "quotas", help="set, list and remove client quotas",
        description="Manage client quotas (KIP-13/55/546), like kafka-configs.sh "
                    "--entity-type users|clients.")
    qsub = quotas.add_subparsers(dest="quotas_command", metavar="ACTION", required=True)
    set_ = qsub.add_parser("set", help="set quotas of a user and/or client id")
    _entity_options(set_)
    set_.add_argument("values", nargs="+", type=_value, metavar="KEY=VALUE",
                      help=f"a quota: {', '.join(QUOTA_KEYS)}")
    _security_common(set_)
    remove = qsub.add_parser("remove", help="remove quotas of a user and/or client id")
    _entity_options(remove)
    remove.add_argument("keys", nargs="*", type=_key, metavar="KEY",
                        help="the quotas to remove (default: all of the entity's)")
    _security_common(remove)
    lst = qsub.add_parser("list", help="the quotas set (filtered by the entity options)")
    _entity_options(lst)
    _security_common(lst)


def _entity_options(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="NAME", help="a user (a principal's name)")
    user.add_argument("--user-default", action="store_true",
                      help="the default user (every user without a quota of its own)")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="ID", help="a client id")
    client.add_argument("--client-id-default", action="store_true",
                        help="the default client id")


def _key(text: str) -> str:
    if text not in QUOTA_KEYS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a quota: expected one of "
                                         f"{', '.join(QUOTA_KEYS)}")
    return text


def _value(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return _key(key.strip()), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key}: {value!r} is not a number") from None


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The entity the options name (None: a default), or a usage error."""
    parts: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_default:
        parts.append((USER, args.user))
    if args.client_id is not None or args.client_id_default:
        parts.append((CLIENT_ID, args.client_id))
    return parts


def describe_entity(parts: list[tuple[str, str | None]]) -> str:
    """kafka-configs.sh's words: ``user-principal 'alice', the default client-id``."""
    words = {USER: "user-principal", CLIENT_ID: "client-id"}
    return ", ".join(f"the default {words.get(t, t)}" if n is None else f"{words.get(t, t)} '{n}'"
                     for t, n in sorted(parts, key=lambda p: p[0] != USER))


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def run_quotas_command(args: argparse.Namespace) -> int:
    name = f"quotas {args.quotas_command}"
    entity = _entity(args)
    if args.quotas_command != "list" and not entity:
        print(f"odradek {name}: name the entity: --user NAME, --user-default, "
              "--client-id ID or --client-id-default", file=sys.stderr)
        return 2
    return report_errors(name, lambda: _run(args, entity))


def _run(args: argparse.Namespace, entity: list[tuple[str, str | None]]) -> int:
    with _connect(args) as conn:
        if args.quotas_command == "list":
            return _list(conn, entity)
        if args.quotas_command == "set":
            ops = [{"key": k, "value": v, "remove": False} for k, v in args.values]
        else:
            keys = args.keys or sorted(_described(conn, entity, strict=True).get(
                tuple(sorted(entity)), {}))
            if not keys:
                raise ToolError(f"{describe_entity(entity)} has no quotas to remove")
            ops = [{"key": k, "value": 0.0, "remove": True} for k in keys]
        _alter(conn, entity, ops)
        action = "set" if args.quotas_command == "set" else "removed"
        print(f"Quotas {action} for {describe_entity(entity)}: " + ", ".join(
            f"{o['key']}={_number(o['value'])}" if not o["remove"] else o["key"]
            for o in ops))
        return 0


class _connect:
    """A connection to one of the bootstrap servers, with the security settings of
    ``--command-config`` and ``-X``; a ToolError if none answers or the login fails."""

    def __init__(self, args: argparse.Namespace) -> None:
        from odradek.cli.security import read_command_config, translate_client_config
        from odradek.client.connection import Cluster, KafkaClientError

        try:
            extra = read_command_config(args.command_config) if args.command_config else {}
            if args.bootstrap_server is None and "bootstrap.servers" in extra:
                args.bootstrap_server = extra.pop("bootstrap.servers")
            settings = translate_client_config(extra)
        except (OSError, ValueError) as exc:
            raise ToolError(f"--command-config: {exc}", 2) from None
        settings.update(dict(args.property))
        self.cluster = Cluster(_bootstrap(args), client_id="odradek-quotas",
                               timeout_s=args.request_timeout_ms / 1000, security=settings)
        try:
            self.conn = self.cluster.any_broker()
        except KafkaClientError as exc:
            self.cluster.close()
            raise ToolError(str(exc)) from None

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.cluster.close()


def _request(conn: Any, api_key: int, data: dict[str, Any]) -> Any:
    from odradek.client.connection import KafkaClientError

    try:
        return conn.request(api_key, data)
    except KafkaClientError as exc:
        raise ToolError(str(exc)) from None


def _refusal(code: int, message: str | None, doing: str) -> ToolError:
    from kio.schema.errors import ErrorCode

    if code == ErrorCode.cluster_authorization_failed:
        return ToolError(f"cannot {doing}: not authorized: the principal this client logs "
                         "in as needs DESCRIBE_CONFIGS (list) or ALTER_CONFIGS (set, remove) "
                         "on the cluster; see --command-config")
    return ToolError(f"cannot {doing}: {ErrorCode(code).name.upper()}"
                     + (f": {message}" if message else ""))


def _described(conn: Any, entity: list[tuple[str, str | None]], *, strict: bool
               ) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    from odradek.client.codec import DESCRIBE_CLIENT_QUOTAS

    answer = _request(conn, DESCRIBE_CLIENT_QUOTAS, {"strict": strict, "components": [
        {"entity_type": t, "match_type": MATCH_DEFAULT if n is None else MATCH_EXACT,
         "match": n} for t, n in entity]})
    if answer.error_code:
        raise _refusal(answer.error_code, answer.error_message, "list quotas")
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in answer.entries or ()}


def _list(conn: Any, entity: list[tuple[str, str | None]]) -> int:
    for parts, values in sorted(_described(conn, entity, strict=False).items(),
                                key=lambda item: [(t, n or "") for t, n in item[0]]):
        print(f"Quota configs for {describe_entity(list(parts))} are "
              + ", ".join(f"{k}={_number(v)}" for k, v in sorted(values.items())))
    return 0


def _alter(conn: Any, entity: list[tuple[str, str | None]], ops: list[dict[str, Any]]
           ) -> None:
    from odradek.client.codec import ALTER_CLIENT_QUOTAS

    answer = _request(conn, ALTER_CLIENT_QUOTAS, {"validate_only": False, "entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "ops": ops}]})
    for entry in answer.entries:
        if entry.error_code:
            raise _refusal(entry.error_code, entry.error_message, "change quotas")
