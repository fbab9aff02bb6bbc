"""``odradek reassign`` and ``odradek elect-leaders``: moving partitions and leadership,
like Kafka's ``kafka-reassign-partitions.sh`` and ``kafka-leader-election.sh``, with
their JSON formats, so plans written for Kafka work here and the other way round.

- ``reassign generate --topics-to-move-json-file F --broker-list 1,2,3``: the current
  assignment of the topics and a proposed one over those brokers (Kafka's rack-aware
  placement, each partition keeping its replication factor). Nothing changes.
- ``reassign execute --reassignment-json-file F [--throttle BYTES/S]``: prints the
  current assignment (save it to roll back), sets the replication throttle if asked
  (the rates on every broker concerned, the moving replicas as topic configs), starts
  the moves.
- ``reassign verify --reassignment-json-file F [--preserve-throttles]``: per partition,
  completed / in progress / not as planned; once every move is done, removes the
  throttles execute set.
- ``reassign cancel --reassignment-json-file F [--preserve-throttles]``: stops the moves
  in progress (each partition back to its replicas before the move).
- ``elect-leaders --election-type PREFERRED|UNCLEAN (--topic T [--partition P] |
  --all-topic-partitions | --path-to-json-file F)``.

Reassignments and elections go to the controller on this package's client
(``client/admin.py``; librdkafka has no reassignment API); throttles are configs,
set through confluent-kafka's admin client as ``odradek topics alter`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from odradek.cli.tools import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, ToolError, _bootstrap

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

Plan = dict[tuple[str, int], list[int]]


def add_reassign_commands(subparsers: Any) -> None:
    reassign = subparsers.add_parser(
        "reassign", help="move partitions between brokers (kafka-reassign-partitions.sh)",
        description="Generate, execute, verify or cancel a partition reassignment plan in "
                    "Kafka's JSON format.")
    rsub = reassign.add_subparsers(dest="reassign_command", metavar="ACTION", required=True)
    gen = rsub.add_parser("generate", help="propose a plan moving topics onto brokers")
    gen.add_argument("--topics-to-move-json-file", required=True, metavar="FILE",
                     help='{"topics": [{"topic": "NAME"}], "version": 1}')
    gen.add_argument("--broker-list", required=True, metavar="1,2,3",
                     help="the brokers the topics should live on")
    _common(gen)
    for name, text in (("execute", "start the moves of a plan"),
                       ("verify", "report a plan's progress; clear throttles when done"),
                       ("cancel", "stop the moves of a plan in progress")):
        cmd = rsub.add_parser(name, help=text)
        cmd.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                         help='{"version": 1, "partitions": [{"topic": "T", "partition": 0, '
                              '"replicas": [1, 2]}]}')
        if name == "execute":
            cmd.add_argument("--throttle", type=int, default=-1, metavar="BYTES/S",
                             help="bound the moving replicas' replication to this rate")
        else:
            cmd.add_argument("--preserve-throttles", action="store_true",
                             help="leave the throttle configs in place")
        _common(cmd)

    elect = subparsers.add_parser(
        "elect-leaders", help="elect preferred or unclean leaders (kafka-leader-election.sh)")
    elect.add_argument("--election-type", required=True, type=str.upper,
                       choices=("PREFERRED", "UNCLEAN"))
    elect.add_argument("--topic", metavar="NAME")
    elect.add_argument("--partition", type=int, metavar="N")
    elect.add_argument("--all-topic-partitions", action="store_true")
    elect.add_argument("--path-to-json-file", metavar="FILE",
                       help='{"partitions": [{"topic": "T", "partition": 0}]}')
    _common(elect)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                        help=f"broker(s) to connect to (default ${BOOTSTRAP_ENV}, else "
                             f"{DEFAULT_BOOTSTRAP})")
    parser.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                        help="how long to wait for the controller (default 30000)")


def run_reassign_command(args: argparse.Namespace) -> int:
    from odradek.client.connection import KafkaClientError

    name = ("elect-leaders" if args.command == "elect-leaders"
            else f"reassign {args.reassign_command}")
    try:
        if args.command == "elect-leaders":
            return _elect(args)
        return {"generate": _generate, "execute": _execute, "verify": _verify,
                "cancel": _cancel}[args.reassign_command](args)
    except (ToolError, KafkaClientError, OSError, ValueError) as exc:
        print(f"odradek {name}: {exc}", file=sys.stderr)
        return getattr(exc, "code", 1)


# --- plans -----------------------------------------------------------------------------


def _timeout(args: argparse.Namespace) -> float:
    return args.timeout_ms / 1000


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as exc:
            raise ToolError(f"{path} is not JSON: {exc}", 2) from None


def read_plan(path: str) -> Plan:
    """A reassignment JSON file (Kafka's format) as {(topic, partition): replicas}."""
    data = _read_json(path)
    plan: Plan = {}
    try:
        for entry in data["partitions"]:
            key = (str(entry["topic"]), int(entry["partition"]))
            if key in plan:
                raise ToolError(f"{path}: {key[0]}-{key[1]} appears twice", 2)
            plan[key] = [int(b) for b in entry["replicas"]]
    except (KeyError, TypeError) as exc:
        raise ToolError(f"{path}: not a reassignment plan ({exc!r} missing or wrong)", 2) \
            from None
    if not plan:
        raise ToolError(f"{path}: the plan has no partitions", 2)
    return plan


def plan_json(plan: Plan) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))


def _current(bootstrap: str, topics: Iterable[str], timeout_s: float) -> tuple[Plan, Any]:
    from odradek.client.metadata import fetch_metadata

    wanted = sorted(set(topics))
    meta = fetch_metadata(bootstrap, topics=wanted, timeout_s=timeout_s)
    missing = [t for t in wanted if t not in meta.topics]
    if missing:
        raise ToolError(f"topics {missing} do not exist")
    return {(p.topic, p.partition): list(p.replicas)
            for t in wanted for p in meta.topics[t].partitions}, meta


def _generate(args: argparse.Namespace) -> int:
    from odradek.cluster.placement import PlacementError, assign_replicas

    data = _read_json(args.topics_to_move_json_file)
    try:
        topics = [str(t["topic"]) for t in data["topics"]]
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except (KeyError, TypeError, ValueError) as exc:
        raise ToolError(f"bad input: {exc!r}", 2) from None
    current, meta = _current(_bootstrap(args), topics, _timeout(args))
    unknown = [b for b in brokers if b not in meta.brokers]
    if unknown:
        raise ToolError(f"brokers {unknown} are not in the cluster (live: "
                        f"{sorted(meta.brokers)})")
    racks = {b: meta.brokers[b].rack for b in brokers}
    proposed: Plan = {}
    for topic in sorted(set(topics)):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            placed = assign_replicas(racks, len(parts), rf)
        except PlacementError as exc:
            raise ToolError(f"topic {topic}: {exc}") from None
        proposed.update({(topic, p): list(placed[p]) for p in parts})
    print(f"Current partition replica assignment\n{plan_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{plan_json(proposed)}")
    return 0


# --- executing, verifying, cancelling ---------------------------------------------------


def _execute(args: argparse.Namespace) -> int:
    from odradek.client.admin import alter_reassignments

    plan = read_plan(args.reassignment_json_file)
    bootstrap = _bootstrap(args)
    current, _ = _current(bootstrap, {t for t, _ in plan}, _timeout(args))
    missing = sorted(tp for tp in plan if tp not in current)
    if missing:
        raise ToolError(f"partitions {missing} do not exist")
    print("Current partition replica assignment\n\n"
          f"{plan_json({tp: current[tp] for tp in plan})}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle >= 0:
        set_throttles(bootstrap, plan, current, args.throttle)
        print(f"Warning: You must run --verify periodically, until the reassignment "
              f"completes, to ensure the throttle is removed.\n"
              f"The inter-broker throttle limit was set to {args.throttle} B/s")
    results = alter_reassignments(bootstrap, plan, timeout_s=_timeout(args))
    return _report(results, "started partition reassignment")


def _cancel(args: argparse.Namespace) -> int:
    from odradek.client.admin import alter_reassignments

    plan = read_plan(args.reassignment_json_file)
    bootstrap = _bootstrap(args)
    results = alter_reassignments(bootstrap, dict.fromkeys(plan), timeout_s=_timeout(args))
    code = _report(results, "cancelled partition reassignment")
    if not args.preserve_throttles:
        clear_throttles(bootstrap, plan, _timeout(args))
    return code


def _report(results: dict[tuple[str, int], tuple[str | None, str | None]], done: str) -> int:
    ok = sorted(f"{t}-{p}" for (t, p), (err, _) in results.items() if err is None)
    failed = sorted((f"{t}-{p}", err, msg) for (t, p), (err, msg) in results.items() if err)
    if ok:
        print(f"Successfully {done}(s) for {', '.join(ok)}")
    for tp, err, msg in failed:
        print(f"Error on {tp}: {err}: {msg}", file=sys.stderr)
    return 1 if failed else 0


def _verify(args: argparse.Namespace) -> int:
    from odradek.client.admin import list_reassignments

    plan = read_plan(args.reassignment_json_file)
    bootstrap = _bootstrap(args)
    ongoing = list_reassignments(bootstrap, list(plan), timeout_s=_timeout(args))
    current, _ = _current(bootstrap, {t for t, _ in plan}, _timeout(args))
    print("Status of partition reassignment:")
    complete = True
    for tp, replicas in sorted(plan.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in ongoing:
            complete = False
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == replicas:
            print(f"Reassignment of partition {name} is completed.")
        else:
            complete = False
            print(f"There is no active reassignment of partition {name}, but replica set "
                  f"is {current.get(tp)} rather than {replicas}.")
    if complete and not args.preserve_throttles:
        clear_throttles(bootstrap, plan, _timeout(args))
        print("Throttles removed.")
    return 0


def set_throttles(bootstrap: str, plan: Plan, current: Plan, rate: int) -> None:
    """kafka-reassign-partitions.sh's recipe: the rate on every broker of the old and
    new replica sets; the old replicas throttled as leaders, the new ones as followers."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (topic, p), target in plan.items():
        before = current[(topic, p)]
        brokers |= set(before) | set(target)
        leaders.setdefault(topic, []).extend(f"{p}:{b}" for b in before)
        followers.setdefault(topic, []).extend(f"{p}:{b}" for b in target if b not in before)
    _alter(bootstrap, [("broker", str(b), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})
                       for b in sorted(brokers)])
    _alter(bootstrap, [("topic", t, {LEADER_REPLICAS: ",".join(leaders[t]),
                                     FOLLOWER_REPLICAS: ",".join(followers.get(t, []))})
                       for t in sorted(leaders)])


def clear_throttles(bootstrap: str, plan: Plan, timeout_s: float) -> None:
    from odradek.client.metadata import fetch_metadata

    meta = fetch_metadata(bootstrap, timeout_s=timeout_s)
    _alter(bootstrap, [("broker", str(b), {LEADER_RATE: None, FOLLOWER_RATE: None})
                       for b in sorted(meta.brokers)])
    _alter(bootstrap, [("topic", t, {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None})
                       for t in sorted({t for t, _ in plan})])


def _alter(bootstrap: str, resources: list[tuple[str, str, dict[str, str | None]]]) -> None:
    """IncrementalAlterConfigs, one resource per request (librdkafka allows one broker
    resource per call); a value of None deletes the setting."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for kind, name, settings in resources:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE
                               if v is None else AlterConfigOpType.SET)
                   for k, v in settings.items()]
        resource = ConfigResource(kind, name, incremental_configs=entries)
        try:
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(timeout=30)
        except KafkaException as exc:
            raise ToolError(f"cannot set {', '.join(settings)} on {kind} {name}: "
                            f"{exc.args[0].str()}") from None


# --- leader elections ---------------------------------------------------------------------


def _elect(args: argparse.Namespace) -> int:
    from odradek.client.admin import PREFERRED, UNCLEAN, elect_leaders

    chosen = [bool(args.topic), args.all_topic_partitions, bool(args.path_to_json_file)]
    if sum(chosen) != 1:
        raise ToolError("give exactly one of --topic, --all-topic-partitions and "
                        "--path-to-json-file", 2)
    bootstrap = _bootstrap(args)
    partitions: list[tuple[str, int]] | None
    if args.all_topic_partitions:
        partitions = None
    elif args.path_to_json_file:
        data = _read_json(args.path_to_json_file)
        partitions = [(str(e["topic"]), int(e["partition"])) for e in data["partitions"]]
    elif args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        current, _ = _current(bootstrap, [args.topic], _timeout(args))
        partitions = sorted(current)
    kind = PREFERRED if args.election_type == "PREFERRED" else UNCLEAN
    results = elect_leaders(bootstrap, kind, partitions, timeout_s=_timeout(args))
    done = sorted(f"{t}-{p}" for (t, p), (err, _) in results.items() if err is None)
    needless = sorted(f"{t}-{p}" for (t, p), (err, _) in results.items()
                      if err == "ELECTION_NOT_NEEDED")
    failed = sorted((f"{t}-{p}", err, msg) for (t, p), (err, msg) in results.items()
                    if err not in (None, "ELECTION_NOT_NEEDED"))
    if done:
        print(f"Successfully completed leader election ({args.election_type}) for "
              f"partitions {', '.join(done)}")
    if needless:
        print(f"Valid replica already elected for partitions {', '.join(needless)}")
    for tp, err, msg in failed:
        print(f"Error completing leader election ({args.election_type}) for partition "
              f"{tp}: {err}: {msg}", file=sys.stderr)
    return 1 if failed else 0
