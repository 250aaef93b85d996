"""`tidelog topics create|list|describe|delete|alter-config`: kafka-topics.sh / kafka-configs.sh
over the controllers' admin API.

    tidelog topics create --topic demo --partitions 3 --replication-factor 1 --config retention.ms=60000
    tidelog topics create --topic pinned --replica-assignment 4:5,5:6
    tidelog topics list
    tidelog topics describe [--topic demo] [--under-replicated-partitions] [--unavailable-partitions]
    tidelog topics alter-config --topic demo --config retention.ms=1000 --delete-config cleanup.policy
    tidelog topics delete --topic demo

Option names are Kafka's. Each command does one admin API call (two for describe of one
topic's configs: none, they come with the topic), prints what Kafka's tools print (the
"Created topic demo." lines) or an aligned table, and exits 0; an error answer prints
`Error: <KAFKA_ERROR_NAME>: message` and exits 1 (`--if-not-exists` / `--if-exists` make the
expected ones quiet, as in Kafka).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tidelog import cli_common
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError, UsageError, say, say_lines
from common.table import render

NO_LEADER: Final = -1


# --- pure: options to requests, answers to lines ------------------------------------------------


def parse_configs(items: Sequence[str], option: str = "--config") -> dict[str, str]:
    """`k=v` items, each possibly a comma-separated list as kafka-configs.sh's --add-config takes
    (`a=1,b=2`); a value holding a comma goes in its own --config. UsageError naming the item."""
    out: dict[str, str] = {}
    for item in items:
        parts = [item] if item.count("=") == 1 else item.split(",")
        for part in parts:
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"{option} {part!r} is not key=value")
            out[key.strip()] = value
    return out


def parse_replica_assignment(text: str) -> list[tuple[int, ...]]:
    """kafka-topics.sh's --replica-assignment: partitions separated by ',', each partition's
    brokers by ':' (`4:5,5:6`: partition 0 on 4 then 5, partition 1 on 5 then 6); the first
    broker is the preferred leader. UsageError for a malformed list or a broker named twice in
    one partition (Kafka's TopicCommand refuses those before asking the cluster)."""
    out: list[tuple[int, ...]] = []
    for partition, item in enumerate(text.split(",")):
        try:
            replicas = tuple(int(b) for b in item.split(":"))
        except ValueError:
            raise UsageError(f"--replica-assignment: partition {partition} {item.strip()!r} is not broker ids "
                             "separated by ':'") from None
        if any(b < 0 for b in replicas):
            raise UsageError(f"--replica-assignment: partition {partition} names a negative broker id")
        if len(set(replicas)) != len(replicas):
            raise UsageError(f"--replica-assignment: partition {partition} replica list {item.strip()!r} may not "
                             "contain duplicate entries")
        out.append(replicas)
    return out


def parse_config_names(items: Sequence[str]) -> list[str]:
    """--delete-config items, each possibly comma-separated; UsageError for an empty name."""
    names = [name.strip() for item in items for name in item.split(",")]
    if any(not name for name in names):
        raise UsageError(f"--delete-config: an empty config name in {', '.join(map(repr, items))}")
    return names


def config_changes(set_items: Sequence[str], delete_items: Sequence[str]) -> dict[str, str | None]:
    """The PATCH body's configs: values to set, None for keys to delete; UsageError on a clash."""
    to_set = parse_configs(set_items)
    to_delete = parse_config_names(delete_items)
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise UsageError(f"config {', '.join(both)} is both set and deleted")
    if not to_set and not to_delete:
        raise UsageError("give at least one --config key=value or --delete-config key")
    return {**to_set, **dict.fromkeys(to_delete)}


def _ids(values: Sequence[int]) -> str:
    return ",".join(map(str, values)) or "none"


def _leader(value: int) -> str:
    return "none" if value == NO_LEADER else str(value)


def list_lines(topics: Sequence[Mapping[str, Any]]) -> list[str]:
    if not topics:
        return []
    return render(("TOPIC", "PARTITIONS", "OFFLINE", "UNDER_REPLICATED", "TOPIC_ID"),
                  [(t["name"], t["partitions"], t["offline_partitions"], t.get("under_replicated_partitions"),
                    t["topic_id"]) for t in topics], right={1, 2, 3})


def wanted_partition(partition: Mapping[str, Any], *, under_replicated: bool, unavailable: bool) -> bool:
    """kafka-topics.sh --describe filters: ISR smaller than the replicas, or no leader."""
    if under_replicated and len(partition["isr"]) >= len(partition["replicas"]):
        return False
    if unavailable and partition["leader"] != NO_LEADER:
        return False
    return True


def describe_lines(topic: Mapping[str, Any], *, under_replicated: bool = False,
                   unavailable: bool = False) -> list[str]:
    """kafka-topics.sh's summary line, then one table row per (wanted) partition."""
    partitions = [p for p in topic["partitions"]
                  if wanted_partition(p, under_replicated=under_replicated, unavailable=unavailable)]
    filtered = under_replicated or unavailable
    if filtered and not partitions:
        return []
    replication = len(topic["partitions"][0]["replicas"]) if topic["partitions"] else 0
    configs = ",".join(f"{k}={v}" for k, v in sorted(topic["configs"].items()))
    lines = [f"Topic: {topic['name']}  TopicId: {topic['topic_id']}  PartitionCount: {len(topic['partitions'])}  "
             f"ReplicationFactor: {replication}  Configs: {configs}".rstrip()]
    rows: list[tuple[Any, ...]] = [
        (p["partition"], _leader(p["leader"]), p["leader_epoch"], _ids(p["replicas"]), _ids(p["isr"]),
         _ids(p["elr"]) if p["elr"] else "-", p["leader_recovery_state"]) for p in partitions]
    header: tuple[str, ...] = ("PARTITION", "LEADER", "LEADER_EPOCH", "REPLICAS", "ISR", "ELR", "RECOVERY")
    if any(p.get("offline_replicas") for p in partitions):
        # kafka-topics.sh's "Offline:": replicas whose broker could not open them, shown only when
        # some are (a controller before this field sends none)
        header += ("OFFLINE",)
        rows = [(*row, _ids(p["offline_replicas"]) if p.get("offline_replicas") else "-")
                for row, p in zip(rows, partitions)]
    lines += ["  " + line for line in render(header, rows, right={0, 2})]
    return lines


def config_lines(name: str, configs: Mapping[str, str]) -> list[str]:
    if not configs:
        return [f"Topic {name} has no configs set (every config is the broker default)."]
    return render(("CONFIG", "VALUE"), sorted(configs.items()))


# --- the commands -------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> AdminClient:
    found = cli_common.resolve(args, need_admin=True)
    return AdminClient.of(found, token=args.admin_token)


def create(args: argparse.Namespace) -> int:
    configs = parse_configs(args.config)
    assignments = None
    if args.replica_assignment is not None:
        if args.partitions is not None or args.replication_factor is not None:
            raise UsageError("--replica-assignment cannot be used with --partitions or --replication-factor")
        assignments = parse_replica_assignment(args.replica_assignment)
    try:
        _client(args).create_topic(args.topic, partitions=args.partitions,
                                   replication_factor=args.replication_factor, configs=configs,
                                   assignments=assignments)
    except ClusterError as exc:
        if args.if_not_exists and exc.error == "TOPIC_ALREADY_EXISTS":
            return 0
        raise
    say(f"Created topic {args.topic}.")
    return 0


INTERNAL_TOPICS = frozenset({"__consumer_offsets"})  # groups.partitioner.GROUP_METADATA_TOPIC_NAME


def shown(topics: Sequence[Mapping[str, Any]], include_internal: bool) -> list[Mapping[str, Any]]:
    """Kafka's internal topics only with --include-internal (issue 12: as clients hide them)."""
    return [t for t in topics if include_internal or t["name"] not in INTERNAL_TOPICS]


def list_topics(args: argparse.Namespace) -> int:
    say_lines(list_lines(shown(_client(args).topics(), args.include_internal)))
    return 0


def describe(args: argparse.Namespace) -> int:
    client = _client(args)
    names = [args.topic] if args.topic else [t["name"] for t in shown(client.topics(), args.include_internal)]
    first = True
    for name in names:
        try:
            topic = client.topic(name)
        except ClusterError as exc:
            if exc.error == "UNKNOWN_TOPIC_OR_PARTITION" and not args.topic:
                continue  # deleted between the list and this read
            raise
        lines = describe_lines(topic, under_replicated=args.under_replicated_partitions,
                               unavailable=args.unavailable_partitions)
        if lines and not first:
            say()
        if lines:
            first = False
        say_lines(lines)
    return 0


def delete(args: argparse.Namespace) -> int:
    try:
        _client(args).delete_topic(args.topic)
    except ClusterError as exc:
        if args.if_exists and exc.error == "UNKNOWN_TOPIC_OR_PARTITION":
            return 0
        raise
    say(f"Deleted topic {args.topic}.")
    return 0


def alter_config(args: argparse.Namespace) -> int:
    changes = config_changes([*args.config, *args.add_config], args.delete_config)
    answer = _client(args).alter_configs(args.topic, changes)
    say(f"Completed updating config for topic {args.topic}.")
    say_lines(config_lines(args.topic, answer.get("configs", {})))
    return 0


# --- the parser ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`tidelog topics` and its subcommands."""
    sub = parser.add_subparsers(dest="topics_command", required=True, metavar="ACTION")

    def action(name: str, help_text: str, run: Any, *, topic: bool | None = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        cli_common.add_cluster_options(p, kafka=False)
        if topic is not None:
            p.add_argument("--topic", required=topic, help="the topic's name")
        p.set_defaults(run=cli_common.guarded(f"topics {name}", run))
        return p

    p = action("create", "Create a topic.", create)
    p.add_argument("--partitions", type=cli_common.positive_int, help="partition count (default: the cluster's num.partitions)")
    p.add_argument("--replication-factor", type=cli_common.positive_int,
                   help="replicas of each partition (default: the cluster's default.replication.factor)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config, e.g. retention.ms=60000 (repeat for more)")
    p.add_argument("--replica-assignment", metavar="B:B,B:B", help="manual replicas, partitions separated by "
                   "',' and brokers by ':' (the first is the preferred leader); instead of --partitions and "
                   "--replication-factor")
    p.add_argument("--if-not-exists", action="store_true", help="succeed quietly if the topic exists")
    p = action("list", "List the topics with their partition counts.", list_topics, topic=None)
    p.add_argument("--include-internal", action="store_true", help="also __consumer_offsets")
    p = action("describe", "Partitions of a topic (or of every topic): leader, replicas, ISR, ELR.", describe,
               topic=False)
    p.add_argument("--include-internal", action="store_true", help="with every topic: also __consumer_offsets")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a leader")
    p = action("delete", "Delete a topic.", delete)
    p.add_argument("--if-exists", action="store_true", help="succeed quietly if there is no such topic")
    p = action("alter-config", "Set or delete topic configs (kafka-configs.sh --alter).", alter_config)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]",
                   help="kafka-configs.sh's form: comma-separated key=value pairs")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY[,KEY]",
                   help="delete configs (back to the broker default)")
