"""The console tools Kafka users expect, on confluent-kafka (librdkafka) against any
Kafka-compatible broker, Odradek included:

- ``odradek topics create NAME [--partitions N] [--replication-factor R] [--config K=V ...]``,
  ``topics list``, ``topics describe [NAME ...] [--under-replicated-partitions]
  [--unavailable-partitions]`` (with each partition's leader epoch, read with Odradek's
  own client: librdkafka does not show it), ``topics alter NAME --config K=V ...
  [--delete-config K ...]``, ``topics delete NAME ...`` (like ``kafka-topics.sh``);
- ``odradek produce TOPIC``: one record per line of stdin (like
  ``kafka-console-producer.sh``);
- ``odradek consume TOPIC``: prints records as they arrive, without a consumer group:
  the partitions are assigned explicitly (like ``kafka-console-consumer.sh --partition``);
- ``odradek groups list | describe | reset-offsets | delete``: consumer groups (like
  ``kafka-consumer-groups.sh``), in ``cli/groups.py``.

Every command takes ``--bootstrap-server HOST:PORT`` (default ``$ODRADEK_BOOTSTRAP_SERVER``,
else 127.0.0.1:9092) and ``-X NAME=VALUE`` for any librdkafka setting (applied last).
Exit codes: 0 done, 1 the broker refused or could not be reached, 2 bad usage, 130
interrupted. librdkafka's own log lines are shown only with ``--verbose``; the errors they
report are summed up in the final message instead.

confluent_kafka is imported inside the functions: the rest of the command line works
without it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP_SERVER"
COMMANDS = ("topics", "produce", "consume", "groups")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
FORMATS = ("plain", "kv", "json")

_log = logging.getLogger("odradek.tools.librdkafka")


class ToolError(Exception):
    """A failure explained to the user in one line; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --- the parser ----------------------------------------------------------------------


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _offset(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    try:
        return _non_negative(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a non-negative offset, 'earliest' or 'latest', got {text!r}") from None


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", default=None, metavar="HOST:PORT",
        help=f"the broker(s) to connect to, comma-separated (default ${BOOTSTRAP_ENV}, "
             f"else {DEFAULT_BOOTSTRAP})")
    parser.add_argument(
        "-X", "--property", action="append", default=[], type=_pair, metavar="NAME=VALUE",
        help="a librdkafka client setting, e.g. -X socket.timeout.ms=5000 (repeatable; "
             "applied after every other option)")
    parser.add_argument(
        "--request-timeout-ms", type=_positive, default=30_000, metavar="MS",
        help="how long to wait for the broker to answer a metadata or admin request "
             "(default 30000)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show librdkafka's log lines on stderr")


def add_tool_commands(subparsers: Any) -> None:
    """Add ``topics``, ``produce``, ``consume`` and ``groups`` to the ``odradek``
    subcommands."""
    from odradek.cli import groups
    topics = subparsers.add_parser(
        "topics", help="create, list, describe, alter and delete topics",
        description="Manage topics, like kafka-topics.sh.")
    tsub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)

    create = tsub.add_parser("create", help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=_positive, default=None, metavar="N",
                        help="number of partitions (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=_positive, default=None, metavar="R",
                        help="replicas per partition (default: the broker's "
                             "default.replication.factor)")
    create.add_argument("--config", action="append", default=[], type=_pair,
                        metavar="NAME=VALUE", help="a topic setting (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed if the topic already exists")
    _common(create)

    lst = tsub.add_parser("list", help="list the topic names, one per line")
    _common(lst)

    describe = tsub.add_parser(
        "describe", help="partitions, leaders, leader epochs, replicas, ISR and "
                         "non-default settings")
    describe.add_argument("names", nargs="*", metavar="NAME",
                          help="topics to describe (default: all)")
    describe.add_argument("--under-replicated-partitions", action="store_true",
                          help="only partitions with fewer in-sync replicas than replicas")
    describe.add_argument("--unavailable-partitions", action="store_true",
                          help="only partitions without a live leader")
    _common(describe)

    alter = tsub.add_parser("alter", help="change or remove a topic's settings")
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--config", action="append", default=[], type=_pair,
                       metavar="NAME=VALUE", help="set a topic setting (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                       help="return a setting to its default (repeatable)")
    _common(alter)

    delete = tsub.add_parser("delete", help="delete topics")
    delete.add_argument("names", nargs="+", metavar="NAME")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed for topics that do not exist")
    _common(delete)

    produce = subparsers.add_parser(
        "produce", help="send each line of stdin as a record",
        description="Send one record per line of stdin, like kafka-console-producer.sh. "
                    "Prints a summary on stderr at EOF.")
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("--key-separator", default=None, metavar="SEP",
                         help="the part of each line before the first SEP is the key "
                              "(a line without SEP is an error)")
    produce.add_argument("--header", action="append", default=[], type=_pair,
                         metavar="NAME=VALUE", help="a header on every record (repeatable)")
    produce.add_argument("--partition", type=_non_negative, default=None, metavar="N",
                         help="send every record to partition N (default: by key, or "
                              "spread)")
    produce.add_argument("--compression", choices=COMPRESSIONS, default="none",
                         help="batch compression (default none)")
    produce.add_argument("--acks", choices=("0", "1", "all"), default="all",
                         help="acknowledgements to wait for (default all)")
    produce.add_argument("--delivery-timeout-ms", type=_positive, default=120_000,
                         metavar="MS",
                         help="give up on a record not acknowledged within MS, retries "
                              "included (default 120000)")
    _common(produce)

    consume = subparsers.add_parser(
        "consume", help="print the records of a topic",
        description="Print records, like kafka-console-consumer.sh, without a consumer "
                    "group: reads all partitions of TOPIC (or --partition), from the end "
                    "unless told otherwise, until Ctrl-C, --max-messages or --timeout-ms.")
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument("--from-beginning", action="store_true",
                         help="start at the earliest offset instead of the end")
    consume.add_argument("--partition", type=_non_negative, default=None, metavar="N",
                         help="read only partition N")
    consume.add_argument("--offset", type=_offset, default=None, metavar="N",
                         help="start at offset N (or 'earliest', 'latest'); needs "
                              "--partition")
    consume.add_argument("--max-messages", type=_positive, default=None, metavar="N",
                         help="stop after N records")
    consume.add_argument("--timeout-ms", type=_positive, default=None, metavar="MS",
                         help="stop when no record arrives for MS")
    consume.add_argument(
        "--format", choices=FORMATS, default="plain",
        help="plain: the value; kv: key TAB value; json: one object per line with topic, "
             "partition, offset, timestamp, timestamp_type, key, value and headers (a list "
             "of [name, value] pairs), bytes decoded as UTF-8 (default plain)")
    consume.add_argument("--print-headers", action="store_true",
                         help="plain/kv: prefix headers as NAME:VALUE,... (or NO_HEADERS)")
    consume.add_argument("--print-timestamp", action="store_true",
                         help="plain/kv: prefix CreateTime:MS or LogAppendTime:MS")
    _common(consume)

    groups.add_parser(subparsers)

def run_tool(args: argparse.Namespace) -> int | None:
    """Run ``args`` if it is one of the console tools; ``None`` if it is another command."""
    command = getattr(args, "command", None)
    if command not in COMMANDS:
        return None
    name = {"topics": f"topics {getattr(args, 'topics_command', '')}",
            "groups": f"groups {getattr(args, 'groups_command', '')}"}.get(command, command)
    _log.setLevel(logging.DEBUG if args.verbose else logging.CRITICAL + 1)
    from odradek.cli import groups

    handler: Callable[[argparse.Namespace], int] = {
        "topics": _topics, "produce": _produce, "consume": _consume,
        "groups": groups.run}[command]
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        print(f"odradek {name}: needs the confluent-kafka package "
              "(pip install confluent-kafka)", file=sys.stderr)
        return 1
    return report_errors(name, lambda: handler(args))


# --- shared --------------------------------------------------------------------------


def report_errors(name: str, run: Callable[[], int]) -> int:
    """Run a console command: its exit code, or a ToolError's message on stderr as one
    line (``odradek NAME: ...``) and its code; Ctrl-C is 130."""
    try:
        return run()
    except ToolError as exc:
        print(f"odradek {name}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"odradek {name}: interrupted", file=sys.stderr)
        return 130


def _bootstrap(args: argparse.Namespace) -> str:
    return args.bootstrap_server or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


class _BrokerErrors:
    """The ``error_cb`` of a client: keeps the latest error librdkafka reported on its own
    (connection refused, all brokers down) to explain a later timeout."""

    def __init__(self) -> None:
        self.last: Any = None
        self.client: Any = None

    def __call__(self, err: Any) -> None:
        self.last = err

    def latest(self) -> Any:
        # poll() serves the callbacks librdkafka has queued. (On a consumer it could also
        # return a record: errors are only looked at before any partition is assigned.)
        if self.client is not None:
            self.client.poll(0)
        return self.last

    def hint(self) -> str:
        last = self.latest()
        return f" (last broker error: {last.str()})" if last is not None else ""


def _config(args: argparse.Namespace, errors: _BrokerErrors,
            **settings: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": _bootstrap(args),
                              "error_cb": errors, "logger": _log}
    config.update(settings)
    config.update(dict(args.property))
    return config


def _new_client(factory: Callable[[dict[str, Any]], Any], config: dict[str, Any],
                errors: _BrokerErrors) -> Any:
    from confluent_kafka import KafkaException

    try:
        client = factory(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ToolError(f"invalid client setting: {_reason(exc)}", code=2) from None
    errors.client = client
    return client


def _reason(exc: BaseException) -> str:
    """One line for a KafkaException (or any exception)."""
    err: object = exc.args[0] if exc.args else None
    if hasattr(err, "str") and hasattr(err, "name"):
        return f"{err.str()} ({err.name()})"
    return str(exc)


def _code_name(exc: BaseException) -> str | None:
    err: object = exc.args[0] if exc.args else None
    return err.name() if hasattr(err, "name") else None


def _unreachable(args: argparse.Namespace, exc: BaseException, errors: _BrokerErrors,
                 what: str) -> ToolError:
    last = errors.latest()
    if last is not None:
        return ToolError(f"cannot reach the broker at {_bootstrap(args)}: {last.str()}")
    return ToolError(f"no answer from {_bootstrap(args)} to {what}: {_reason(exc)}")


def _metadata(client: Any, args: argparse.Namespace, errors: _BrokerErrors,
              topic: str | None = None) -> Any:
    from confluent_kafka import KafkaException

    try:
        return client.list_topics(topic, timeout=args.request_timeout_ms / 1000)
    except KafkaException as exc:
        raise _unreachable(args, exc, errors, "a metadata request") from None


def _topic_error(doing: str, name: str, exc: BaseException) -> str:
    if _code_name(exc) == "UNKNOWN_TOPIC_OR_PART":
        return f"cannot {doing}: topic {name!r} does not exist"
    return f"cannot {doing} topic {name!r}: {_reason(exc)}"


def _results(futures: dict[Any, Any], args: argparse.Namespace, errors: _BrokerErrors,
             ) -> dict[Any, BaseException | None]:
    """Wait for admin futures; a timeout with nothing reached is a connection failure."""
    from confluent_kafka import KafkaException

    out: dict[Any, BaseException | None] = {}
    for key, future in futures.items():
        try:
            future.result()
            out[key] = None
        except KafkaException as exc:
            if _code_name(exc) in ("_TIMED_OUT", "_TRANSPORT"):
                raise _unreachable(args, exc, errors, "an admin request") from None
            out[key] = exc
    return out


# --- topics --------------------------------------------------------------------------


def _topics(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    errors = _BrokerErrors()
    admin = _new_client(AdminClient, _config(args, errors), errors)
    action = {"create": _create, "list": _list, "describe": _describe, "alter": _alter,
              "delete": _delete}[args.topics_command]
    return action(admin, args, errors)


def _admin_timeouts(args: argparse.Namespace) -> dict[str, float]:
    seconds = args.request_timeout_ms / 1000
    return {"request_timeout": seconds, "operation_timeout": seconds}


def _create(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    from confluent_kafka.admin import NewTopic

    topic = NewTopic(args.name, num_partitions=args.partitions or -1,
                     replication_factor=args.replication_factor or -1,
                     config=dict(args.config))
    result = _results(admin.create_topics([topic], **_admin_timeouts(args)), args, errors)
    exc = result[args.name]
    if exc is not None:
        if _code_name(exc) == "TOPIC_ALREADY_EXISTS" and args.if_not_exists:
            print(f"Topic {args.name} already exists.")
            return 0
        raise ToolError(f"cannot create topic {args.name!r}: {_reason(exc)}")
    print(f"Created topic {args.name}.")
    return 0


def _list(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    for name in sorted(_metadata(admin, args, errors).topics):
        print(name)
    return 0


def _describe(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    # The partitions come from Odradek's own client: librdkafka's metadata has no leader
    # epochs. The settings still come through the AdminClient (DescribeConfigs).
    from odradek.cli.cluster import partition_line
    from odradek.client.metadata import KafkaClientError, fetch_metadata

    names = list(dict.fromkeys(args.names))
    try:
        metadata = fetch_metadata(_bootstrap(args), topics=names or None,
                                  timeout_s=args.request_timeout_ms / 1000)
    except KafkaClientError as exc:
        raise ToolError(f"cannot reach the broker at {_bootstrap(args)}: {exc}") from None
    names = names or sorted(metadata.topics)
    found = [n for n in names if n in metadata.topics]
    missing = [n for n in names if n not in found]
    if args.under_replicated_partitions or args.unavailable_partitions:
        # As kafka-topics.sh: only the matching partitions' lines, no topic lines.
        live = frozenset(metadata.brokers)
        for name in found:
            for p in metadata.topics[name].partitions:
                if ((args.under_replicated_partitions and p.under_replicated)
                        or (args.unavailable_partitions and p.unavailable(live))):
                    print(partition_line(p))
        sys.stdout.flush()
        if missing:
            raise ToolError(", ".join(f"topic {n!r} does not exist" for n in missing))
        return 0
    configs = _topic_configs(admin, args, found)
    for name in found:
        topic = metadata.topics[name]
        replication = max((len(p.replicas) for p in topic.partitions), default=0)
        line = (f"Topic: {name}\tPartitionCount: {len(topic.partitions)}\t"
                f"ReplicationFactor: {replication}")
        if configs is not None:
            line += "\tConfigs: " + ",".join(f"{k}={v}" for k, v in configs.get(name, []))
        if topic.error is not None:
            line += f"\tError: {topic.error}"
        print(line)
        for p in topic.partitions:
            print(partition_line(p))
    sys.stdout.flush()
    if missing:
        raise ToolError(", ".join(f"topic {n!r} does not exist" for n in missing))
    return 0


def _known(error: Any) -> bool:
    return error is None or error.name() != "UNKNOWN_TOPIC_OR_PART"


def _topic_configs(admin: Any, args: argparse.Namespace, names: list[str],
                   ) -> dict[str, list[tuple[str, str]]] | None:
    """The settings each topic overrides, by DescribeConfigs; ``None`` (and a note on
    stderr) if the broker cannot say."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    out: dict[str, list[tuple[str, str]]] = {}
    try:
        futures = admin.describe_configs(resources,
                                         request_timeout=args.request_timeout_ms / 1000)
        for resource, future in futures.items():
            entries = future.result()
            out[resource.name] = sorted(
                (name, "(sensitive)" if entry.is_sensitive else str(entry.value))
                for name, entry in entries.items()
                if _source(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                or (_source(entry) == ConfigSource.UNKNOWN_CONFIG.value
                    and not entry.is_default))
    except KafkaException as exc:
        why = ("the broker does not support DescribeConfigs"
               if _code_name(exc) == "_UNSUPPORTED_FEATURE"
               else f"DescribeConfigs failed: {_reason(exc)}")
        print(f"note: topic settings not shown: {why}", file=sys.stderr)
        return None
    return out


def _source(entry: Any) -> int:
    return getattr(entry.source, "value", entry.source)


def _alter(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    if not args.config and not args.delete_config:
        raise ToolError("nothing to do: give --config NAME=VALUE or --delete-config NAME",
                        code=2)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in args.config]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in args.delete_config]
    resource = ConfigResource(ResourceType.TOPIC, args.name, incremental_configs=entries)
    futures = admin.incremental_alter_configs(
        [resource], request_timeout=args.request_timeout_ms / 1000)
    for exc in _results(futures, args, errors).values():
        if exc is None:
            continue
        if _code_name(exc) == "_UNSUPPORTED_FEATURE":
            raise ToolError(f"the broker at {_bootstrap(args)} does not support "
                            "IncrementalAlterConfigs (KIP-339): topic settings cannot be "
                            "changed there yet")
        raise ToolError(_topic_error("alter", args.name, exc))
    print(f"Updated config for topic {args.name}.")
    return 0


def _delete(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    names = list(dict.fromkeys(args.names))
    results = _results(admin.delete_topics(names, **_admin_timeouts(args)), args, errors)
    failed = []
    for name in names:
        exc = results[name]
        if exc is None:
            print(f"Deleted topic {name}.")
        elif _code_name(exc) == "UNKNOWN_TOPIC_OR_PART" and args.if_exists:
            print(f"Topic {name} does not exist.")
        else:
            failed.append(_topic_error("delete", name, exc))
    sys.stdout.flush()
    if failed:
        raise ToolError("; ".join(failed))
    return 0


# --- produce -------------------------------------------------------------------------


class _Deliveries:
    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.fail(f"{err.str()} ({err.name()})")

    def fail(self, reason: str) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = reason


def _produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, Producer

    separator = args.key_separator.encode() if args.key_separator is not None else None
    if separator == b"":
        raise ToolError("--key-separator must not be empty", code=2)
    errors = _BrokerErrors()
    producer = _new_client(Producer, _config(
        args, errors, **{"compression.type": args.compression, "acks": args.acks,
                         "message.timeout.ms": args.delivery_timeout_ms,
                         "linger.ms": 5}), errors)
    deliveries = _Deliveries()
    headers = [(k, v.encode("utf-8", "surrogateescape")) for k, v in args.header] or None
    partition = {"partition": args.partition} if args.partition is not None else {}
    sent = 0
    bad_line: str | None = None
    interrupted = False
    try:
        for lineno, raw in enumerate(sys.stdin.buffer, 1):
            line = raw.removesuffix(b"\n").removesuffix(b"\r")
            key = None
            if separator is not None:
                key, sep, line = line.partition(separator)
                if not sep:
                    bad_line = (f"line {lineno} has no key separator "
                                f"{args.key_separator!r}; stopped there")
                    break
            while True:
                try:
                    producer.produce(args.topic, value=line, key=key, headers=headers,
                                     on_delivery=deliveries, **partition)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
                except KafkaException as exc:
                    deliveries.fail(_reason(exc))
                    break
            sent += 1
            producer.poll(0)
    except KeyboardInterrupt:
        interrupted = True
    try:
        producer.flush(1 if interrupted else args.delivery_timeout_ms / 1000 + 5)
    except KeyboardInterrupt:
        interrupted = True
    undelivered = sent - deliveries.delivered - deliveries.failed
    noun = "record" if deliveries.delivered == 1 else "records"
    print(f"produced {deliveries.delivered} {noun} to {args.topic}", file=sys.stderr)
    if interrupted:
        raise ToolError("interrupted" + (f"; {undelivered} records may not have been sent"
                                         if undelivered else ""), code=130)
    problems = []
    if deliveries.failed or undelivered:
        problems.append(f"{deliveries.failed + undelivered} of {sent} records were not "
                        f"delivered: {deliveries.first_error or 'no answer in time'}"
                        + (errors.hint() or _missing_topic_hint(producer, args.topic)))
    if bad_line:
        problems.append(bad_line)
    if problems:
        raise ToolError("; ".join(problems))
    return 0


def _missing_topic_hint(producer: Any, topic: str) -> str:
    """Why records to a reachable broker timed out, if it is that the topic is missing
    (and the broker does not create topics on first use)."""
    from confluent_kafka import KafkaException

    try:
        found = producer.list_topics(topic, timeout=2).topics.get(topic)
    except KafkaException:
        return ""
    if found is None or not _known(found.error):
        return f" (topic {topic!r} does not exist and the broker did not create it)"
    return ""


# --- consume -------------------------------------------------------------------------


def _consume(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    if args.offset is not None and args.partition is None:
        raise ToolError("--offset needs --partition", code=2)
    if args.offset is not None and args.from_beginning:
        raise ToolError("give --from-beginning or --offset, not both", code=2)
    errors = _BrokerErrors()
    consumer = _new_client(Consumer, _config(
        args, errors, **{
            # No group is joined or committed to: partitions are assigned explicitly.
            "group.id": f"odradek-console-{os.getpid()}",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "enable.partition.eof": False,
            # Answer sooner when some assigned partitions are empty: one fetch at a time
            # goes to a broker, and the broker holds it this long for data.
            "fetch.wait.max.ms": 100}), errors)
    try:
        metadata = _metadata(consumer, args, errors, args.topic)
        topic = metadata.topics.get(args.topic)
        if topic is None or not _known(topic.error):
            raise ToolError(f"topic {args.topic!r} does not exist")
        if topic.error is not None and not topic.partitions:
            raise ToolError(f"topic {args.topic!r}: {topic.error.str()}")
        partitions = sorted(topic.partitions)
        if args.partition is not None:
            if args.partition not in topic.partitions:
                raise ToolError(f"topic {args.topic!r} has no partition {args.partition} "
                                f"(it has {len(partitions)})")
            partitions = [args.partition]
        if args.offset == "earliest" or args.from_beginning:
            start = OFFSET_BEGINNING
        elif args.offset is None or args.offset == "latest":
            start = OFFSET_END
        else:
            start = args.offset
        consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
        count = _print_records(consumer, args)
    finally:
        consumer.close()
    noun = "message" if count == 1 else "messages"
    print(f"consumed {count} {noun} from {args.topic}", file=sys.stderr)
    return 0


def _print_records(consumer: Any, args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    count = 0
    idle = args.timeout_ms / 1000 if args.timeout_ms is not None else None
    last = time.monotonic()
    try:
        while args.max_messages is None or count < args.max_messages:
            wait = 0.5 if idle is None else min(0.5, max(0.0, last + idle - time.monotonic()))
            first = consumer.poll(wait)  # returns as soon as one record is there
            if first is None:
                if idle is not None and time.monotonic() >= last + idle:
                    break
                continue
            want = 500 if args.max_messages is None else args.max_messages - count - 1
            messages = [first, *consumer.consume(min(500, want), 0)] if want else [first]
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.name() == "_PARTITION_EOF":
                        continue
                    where = f"{msg.topic()} [{msg.partition()}]"
                    if err.fatal() or not err.retriable():
                        raise ToolError(f"{where}: {err.str()} ({err.name()})")
                    print(f"warning: {where}: {err.str()}", file=sys.stderr)
                    continue
                if args.max_messages is not None and count >= args.max_messages:
                    break
                out.write(_format(msg, args))
                count += 1
            out.flush()
            last = time.monotonic()
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a console consumer is stopped
    except BrokenPipeError:  # e.g. `odradek consume ... | head`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return count


_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def _format(msg: Any, args: argparse.Namespace) -> bytes:
    headers = msg.headers() or []
    kind, ts = msg.timestamp()
    if args.format == "json":
        record = {
            "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
            "timestamp": ts if kind in _TIMESTAMP_TYPES else None,
            "timestamp_type": _TIMESTAMP_TYPES.get(kind),
            "key": _text(msg.key()), "value": _text(msg.value()),
            "headers": [[k, _text(v)] for k, v in headers],
        }
        return json.dumps(record, ensure_ascii=False).encode() + b"\n"
    fields = []
    if args.print_timestamp:
        fields.append(f"{_TIMESTAMP_TYPES[kind]}:{ts}".encode() if kind in _TIMESTAMP_TYPES
                      else b"NO_TIMESTAMP")
    if args.print_headers:
        fields.append(b",".join(k.encode() + b":" + _raw(v) for k, v in headers)
                      if headers else b"NO_HEADERS")
    if args.format == "kv":
        fields.append(_raw(msg.key()))
    fields.append(_raw(msg.value()))
    return b"\t".join(fields) + b"\n"


def _text(data: bytes | str | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def _raw(data: bytes | str | None) -> bytes:
    if data is None:
        return b"null"
    return data.encode() if isinstance(data, str) else data
