"""`tidelog reassign`: kafka-reassign-partitions.sh over the admin API (KIP-455).

    tidelog reassign --topic demo --partition 0 --replicas 5,6,7 --execute [--throttle 10000000]
    tidelog reassign --reassignment-json-file plan.json --execute | --verify | --cancel
    tidelog reassign --list
    tidelog reassign --generate --topics-to-move-json-file topics.json --broker-list 4,5,6 [--disable-rack-aware]

The plan file is kafka-reassign-partitions.sh's: {"version": 1, "partitions": [{"topic": ...,
"partition": ..., "replicas": [...]}]}; `--topic/--partition/--replicas` write a one-partition
plan. --execute prints the current assignment (the rollback plan) and starts the moves;
--verify says, per partition, whether it completed and, once all have, clears the throttles
--throttle set; --cancel reverts the plan's running moves; --list prints every running one.

--generate proposes a plan moving whole topics onto --broker-list, rack-aware from the brokers'
broker.rack (`tidelog.reassign_generate`); it changes nothing.

--throttle BYTES_PER_SEC sets what kafka-reassign-partitions sets: the topic configs
leader.replication.throttled.replicas (the current replicas, "partition:broker") and
follower.replication.throttled.replicas (the adding ones), and the dynamic broker configs
leader/follower.replication.throttled.rate on every broker the moves involve; --verify
removes both once every move has completed (the rates from every broker, as Kafka's tool).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from tidelog import cli_common, reassign_generate
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError, UsageError, say, say_lines

THROTTLE_KEYS: Final = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
RATE_KEYS: Final = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
ACTIONS: Final = ("execute", "verify", "cancel", "list", "generate")

Plan = list[dict[str, Any]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli_common.add_cluster_options(parser, kafka=False)
    for action in ACTIONS:
        parser.add_argument(f"--{action}", action="store_true", help=f"{action} (kafka-reassign-partitions --{action})")
    parser.add_argument("--reassignment-json-file", type=Path, help="a kafka-reassign-partitions.sh plan file")
    parser.add_argument("--topic", help="with --partition and --replicas: a one-partition plan")
    parser.add_argument("--partition", type=cli_common.non_negative_int)
    parser.add_argument("--replicas", help="target broker ids, comma-separated (first: preferred leader)")
    parser.add_argument("--topics-to-move-json-file", type=Path,
                        help='with --generate: {"version": 1, "topics": [{"topic": "name"}, ...]}')
    parser.add_argument("--broker-list", help="with --generate: the broker ids to place replicas on, e.g. 4,5,6")
    parser.add_argument("--disable-rack-aware", action="store_true",
                        help="with --generate: place replicas without regard to broker.rack")
    parser.add_argument("--throttle", type=cli_common.positive_int, metavar="BYTES_PER_SEC",
                        help="throttle the moving replicas (sets the topics' throttled-replicas configs)")
    parser.set_defaults(run=cli_common.guarded("reassign", run))


# --- pure: options to a plan, answers to lines -------------------------------------------------


def parse_replicas(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--replicas {text!r}: expected broker ids separated by commas, e.g. 4,5,6") from None
    if any(i < 0 for i in ids):
        raise UsageError(f"--replicas {text!r}: broker ids are not negative")
    return ids


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The plan's partitions, from --reassignment-json-file or --topic/--partition/--replicas."""
    if args.reassignment_json_file is not None:
        if args.topic is not None or args.replicas is not None:
            raise UsageError("--reassignment-json-file cannot be used with --topic/--replicas")
        try:
            document = json.loads(args.reassignment_json_file.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {args.reassignment_json_file}: {exc}") from None
        partitions = document.get("partitions") if isinstance(document, dict) else None
        if not isinstance(partitions, list):
            raise UsageError(f"{args.reassignment_json_file}: expected {{\"version\": 1, \"partitions\": [...]}}")
        return partitions
    if args.topic is None or args.partition is None:
        raise UsageError("give --reassignment-json-file, or --topic and --partition (and --replicas to execute)")
    replicas = None if args.replicas is None else parse_replicas(args.replicas)
    return [{"topic": args.topic, "partition": args.partition, "replicas": replicas}]


def throttle_configs(plan: Plan, current: Mapping[tuple[str, int], Sequence[int]]) -> dict[str, dict[str, str]]:
    """kafka-reassign-partitions' throttled-replicas values per topic: leaders = the current
    replicas, followers = the replicas being added."""
    out: dict[str, dict[str, list[str]]] = {}
    for entry in plan:
        key = (entry["topic"], entry["partition"])
        now = list(current.get(key, ()))
        moving = [r for r in entry.get("replicas") or () if r not in now]
        lists = out.setdefault(entry["topic"], {k: [] for k in THROTTLE_KEYS})
        lists[THROTTLE_KEYS[0]] += [f"{key[1]}:{r}" for r in now]
        lists[THROTTLE_KEYS[1]] += [f"{key[1]}:{r}" for r in moving]
    return {topic: {k: ",".join(v) for k, v in lists.items()} for topic, lists in out.items()}


def verify_lines(plan: Plan, current: Mapping[tuple[str, int], Sequence[int]], running: set[tuple[str, int]]) -> list[str]:
    lines = ["Status of partition reassignment:"]
    for entry in plan:
        key = (entry["topic"], entry["partition"])
        name = f"{key[0]}-{key[1]}"
        if key in running:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif list(current.get(key, ())) == list(entry.get("replicas") or ()):
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {name}, but replica set is "
                         f"{list(current.get(key, ()))} rather than {entry.get('replicas')}.")
    return lines


def list_lines(ongoing: Sequence[Mapping[str, Any]]) -> list[str]:
    if not ongoing:
        return ["No partition reassignments found."]
    ids = lambda xs: ",".join(map(str, xs))  # noqa: E731 - one-line formatter
    return ["Current partition reassignments:"] + [
        f"{o['topic']}-{o['partition']}: replicas: {ids(o['replicas'])}. adding: {ids(o['adding_replicas'])}. "
        f"removing: {ids(o['removing_replicas'])}." for o in ongoing]


# --- the command ---------------------------------------------------------------------------------


def _current(client: AdminClient, topics: set[str]) -> dict[tuple[str, int], list[int]]:
    out = {}
    for topic in sorted(topics):
        try:
            view = client.topic(topic)
        except ClusterError as exc:
            if exc.error == "UNKNOWN_TOPIC_OR_PARTITION":
                continue
            raise
        for p in view["partitions"]:
            out[(topic, p["partition"])] = list(p["replicas"])
    return out


def _send(client: AdminClient, plan: Plan) -> list[dict[str, Any]]:
    answer = client.request("POST", "/v1/reassignments", {"version": 1, "partitions": plan})
    failed = [r for r in answer["results"] if r["error"] != "NONE"]
    if failed:
        raise ClusterError(failed[0]["error"], "; ".join(
            f"{r['topic']}-{r['partition']}: {r['message'] or r['error']}" for r in failed))
    results: list[dict[str, Any]] = answer["results"]
    return results


def _generate(client: AdminClient, args: argparse.Namespace) -> int:
    if args.topics_to_move_json_file is None or args.broker_list is None:
        raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    try:
        document = json.loads(args.topics_to_move_json_file.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {args.topics_to_move_json_file}: {exc}") from None
    topics = reassign_generate.parse_topics_to_move(document, str(args.topics_to_move_json_file))
    broker_ids = reassign_generate.parse_broker_list(args.broker_list)
    brokers = reassign_generate.listed_brokers(client.brokers(), broker_ids, rack_aware=not args.disable_rack_aware)
    # the tool's proposal is random, as Kafka's (AdminUtils draws the start): not a core, no replay
    before, after = reassign_generate.generate(brokers, _current(client, set(topics)), topics, random.Random())
    say_lines(reassign_generate.generate_lines(before, after))
    return 0


def run(args: argparse.Namespace) -> int:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --execute, --verify, --cancel, --list or --generate")
    client = AdminClient.of(cli_common.resolve(args, need_admin=True), token=args.admin_token)
    if chosen == ["list"]:
        say_lines(list_lines(client.request("GET", "/v1/reassignments")["partitions"]))
        return 0
    if chosen == ["generate"]:
        return _generate(client, args)
    plan = plan_from_args(args)
    current = _current(client, {str(e["topic"]) for e in plan if isinstance(e, dict) and isinstance(e.get("topic"), str)})
    if chosen == ["execute"]:
        if any(e.get("replicas") is None for e in plan):
            raise UsageError("--execute needs target replicas for every partition (use --cancel to cancel)")
        say("Current partition replica assignment\n")
        say(json.dumps({"version": 1, "partitions": [
            {"topic": e["topic"], "partition": e["partition"], "replicas": current.get((e["topic"], e["partition"]))}
            for e in plan]}))
        say("\nSave this to use as the --reassignment-json-file option during rollback")
        if args.throttle is not None:
            for topic, configs in throttle_configs(plan, current).items():
                client.alter_configs(topic, configs)
            involved = sorted({b for e in plan for b in [*e["replicas"], *current.get((e["topic"], e["partition"]), [])]})
            for broker in involved:
                client.alter_broker_configs(broker, dict.fromkeys(RATE_KEYS, str(args.throttle)))
            say("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                "throttle is removed.")
            say(f"The inter-broker throttle limit was set to {args.throttle} B/s")
        _send(client, plan)
        say("Successfully started partition reassignments for "
            + ",".join(f"{e['topic']}-{e['partition']}" for e in plan))
        return 0
    if chosen == ["cancel"]:
        _send(client, [{"topic": e["topic"], "partition": e["partition"], "replicas": None} for e in plan])
        say("Successfully cancelled partition reassignments for: "
            + ",".join(f"{e['topic']}-{e['partition']}" for e in plan))
        return 0
    running = {(o["topic"], o["partition"]) for o in client.request("GET", "/v1/reassignments")["partitions"]}
    lines = verify_lines(plan, current, running)
    say_lines(lines)
    if not running & {(e["topic"], e["partition"]) for e in plan}:
        for broker in sorted(int(b["broker_id"]) for b in client.brokers()):
            client.alter_broker_configs(broker, dict.fromkeys(RATE_KEYS))
            say(f"Clearing broker-level throttles on broker {broker}")
        for topic in sorted({e["topic"] for e in plan}):
            client.alter_configs(topic, dict.fromkeys(THROTTLE_KEYS))
            say(f"Clearing topic-level throttles on topic {topic}")
    return 0 if all(line.endswith("completed.") for line in lines[1:]) else 1
