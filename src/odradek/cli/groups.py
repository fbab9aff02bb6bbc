"""``odradek groups``: consumer groups, like ``kafka-consumer-groups.sh``, on
confluent-kafka's admin client (so it works against any Kafka-compatible broker).

- ``groups list``: one group id per line;
- ``groups describe GROUP``: state, protocol, members and their assignments, and per
  partition the committed offset, log end offset, lag and owner;
- ``groups reset-offsets GROUP --topic T (--to-earliest | --to-latest | --to-datetime ISO
  | --shift-by N) [--dry-run]``: prints the plan, and unless ``--dry-run`` commits it. As
  in Kafka, only a group without active members can be reset (a live member would commit
  over it), and new offsets are kept between the log start and end;
- ``groups delete GROUP ...``: a group without members, with its offsets.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from odradek.cli.tools import (
    ToolError,
    _BrokerErrors,
    _code_name,
    _common,
    _config,
    _metadata,
    _new_client,
    _reason,
    _results,
)

INACTIVE_STATES = ("EMPTY", "DEAD", "UNKNOWN")


def add_parser(subparsers: Any) -> None:
    groups = subparsers.add_parser(
        "groups", help="list, describe, reset the offsets of, and delete consumer groups",
        description="Manage consumer groups, like kafka-consumer-groups.sh.")
    gsub = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    lst = gsub.add_parser("list", help="list the group ids, one per line")
    _common(lst)

    describe = gsub.add_parser(
        "describe", help="members, assignments, committed offsets and lag of a group")
    describe.add_argument("group", metavar="GROUP")
    _common(describe)

    reset = gsub.add_parser(
        "reset-offsets", help="move an inactive group's committed offsets",
        description="Move the committed offsets of GROUP for TOPIC. The group must have no "
                    "active members. Prints the new offsets; --dry-run only prints them.")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", required=True, metavar="TOPIC",
                       help="the topic whose offsets move (every partition, or "
                            "TOPIC:P1,P2 for some)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to the log start")
    target.add_argument("--to-latest", action="store_true", help="to the log end")
    target.add_argument("--to-datetime", metavar="ISO", type=_datetime_ms,
                        help="to the first record at or after this time, e.g. "
                             "2026-01-31T12:00:00 (UTC unless an offset is given)")
    target.add_argument("--shift-by", metavar="N", type=int,
                        help="by N records from the committed offset (negative: back)")
    reset.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _common(reset)

    delete = gsub.add_parser("delete", help="delete inactive groups and their offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    _common(delete)


def _datetime_ms(text: str) -> int:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date and time: {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    errors = _BrokerErrors()
    admin = _new_client(AdminClient, _config(args, errors), errors)
    action = {"list": _list, "describe": _describe, "reset-offsets": _reset,
              "delete": _delete}[args.groups_command]
    return action(admin, args, errors)


# --- helpers -----------------------------------------------------------------------------


def _one(futures: dict[Any, Any], key: Any, args: argparse.Namespace,
         errors: _BrokerErrors, doing: str) -> Any:
    """The result of one admin future; its failure as a ToolError."""
    outcome = _results(futures, args, errors)[key]
    if outcome is not None:
        raise ToolError(f"cannot {doing}: {_reason(outcome)}")
    return futures[key].result()


def _group(admin: Any, args: argparse.Namespace, errors: _BrokerErrors, group: str) -> Any:
    futures = admin.describe_consumer_groups([group], **_request_timeout(args))
    return _one(futures, group, args, errors, f"describe group {group!r}")


def _state(description: Any) -> str:
    state = description.state
    return getattr(state, "name", str(state)).upper()


def _committed(admin: Any, args: argparse.Namespace, errors: _BrokerErrors,
               group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                **_request_timeout(args))
    answer = _one(futures, group, args, errors, f"fetch the offsets of group {group!r}")
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions or []
            if tp.offset >= 0}


def _log_offsets(admin: Any, args: argparse.Namespace, errors: _BrokerErrors,
                 partitions: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                 **_request_timeout(args))
    out = {}
    for tp, exc in _results(futures, args, errors).items():
        if exc is not None:
            raise ToolError(f"cannot list the offsets of {tp.topic}-{tp.partition}: "
                            f"{_reason(exc)}")
        out[(tp.topic, tp.partition)] = futures[tp].result().offset
    return out


def _request_timeout(args: argparse.Namespace) -> dict[str, float]:
    return {"request_timeout": args.request_timeout_ms / 1000}


def _table(rows: list[list[Any]]) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())


# --- actions -----------------------------------------------------------------------------


def _list(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    future = admin.list_consumer_groups(**_request_timeout(args))
    answer = _one({"all": future}, "all", args, errors, "list the groups")
    for group in sorted(g.group_id for g in answer.valid):
        print(group)
    return 0


def _describe(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    from confluent_kafka.admin import OffsetSpec

    group = args.group
    description = _group(admin, args, errors, group)
    state = _state(description)
    if state == "DEAD":
        raise ToolError(f"group {group!r} does not exist")
    owners: dict[tuple[str, int], str] = {}
    print(f"Group {group}: state {description.state.name.title()}, "
          f"assignor {description.partition_assignor or '-'}, "
          f"{len(description.members)} member(s)")
    if description.members:
        rows: list[list[Any]] = [["MEMBER", "CLIENT-ID", "HOST", "ASSIGNMENT"]]
        for m in description.members:
            assigned = sorted((tp.topic, tp.partition)
                              for tp in (m.assignment.topic_partitions if m.assignment else []))
            for tp in assigned:
                owners[tp] = m.client_id
            rows.append([m.member_id, m.client_id, m.host,
                         ",".join(f"{t}-{p}" for t, p in assigned) or "-"])
        print()
        _table(rows)
    committed = _committed(admin, args, errors, group)
    partitions = sorted(set(committed) | set(owners))
    ends = _log_offsets(admin, args, errors, partitions, OffsetSpec.latest())
    print()
    if not partitions:
        print("No committed offsets and no assigned partitions.")
        return 0
    rows = [["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER"]]
    for tp in partitions:
        offset = committed.get(tp)
        end = ends.get(tp, -1)
        lag = end - offset if offset is not None and end >= 0 else "-"
        rows.append([tp[0], tp[1], "-" if offset is None else offset, end, lag,
                     owners.get(tp, "-")])
    _table(rows)
    return 0


def _reset(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    group = args.group
    topic, _, wanted = args.topic.partition(":")
    metadata = _metadata(admin, args, errors, topic)
    info = metadata.topics.get(topic)
    if info is None or (info.error is not None and info.error.name() == "UNKNOWN_TOPIC_OR_PART"):
        raise ToolError(f"topic {topic!r} does not exist")
    partitions = sorted(info.partitions)
    if wanted:
        try:
            partitions = sorted({int(p) for p in wanted.split(",")})
        except ValueError:
            raise ToolError(f"--topic {args.topic}: partitions must be numbers", code=2) from None
        missing = [p for p in partitions if p not in info.partitions]
        if missing:
            raise ToolError(f"topic {topic!r} has no partition {missing[0]}")
    description = _group(admin, args, errors, group)
    if _state(description) not in INACTIVE_STATES:
        raise ToolError(f"group {group!r} has active members ({description.state.name.title()}): "
                        "stop its consumers first; a live member would commit over the reset")
    keys = [(topic, p) for p in partitions]
    earliest = _log_offsets(admin, args, errors, keys, OffsetSpec.earliest())
    latest = _log_offsets(admin, args, errors, keys, OffsetSpec.latest())
    committed = _committed(admin, args, errors, group)
    if args.to_earliest:
        targets = dict(earliest)
    elif args.to_latest:
        targets = dict(latest)
    elif args.to_datetime is not None:
        found = _log_offsets(admin, args, errors, keys,
                             OffsetSpec.for_timestamp(args.to_datetime))
        # No record at or after that time: the log end, as Kafka's tool does.
        targets = {k: (v if v >= 0 else latest[k]) for k, v in found.items()}
    else:
        absent = [k for k in keys if k not in committed]
        if absent:
            raise ToolError(f"--shift-by needs a committed offset; {absent[0][0]}-"
                            f"{absent[0][1]} has none (reset it --to-earliest or "
                            "--to-latest first)")
        targets = {k: committed[k] + args.shift_by for k in keys}
    targets = {k: min(max(v, earliest[k]), latest[k]) for k, v in targets.items()}
    rows: list[list[Any]] = [["TOPIC", "PARTITION", "CURRENT", "NEW-OFFSET"]]
    for t, p in keys:
        rows.append([t, p, committed.get((t, p), "-"), targets[(t, p)]])
    _table(rows)
    if args.dry_run:
        print("(dry run: nothing changed)")
        return 0
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, targets[(t, p)]) for t, p in keys])
    futures = admin.alter_consumer_group_offsets([request], **_request_timeout(args))
    answer = _one(futures, group, args, errors, f"reset the offsets of group {group!r}")
    failed = [tp for tp in answer.topic_partitions or [] if tp.error is not None]
    if failed:
        raise ToolError(f"cannot reset {failed[0].topic}-{failed[0].partition}: "
                        f"{failed[0].error.str()}")
    sys.stdout.flush()
    return 0


def _delete(admin: Any, args: argparse.Namespace, errors: _BrokerErrors) -> int:
    names = list(dict.fromkeys(args.groups))
    futures = admin.delete_consumer_groups(names, **_request_timeout(args))
    failures = []
    for name, exc in _results(futures, args, errors).items():
        if exc is None:
            print(f"Deleted group {name}.")
        elif _code_name(exc) == "NON_EMPTY_GROUP":
            failures.append(f"group {name!r} has active members: stop its consumers first")
        elif _code_name(exc) == "GROUP_ID_NOT_FOUND":
            failures.append(f"group {name!r} does not exist")
        else:
            failures.append(f"cannot delete group {name!r}: {_reason(exc)}")
    sys.stdout.flush()
    if failures:
        raise ToolError("; ".join(failures))
    return 0
