"""``odradek users`` and ``odradek acls``: SCRAM users and ACLs, on confluent-kafka's
admin client, so they work against Apache Kafka as against Odradek.

- ``users add NAME --mechanism SCRAM-SHA-256|SCRAM-SHA-512 [--iterations N]
  [--password-file FILE | --password PW]`` (asked for on the terminal when neither is
  given; ``--password-file -`` reads standard input), ``users list [NAME ...]`` (each
  user's mechanisms and iterations, never a secret), ``users remove NAME --mechanism M``:
  AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554). The client salts
  and hashes the password; only the salted form crosses the wire.
- ``acls add|list|remove``, shaped like ``kafka-acls.sh``: ``--allow-principal`` /
  ``--deny-principal User:NAME``, ``--allow-host`` / ``--deny-host`` (default ``*``),
  ``--operation OP`` (Kafka's names, any case: Read, Write, IdempotentWrite, All, ...),
  ``--topic`` / ``--group`` / ``--transactional-id`` (repeatable) / ``--cluster``,
  ``--resource-pattern-type`` (literal by default for add, any for list and remove), and
  the conveniences ``--producer [--idempotent]`` and ``--consumer``. ``list`` prints the
  ACLs as ``kafka-acls.sh`` does, under ``Current ACLs for resource `ResourcePattern(...)`:``.
  ``remove`` removes every ACL matching its filter (an option left out matches anything),
  showing them and asking first unless ``--force``.

Both take ``--bootstrap-server`` and the console tools' ``-X``, ``--request-timeout-ms``,
``--verbose`` (``cli/tools.py``), and ``--command-config FILE``: a Kafka client
properties file (``security.protocol``, ``sasl.*``, ``ssl.*``) whose entries go to
librdkafka, with the Java-only ones translated where there is an equivalent
(``sasl.jaas.config`` with PlainLoginModule or ScramLoginModule: its username and
password; a PEM truststore/keystore: ``ssl.ca.location``, ``ssl.certificate.location``
and ``ssl.key.location``) and refused with a reason otherwise. Exit codes as the console
tools: 0 done, 1 the broker refused or could not be reached, 2 bad usage.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Literal, overload

from odradek.cli.tools import (
    ToolError,
    _bootstrap,
    _BrokerErrors,
    _code_name,
    _common,
    _config,
    _new_client,
    _positive,
    _reason,
    report_errors,
)

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
CLUSTER_NAME = "kafka-cluster"
_log = logging.getLogger("odradek.tools.librdkafka")

# Kafka's AclCommand: the operations each resource type accepts.
VALID_OPERATIONS = {
    "TOPIC": {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "ALL"},
    "GROUP": {"READ", "DESCRIBE", "DELETE", "ALL"},
    "CLUSTER": {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE", "ALL"},
    "TRANSACTIONAL_ID": {"DESCRIBE", "WRITE", "ALL"},
}
OPERATIONS = sorted(set().union(*VALID_OPERATIONS.values()))
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


# --- the parser ----------------------------------------------------------------------


def _operation(text: str) -> str:
    """Kafka's operation names in any case, with or without separators: Read,
    IdempotentWrite, IDEMPOTENT_WRITE, describe-configs."""
    squashed = re.sub(r"[-_\s]", "", text).upper()
    for name in OPERATIONS:
        if name.replace("_", "") == squashed:
            return name
    raise argparse.ArgumentTypeError(
        f"unknown operation {text!r} (one of: "
        f"{', '.join(n.title().replace('_', '') for n in OPERATIONS)})")


def _mechanism(text: str) -> str:
    name = text.upper().replace("_", "-")
    if name not in MECHANISMS:
        raise argparse.ArgumentTypeError(f"unknown SCRAM mechanism {text!r} (one of: "
                                         f"{', '.join(MECHANISMS)})")
    return name


def _security_common(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument(
        "--command-config", default=None, metavar="FILE",
        help="a Kafka client properties file (security.protocol, sasl.*, ssl.*) for the "
             "connection to the broker; sasl.jaas.config with PlainLoginModule or "
             "ScramLoginModule is read for its username and password")


def add_security_commands(subparsers: Any) -> None:
    """Add ``users`` and ``acls`` to the ``odradek`` subcommands."""
    users = subparsers.add_parser(
        "users", help="add, list and remove SCRAM users",
        description="Manage SASL/SCRAM credentials (KIP-554), like kafka-configs.sh "
                    "--entity-type users.")
    usub = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    add = usub.add_parser("add", help="add a user, or set a user's password")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--mechanism", required=True, action="append", type=_mechanism,
                     metavar="SCRAM-SHA-256|SCRAM-SHA-512",
                     help="the SCRAM mechanism to set a credential for (repeatable)")
    add.add_argument("--iterations", type=_positive, default=4096, metavar="N",
                     help="SCRAM iterations, 4096 to 16384 on Kafka (default 4096)")
    secret = add.add_mutually_exclusive_group()
    secret.add_argument("--password-file", metavar="FILE",
                        help="read the password from the first line of FILE ('-': "
                             "standard input)")
    secret.add_argument("--password", metavar="PASSWORD",
                        help="the password (visible to other local users in the process "
                             "list; default: asked for on the terminal)")
    _security_common(add)

    lst = usub.add_parser("list", help="the users' SCRAM mechanisms and iterations")
    lst.add_argument("names", nargs="*", metavar="NAME", help="users to show (default: all)")
    _security_common(lst)

    remove = usub.add_parser("remove", help="remove a user's SCRAM credential")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--mechanism", required=True, action="append", type=_mechanism,
                        metavar="SCRAM-SHA-256|SCRAM-SHA-512",
                        help="the mechanism whose credential goes (repeatable)")
    _security_common(remove)

    acls = subparsers.add_parser(
        "acls", help="add, list and remove ACLs",
        description="Manage ACLs, like kafka-acls.sh. The broker needs an authorizer "
                    "(authorizer.class.name).")
    asub = acls.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    for name, text in (("add", "add ACLs"), ("list", "list ACLs, by resource"),
                       ("remove", "remove the ACLs matching a filter")):
        cmd = asub.add_parser(name, help=text)
        _resource_options(cmd, name)
        _security_common(cmd)


def _resource_options(cmd: argparse.ArgumentParser, action: str) -> None:
    res = cmd.add_argument_group("resources")
    res.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                     help="a topic (repeatable; '*': every topic)")
    res.add_argument("--group", action="append", default=[], metavar="GROUP",
                     help="a consumer group (repeatable; '*': every group)")
    res.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                     help="a transactional id (repeatable; '*': every one)")
    res.add_argument("--cluster", action="store_true", help="the cluster")
    default = "literal" if action == "add" else "any"
    choices = ("literal", "prefixed") if action == "add" else PATTERN_TYPES
    res.add_argument("--resource-pattern-type", type=str.lower, choices=choices,
                     default=default,
                     help=f"how resource names match (default {default}; match: the ACLs "
                          "that apply to the name, wildcard and prefixes included)"
                          if action != "add" else
                          "literal: the name itself (default); prefixed: every name "
                          "starting with it")
    if action == "list":
        cmd.add_argument("--principal", action="append", default=[], metavar="User:NAME",
                         help="only the ACLs of this principal (repeatable)")
        return
    who = cmd.add_argument_group("principals, hosts and operations")
    who.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME",
                     help="the principal the ACL allows (repeatable; User:* for everyone)")
    who.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME",
                     help="the principal the ACL denies (repeatable)")
    who.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                     help="the host the allowing ACLs apply to (repeatable; default * "
                          "when adding, any when removing)")
    who.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                     help="the host the denying ACLs apply to (repeatable)")
    who.add_argument("--operation", action="append", default=[], type=_operation,
                     metavar="OP",
                     help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                          "DescribeConfigs, AlterConfigs, IdempotentWrite or All (any "
                          "case; repeatable; default All when adding, any when removing)")
    conv = cmd.add_argument_group("conveniences (as kafka-acls.sh)")
    conv.add_argument("--producer", action="store_true",
                      help="WRITE, DESCRIBE and CREATE on --topic; WRITE and DESCRIBE on "
                           "--transactional-id")
    conv.add_argument("--idempotent", action="store_true",
                      help="with --producer: IDEMPOTENT_WRITE on the cluster")
    conv.add_argument("--consumer", action="store_true",
                      help="READ and DESCRIBE on --topic, READ on --group")
    if action == "remove":
        cmd.add_argument("--force", action="store_true",
                         help="remove without asking for confirmation")


# --- running -------------------------------------------------------------------------


def run_security_command(args: argparse.Namespace) -> int:
    action = args.users_command if args.command == "users" else args.acls_command
    name = f"{args.command} {action}"
    _log.setLevel(logging.DEBUG if args.verbose else logging.CRITICAL + 1)
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        print(f"odradek {name}: needs the confluent-kafka package "
              "(pip install confluent-kafka)", file=sys.stderr)
        return 1
    handlers = {("users", "add"): _users_add, ("users", "list"): _users_list,
                ("users", "remove"): _users_remove, ("acls", "add"): _acls_add,
                ("acls", "list"): _acls_list, ("acls", "remove"): _acls_remove}
    return report_errors(name, lambda: handlers[(args.command, action)](args))


class _Admin:
    """An AdminClient made from the options, and the errors librdkafka reported."""

    def __init__(self, args: argparse.Namespace) -> None:
        from confluent_kafka.admin import AdminClient

        self.args = args
        self.errors = _BrokerErrors()
        extra = read_command_config(args.command_config) if args.command_config else {}
        if args.bootstrap_server is None and "bootstrap.servers" in extra:
            args.bootstrap_server = extra.pop("bootstrap.servers")
        extra.pop("bootstrap.servers", None)
        config = _config(args, self.errors)
        config.update(extra)
        config.update(dict(args.property))  # -X last, as in every console tool
        self.client = _new_client(AdminClient, config, self.errors)
        self.timeout = args.request_timeout_ms / 1000

    def wait(self, future: Any, doing: str, needs: str) -> Any:
        """A future's result; a failure as a ToolError saying what went wrong."""
        from confluent_kafka import KafkaException

        try:
            return future.result()
        except KafkaException as exc:
            raise self.failure(exc, doing, needs) from None

    def failure(self, exc: BaseException, doing: str, needs: str) -> ToolError:
        code = _code_name(exc)
        where = _bootstrap(self.args)
        if code in ("_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN"):
            last = self.errors.latest()
            if last is not None and last.name() == "_AUTHENTICATION":
                return ToolError(f"cannot log in to the broker at {where}: {last.str()}")
            if last is not None:
                return ToolError(f"cannot reach the broker at {where}: {last.str()}")
            return ToolError(f"no answer from {where} to {doing}: {_reason(exc)}")
        if code == "SECURITY_DISABLED":
            return ToolError(f"cannot {doing}: no authorizer is configured on the broker: "
                             "set authorizer.class.name")
        if code == "CLUSTER_AUTHORIZATION_FAILED":
            return ToolError(f"cannot {doing}: not authorized: the principal this client "
                             f"logs in as needs {needs} on the cluster (or to be one of "
                             "the broker's super.users); see --command-config")
        return ToolError(f"cannot {doing}: {_reason(exc)}")


# --- command-config --------------------------------------------------------------------


_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                   r"(?P<options>.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))')
_LOGIN_MODULES = {"org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
                  "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM"}
# Java client settings with no librdkafka counterpart that change nothing here.
_JAVA_ONLY_IGNORED = {"ssl.truststore.type", "ssl.keystore.type", "ssl.protocol",
                      "ssl.enabled.protocols", "ssl.truststore.password",
                      "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
                      "default.api.timeout.ms", "retries", "retry.backoff.ms"}


def read_properties(text: str) -> dict[str, str]:
    """Java ``.properties``: ``key=value``, ``key: value`` or ``key value``; ``#`` and
    ``!`` comments; a line ending in a backslash continues on the next."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if _continues(line):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        props[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        props[key] = value
    return props


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    match = re.match(r"((?:[^\\=:\s]|\\.)*)\s*[=:\s]?\s*(.*)$", line, re.S)
    assert match is not None
    unescape = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    key, value = (re.sub(r"\\(.)", lambda m: unescape.get(m[1], m[1]), part)
                  for part in match.groups())
    return key.strip(), value.strip()


def read_command_config(path: str) -> dict[str, str]:
    """The librdkafka settings for a Kafka client properties file."""
    try:
        with open(path, encoding="utf-8") as f:
            props = read_properties(f.read())
    except OSError as exc:
        raise ToolError(f"cannot read --command-config {path}: {exc.strerror}", 2) from None
    try:
        return translate_client_config(props)
    except ValueError as exc:
        raise ToolError(f"--command-config {path}: {exc}", 2) from None


def translate_client_config(props: dict[str, str]) -> dict[str, str]:
    """Java client settings as librdkafka's (ValueError: one without an equivalent)."""
    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        match = _JAAS.match(jaas)
        if match is None:
            raise ValueError("sasl.jaas.config is not a JAAS line "
                             "('LoginModule required username=\"...\" password=\"...\";')")
        kind = _LOGIN_MODULES.get(match["module"])
        if kind is None:
            raise ValueError(f"sasl.jaas.config: {match['module']} cannot be used from "
                             "here: give librdkafka's settings instead (sasl.username and "
                             "sasl.password for PLAIN and SCRAM, sasl.oauthbearer.* for "
                             "OAUTHBEARER, sasl.kerberos.* for GSSAPI)")
        options = {m[1]: (re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3])
                   for m in _JAAS_OPTION.finditer(match["options"])}
        if "username" not in options or "password" not in options:
            raise ValueError(f"sasl.jaas.config: {match['module'].rsplit('.', 1)[-1]} "
                             "needs username=\"...\" and password=\"...\"")
        out.setdefault("sasl.username", options["username"])
        out.setdefault("sasl.password", options["password"])
        mechanism = out.get("sasl.mechanism", "GSSAPI").upper()  # GSSAPI: both defaults
        if kind == "PLAIN" and "sasl.mechanism" not in out:
            out["sasl.mechanism"] = "PLAIN"
        elif kind == "PLAIN" and mechanism != "PLAIN":
            raise ValueError(f"sasl.jaas.config uses PlainLoginModule but sasl.mechanism "
                             f"is {out['sasl.mechanism']}")
        elif kind == "SCRAM" and mechanism not in MECHANISMS:
            raise ValueError("sasl.jaas.config uses ScramLoginModule: set sasl.mechanism to "
                             "SCRAM-SHA-256 or SCRAM-SHA-512")
    stores = {"truststore": "PEM", "keystore": "PEM"}
    for store in stores:
        kind = out.pop(f"ssl.{store}.type", "JKS").upper()
        location = out.pop(f"ssl.{store}.location", None)
        if location is None:
            continue
        if kind == "PEM":
            if store == "truststore":
                out.setdefault("ssl.ca.location", location)
            else:  # the key and its certificate chain in one PEM file
                out.setdefault("ssl.certificate.location", location)
                out.setdefault("ssl.key.location", location)
        elif kind == "PKCS12" and store == "keystore":
            out["ssl.keystore.location"] = location  # librdkafka reads PKCS#12 keystores
        else:
            raise ValueError(f"ssl.{store}.type={kind} cannot be read by librdkafka: convert "
                             f"the {store} to PEM (ssl.{store}.type=PEM)"
                             + (" or PKCS12" if store == "keystore" else ""))
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"  # Java's empty: off
    for key in _JAVA_ONLY_IGNORED:
        out.pop(key, None)
    return out


# --- users -----------------------------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password = args.password
    elif args.password_file is not None:
        try:
            if args.password_file == "-":
                password = sys.stdin.readline()
            else:
                with open(args.password_file, encoding="utf-8") as f:
                    password = f.readline()
        except OSError as exc:
            raise ToolError(f"cannot read {args.password_file}: {exc.strerror}", 2) from None
        password = password.rstrip("\r\n")
    else:
        if sys.stdin is None or not sys.stdin.isatty():
            raise ToolError("no terminal to ask for the password on: give --password-file "
                            "FILE ('-' for standard input) or --password", 2)
        try:
            password = getpass.getpass(f"Password for {args.name}: ")
            if getpass.getpass("Again: ") != password:
                raise ToolError("the passwords differ; nothing changed", 2)
        except EOFError:
            raise ToolError("no password given; nothing changed", 2) from None
    if not password:
        raise ToolError("the password is empty", 2)
    return password


def _scram(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
            "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}[name]


def _mechanism_name(mechanism: Any) -> str:
    return str(getattr(mechanism, "name", mechanism)).replace("_", "-")


def _users_add(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    mechanisms = list(dict.fromkeys(args.mechanism))
    password = _read_password(args)
    admin = _Admin(args)
    futures = admin.client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(args.name, ScramCredentialInfo(_scram(m), args.iterations),
                                      password.encode())
         for m in mechanisms], request_timeout=admin.timeout)
    admin.wait(futures[args.name], f"set the credentials of user {args.name!r}",
               "ALTER")
    for m in mechanisms:
        print(f"Set {m} credential for user {args.name} ({args.iterations} iterations).")
    return 0


def _users_list(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    admin = _Admin(args)
    doing, needs = "describe SCRAM credentials", "DESCRIBE"
    refusal = may_describe_cluster(admin)  # a refused describe crashes librdkafka
    if refusal == "CLUSTER_AUTHORIZATION_FAILED":
        raise _refused(admin, refusal, doing)
    names = list(dict.fromkeys(args.names))
    found: dict[str, Any] = {}
    missing: list[str] = []
    if not names:
        found = admin.wait(admin.client.describe_user_scram_credentials(
            request_timeout=admin.timeout), doing, needs)
    else:
        futures = admin.client.describe_user_scram_credentials(
            names, request_timeout=admin.timeout)
        for name in names:
            try:
                found[name] = futures[name].result()
            except KafkaException as exc:
                if _code_name(exc) != "RESOURCE_NOT_FOUND":
                    raise admin.failure(exc, doing, needs) from None
                missing.append(name)
    for name in sorted(found):
        for info in sorted(found[name].scram_credential_infos,
                           key=lambda i: _mechanism_name(i.mechanism)):
            print(f"{name} {_mechanism_name(info.mechanism)} iterations={info.iterations}")
    if missing:
        raise ToolError(", ".join(f"user {n!r} has no SCRAM credentials" for n in missing))
    return 0


def _users_remove(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import UserScramCredentialDeletion

    mechanisms = list(dict.fromkeys(args.mechanism))
    admin = _Admin(args)
    futures = admin.client.alter_user_scram_credentials(
        [UserScramCredentialDeletion(args.name, _scram(m)) for m in mechanisms],
        request_timeout=admin.timeout)
    try:
        futures[args.name].result()
    except KafkaException as exc:
        if _code_name(exc) == "RESOURCE_NOT_FOUND":
            which = " or ".join(mechanisms)
            raise ToolError(f"user {args.name!r} has no {which} credential; nothing "
                            "removed") from None
        raise admin.failure(exc, f"remove the credentials of user {args.name!r}",
                            "ALTER") from None
    for m in mechanisms:
        print(f"Removed {m} credential of user {args.name}.")
    return 0


# --- acls ------------------------------------------------------------------------------


_TYPE_NAMES = {"TOPIC": "TOPIC", "GROUP": "GROUP", "BROKER": "CLUSTER",
               "TRANSACTIONAL_ID": "TRANSACTIONAL_ID"}


def _resource_type(kind: str) -> Any:
    from confluent_kafka.admin import ResourceType

    # librdkafka calls Kafka's CLUSTER resource type (4) BROKER.
    return {"TOPIC": ResourceType.TOPIC, "GROUP": ResourceType.GROUP,
            "CLUSTER": ResourceType.BROKER, "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID,
            "ANY": ResourceType.ANY}[kind]


def _pattern_type(name: str) -> Any:
    from confluent_kafka.admin import ResourcePatternType

    return getattr(ResourcePatternType, name.upper())


def _op(name: str) -> Any:
    from confluent_kafka.admin import AclOperation

    return getattr(AclOperation, name)


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("CLUSTER", CLUSTER_NAME))
    for kind, name in out:
        if not name:
            raise ToolError(f"an empty {kind.lower().replace('_', ' ')} name", 2)
    return list(dict.fromkeys(out))


def _operations_by_resource(args: argparse.Namespace, adding: bool,
                            ) -> list[tuple[str, str, list[str] | None]]:
    """(resource type, name, operations) to add or remove; operations None: any."""
    resources = _resources(args)
    if not (args.producer or args.consumer):
        if args.idempotent:
            raise ToolError("--idempotent goes with --producer", 2)
        if not resources:
            raise ToolError("give a resource: --topic, --group, --transactional-id or "
                            "--cluster", 2)
        ops = list(dict.fromkeys(args.operation)) or (["ALL"] if adding else None)
        if ops is not None:
            for kind, _name in resources:
                bad = [o for o in ops if o not in VALID_OPERATIONS[kind]]
                if bad:
                    raise ToolError(
                        f"{kind} ACLs cannot have operation(s) {', '.join(bad)} (valid: "
                        f"{', '.join(sorted(VALID_OPERATIONS[kind]))})", 2)
        return [(kind, name, ops) for kind, name in resources]
    if args.operation or args.deny_principal or args.deny_host:
        raise ToolError("--producer and --consumer cannot be combined with --operation, "
                        "--deny-principal or --deny-host", 2)
    if not args.topic:
        raise ToolError(f"with {'--producer' if args.producer else '--consumer'} give "
                        "--topic", 2)
    if args.cluster:
        raise ToolError("--cluster does not go with --producer or --consumer (use "
                        "--producer --idempotent)", 2)
    if args.idempotent and not args.producer:
        raise ToolError("--idempotent goes with --producer", 2)
    wanted: dict[tuple[str, str], list[str]] = {}

    def grant(kind: str, name: str, *ops: str) -> None:
        have = wanted.setdefault((kind, name), [])
        have.extend(o for o in ops if o not in have)

    if args.consumer:
        if not args.group:
            raise ToolError("with --consumer give --group", 2)
        if args.transactional_id and not args.producer:
            raise ToolError("--transactional-id goes with --producer", 2)
        for topic in args.topic:
            grant("TOPIC", topic, "READ", "DESCRIBE")
        for group in args.group:
            grant("GROUP", group, "READ")
    if args.producer:
        if args.group and not args.consumer:
            raise ToolError("--group goes with --consumer", 2)
        for topic in args.topic:
            grant("TOPIC", topic, "WRITE", "DESCRIBE", "CREATE")
        for tid in args.transactional_id:
            grant("TRANSACTIONAL_ID", tid, "WRITE", "DESCRIBE")
        if args.idempotent:
            grant("CLUSTER", CLUSTER_NAME, "IDEMPOTENT_WRITE")
    return [(kind, name, ops) for (kind, name), ops in wanted.items()]


def _principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ToolError(f"a principal is TYPE:NAME (e.g. User:alice), got {text!r}", 2)
    return text


@overload
def _entries(args: argparse.Namespace, adding: Literal[True],
             ) -> Sequence[tuple[str, str, Any]]: ...
@overload
def _entries(args: argparse.Namespace, adding: bool,
             ) -> Sequence[tuple[str | None, str | None, Any]]: ...
def _entries(args: argparse.Namespace, adding: bool,
             ) -> Sequence[tuple[str | None, str | None, Any]]:
    """(principal, host, permission type) triples; None: any (never when adding: a host
    defaults to "*", and no principal is an error)."""
    from confluent_kafka.admin import AclPermissionType

    out: list[tuple[str | None, str | None, Any]] = []
    for principals, hosts, permission, flag in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW, "allow"),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY, "deny")):
        if hosts and not principals:
            raise ToolError(f"--{flag}-host needs --{flag}-principal", 2)
        hosts_or_default: list[str | None] = list(hosts) or (["*"] if adding else [None])
        out += [(_principal(p), h, permission) for p in dict.fromkeys(principals)
                for h in dict.fromkeys(hosts_or_default)]
    if adding and not out:
        raise ToolError("give --allow-principal or --deny-principal", 2)
    if not out:
        out.append((None, None, AclPermissionType.ANY))
    return out


def acl_line(binding: Any) -> str:
    """An ACL as Kafka's AccessControlEntry prints."""
    return (f"(principal={binding.principal}, host={binding.host}, "
            f"operation={binding.operation.name}, "
            f"permissionType={binding.permission_type.name})")


def pattern_line(binding: Any) -> str:
    """A binding's resource as Kafka's ResourcePattern prints."""
    kind = _TYPE_NAMES.get(binding.restype.name, binding.restype.name)
    return (f"ResourcePattern(resourceType={kind}, name={binding.name}, "
            f"patternType={binding.resource_pattern_type.name})")


def print_acls(bindings: Iterable[Any], heading: str = "Current ACLs for resource") -> None:
    by_resource: dict[str, list[Any]] = {}
    for binding in bindings:
        by_resource.setdefault(pattern_line(binding), []).append(binding)
    for resource in sorted(by_resource):
        lines = sorted(dict.fromkeys(acl_line(b) for b in by_resource[resource]))
        print(f"{heading} `{resource}`:")
        for line in lines:
            print(f"\t{line}")
        print()


def _describe(admin: _Admin, filters: Iterable[Any]) -> list[Any]:
    found: dict[str, Any] = {}
    for flt in filters:
        for binding in admin.wait(admin.client.describe_acls(flt, request_timeout=admin.timeout),
                                  "list ACLs", "DESCRIBE"):
            found.setdefault(str(binding), binding)
    return list(found.values())


def may_describe_cluster(admin: _Admin) -> str | None:
    """Whether this client's principal may DESCRIBE the cluster (list ACLs and SCRAM
    users): None if so, else the refusal's error name (SECURITY_DISABLED: no authorizer,
    where DescribeUserScramCredentials is allowed but the ACL APIs are not).

    librdkafka cannot be asked directly: it drops DescribeAcls' top-level error (a refused
    DescribeAcls looks like no ACLs), and a DescribeUserScramCredentials answer with a
    top-level error (Kafka's and Odradek's refusal) makes it free memory it does not own
    and crash. So: DeleteAcls with a filter nothing matches answers SECURITY_DISABLED,
    CLUSTER_AUTHORIZATION_FAILED or nothing (ALTER, which implies DESCRIBE); without
    ALTER, the cluster's authorized operations (KIP-430) if the broker reports them,
    else whether some ACL names the cluster (how a principal without ALTER gets
    DESCRIBE in Kafka's model)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBindingFilter, AclPermissionType, ResourcePatternType

    # AclBindingFilter's None matches any name, principal or host (confluent-kafka's docs
    # and code); its type hints, those of AclBinding, say str: hence the arg-type ignores
    # on AclBindingFilter's None arguments in this module.
    nobody = AclBindingFilter(_resource_type("TOPIC"), "__odradek-acl-probe",
                              ResourcePatternType.LITERAL, "User:__odradek-acl-probe",
                              None,  # type: ignore[arg-type]  # None: any host
                              _op("ANY"), AclPermissionType.ANY)
    for future in admin.client.delete_acls([nobody], request_timeout=admin.timeout).values():
        try:
            future.result()
            return None
        except KafkaException as exc:
            code = _code_name(exc)
            if code == "SECURITY_DISABLED":
                return code
            if code != "CLUSTER_AUTHORIZATION_FAILED":
                raise admin.failure(exc, "check this client's authorization", "DESCRIBE") \
                    from None
    cluster = admin.wait(admin.client.describe_cluster(include_authorized_operations=True,
                                                       request_timeout=admin.timeout),
                         "describe the cluster", "DESCRIBE")
    if cluster.authorized_operations is not None:
        names = {op.name for op in cluster.authorized_operations}
        return None if names & {"DESCRIBE", "ALL"} else "CLUSTER_AUTHORIZATION_FAILED"
    named = _describe(admin, [AclBindingFilter(_resource_type("CLUSTER"), CLUSTER_NAME,
                                               ResourcePatternType.MATCH,
                                               None, None,  # type: ignore[arg-type]  # None: any
                                               _op("ANY"), AclPermissionType.ANY)])
    return None if named else "CLUSTER_AUTHORIZATION_FAILED"


def _refused(admin: _Admin, code: str, doing: str) -> ToolError:
    from confluent_kafka import KafkaError, KafkaException

    return admin.failure(KafkaException(KafkaError(getattr(KafkaError, code))), doing,
                         "DESCRIBE")


def _acls_add(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AclPermissionType

    pattern = _pattern_type(args.resource_pattern_type)
    resources = _operations_by_resource(args, adding=True)
    entries = _entries(args, adding=True)
    bindings = list({str(b): b for b in (
        AclBinding(_resource_type(kind), name, pattern, principal, host, _op(op), permission)
        for kind, name, ops in resources for op in ops or ()
        for principal, host, permission in entries)}.values())
    admin = _Admin(args)
    print_acls(bindings, "Adding ACLs for resource")
    futures = admin.client.create_acls(bindings, request_timeout=admin.timeout)
    for future in futures.values():
        admin.wait(future, "add ACLs", "ALTER")
    print_acls(_describe(admin, (
        AclBindingFilter(_resource_type(kind), name, pattern,
                         None, None,  # type: ignore[arg-type]  # None: any principal, host
                         _op("ANY"), AclPermissionType.ANY) for kind, name, _ops in resources)))
    return 0


def _list_filters(args: argparse.Namespace) -> list[Any]:
    from confluent_kafka.admin import AclBindingFilter, AclPermissionType

    pattern = _pattern_type(args.resource_pattern_type)
    resources: list[tuple[str, str | None]] = list(_resources(args)) or [("ANY", None)]
    principals: list[str | None] = [_principal(p) for p in dict.fromkeys(args.principal)]
    return [AclBindingFilter(_resource_type(kind),
                             name, pattern, principal, None,  # type: ignore[arg-type]  # None: any
                             _op("ANY"), AclPermissionType.ANY)
            for kind, name in resources for principal in principals or [None]]


def _acls_list(args: argparse.Namespace) -> int:
    admin = _Admin(args)
    found = _describe(admin, _list_filters(args))
    if not found:  # none, or a refusal librdkafka does not pass on
        refusal = may_describe_cluster(admin)
        if refusal is not None:
            raise _refused(admin, refusal, "list ACLs")
    print_acls(found)
    return 0


def _acls_remove(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBindingFilter

    pattern = _pattern_type(args.resource_pattern_type)
    resources = _operations_by_resource(args, adding=False)
    entries = _entries(args, adding=False)
    filters = list({str(f): f for f in (
        AclBindingFilter(_resource_type(kind), name, pattern,
                         principal, host,  # type: ignore[arg-type]  # None: any
                         _op(op), permission)
        for kind, name, ops in resources for op in ops or ["ANY"]
        for principal, host, permission in entries)}.values())
    interactive = sys.stdin is not None and sys.stdin.isatty()
    if not args.force and not interactive:
        raise ToolError("standard input is not a terminal to confirm on: give --force to "
                        "remove without confirmation", 2)
    admin = _Admin(args)
    if not args.force:
        matching = _describe(admin, filters)
        if not matching:
            refusal = may_describe_cluster(admin)
            if refusal is not None:
                raise _refused(admin, refusal, "list ACLs")
            print("No ACLs match; nothing removed.")
            return 0
        print_acls(matching, "ACLs to remove for resource")
        sys.stderr.write(f"Remove these {len(matching)} ACL(s)? (y/n) ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise ToolError("not confirmed; nothing removed")
    removed: dict[str, Any] = {}
    futures = admin.client.delete_acls(filters, request_timeout=admin.timeout)
    for future in futures.values():
        try:
            result = future.result()
        except KafkaException as exc:
            raise admin.failure(exc, "remove ACLs", "ALTER") from None
        for binding in result:
            removed.setdefault(str(binding), binding)
    if not removed:
        print("No ACLs match; nothing removed.")
        return 0
    print_acls(removed.values(), "Removed ACLs for resource")
    return 0
