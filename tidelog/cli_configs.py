"""`tidelog configs describe|alter`: kafka-configs.sh over the Kafka protocol.

    tidelog configs describe --entity-type topics --entity-name demo [--all]
    tidelog configs describe --entity-type brokers --entity-name 4 --all
    tidelog configs alter --entity-type topics --entity-name demo \\
        --add-config retention.ms=60000,cleanup.policy=[compact,delete] --delete-config segment.ms
    tidelog configs alter --entity-type brokers --entity-name 4 --add-config log.retention.ms=60000
    tidelog configs alter --entity-type brokers --entity-default --add-config log.segment.bytes=1048576

Option names and output lines are kafka-configs.sh's: describe prints "Dynamic configs for
topic demo are:" (the configs set on the entity; with --all "All configs ...", every config
with its source as synonyms), alter sends one IncrementalAlterConfigs (SET for --add-config,
DELETE for --delete-config) and prints "Completed updating config for topic demo.". A value
holding commas is written in square brackets, as in kafka-configs.sh. Brokers take Kafka's dynamic broker configs, per
broker (--entity-name ID, sent to that broker, as Kafka's admin client does) or as the
cluster-wide default (--entity-default: "Default configs for brokers in the cluster are:");
a static key is refused by the broker with Kafka's reason.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Final

from common.protocol import messages
from common.protocol import describe_configs as dc
from common.protocol.api_keys import ApiKey
from tidelog import cli_common
from tidelog.cli_common import ClusterError, UsageError

ENTITY_TYPES: Final = {"topics": (2, "topic"), "brokers": (4, "broker")}  # resource type ids, Kafka's words
SOURCES: Final = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                  4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}
DESCRIBE_VERSION: Final = 4
ALTER_VERSION: Final = 0  # IncrementalAlterConfigs: a classic version, every field used
SET, DELETE = 0, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="configs_command", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="a topic's or broker's configs (kafka-configs --describe)")
    alter = actions.add_parser("alter", help="set or delete a topic's or broker's configs (kafka-configs --alter)")
    for action in (describe, alter):
        cli_common.add_cluster_options(action, admin=False)
        action.add_argument("--entity-type", required=True, choices=sorted(ENTITY_TYPES))
        entity = action.add_mutually_exclusive_group(required=True)
        entity.add_argument("--entity-name", help="the topic's name, or the broker's id")
        entity.add_argument("--entity-default", action="store_true",
                            help="brokers: the cluster-wide default dynamic configs")
    describe.add_argument("--all", action="store_true", help="every config, not only those set on the entity")
    describe.set_defaults(run=cli_common.guarded("configs describe", run_describe))
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K2=[A,B]]",
                       help="configs to set; a value with commas goes in [square brackets]")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K2]", help="configs to delete")
    alter.set_defaults(run=cli_common.guarded("configs alter", run_alter))


# --- pure: options to requests, answers to lines ------------------------------------------------


def parse_add_config(items: Sequence[str]) -> dict[str, str]:
    """kafka-configs.sh's --add-config: `k=v` pairs separated by commas, a value with commas in
    square brackets (`cleanup.policy=[compact,delete]`). UsageError naming the bad part."""
    out: dict[str, str] = {}
    for item in items:
        rest = item
        while rest:
            key, sep, rest = rest.partition("=")
            if not sep or not key.strip() or "," in key:
                raise UsageError(f"--add-config {item!r}: expected k=v[,k2=v2] (a value with commas in [brackets])")
            if rest.startswith("["):
                value, closed, rest = rest[1:].partition("]")
                if not closed or (rest and not rest.startswith(",")):
                    raise UsageError(f"--add-config {item!r}: a '[' value must end with ']'")
            else:
                value, _, rest = rest.partition(",")
                rest = "," + rest if rest else ""
            out[key.strip()] = value
            rest = rest[1:]
    return out


def describe_lines(entity: str, name: str, result: Any, *, show_all: bool) -> list[str]:
    """kafka-configs.sh's describe output for one entity (name "": the brokers' cluster default),
    from kio's DescribeConfigsResult."""
    # kafka-configs.sh without --all shows the entity's own dynamic configs only: a topic's
    # DYNAMIC_TOPIC_CONFIG, not the cluster default it inherits (min.insync.replicas with ELR on)
    own_source = 1 if entity == "topic" else 2 if name else 3
    configs = [c for c in result.configs if show_all or c.config_source == own_source]
    if name == "":
        lines = [f"Default configs for {entity}s in the cluster are:"]
    else:
        lines = [f"{'All' if show_all else 'Dynamic'} configs for {entity} {name} are:"]
    for c in configs:
        value = "null" if c.value is None else c.value
        synonyms = ", ".join(f"{SOURCES.get(s.source, 'UNKNOWN')}:{s.name}={s.value if s.value is not None else 'null'}"
                             for s in c.synonyms)
        lines.append(f"  {c.name}={value} sensitive={str(c.is_sensitive).lower()} synonyms={{{synonyms}}}")
    return lines


def alter_request(resource_type: int, name: str, to_set: dict[str, str], to_delete: Sequence[str]) -> Any:
    """kio's IncrementalAlterConfigsRequest (v`ALTER_VERSION`) of kafka-configs.sh --alter."""
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise UsageError(f"--add-config and --delete-config both name {', '.join(both)}")
    if not to_set and not to_delete:
        raise UsageError("give --add-config and/or --delete-config")
    m = messages.request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, ALTER_VERSION)
    entries = [m.AlterableConfig(name=k, value=v, config_operation=SET) for k, v in to_set.items()]
    entries += [m.AlterableConfig(name=k, value=None, config_operation=DELETE) for k in to_delete]
    return m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=tuple(entries)),), validate_only=False)


# --- the commands ---------------------------------------------------------------------------------


def _entity(args: argparse.Namespace) -> tuple[int, str, int | None]:
    """(resource type, entity word, broker to ask: a broker describes and alters only itself,
    any broker the cluster default). Sets args.entity_name to "" for --entity-default."""
    resource_type, word = ENTITY_TYPES[args.entity_type]
    broker: int | None = None
    if args.entity_default:
        if resource_type != ENTITY_TYPES["brokers"][0]:
            raise UsageError("--entity-default applies to --entity-type brokers only")
        args.entity_name = ""
    elif resource_type == ENTITY_TYPES["brokers"][0]:
        if not args.entity_name.isdigit():
            raise UsageError(f"--entity-name {args.entity_name!r}: a broker's id is a number")
        broker = int(args.entity_name)
    return resource_type, word, broker


def _call(args: argparse.Namespace, broker: int | None, api_key: ApiKey, version: int, request: object,
          encode: object, decode: object) -> object:
    from common.broker_connection import BrokerUnavailable
    from common.kafka_client import KafkaClient

    found = cli_common.resolve(args, need_kafka=True)
    with KafkaClient(found.bootstrap_servers, client_id="tidelog-configs", security=found.security) as client:
        try:
            if broker is not None:
                client.metadata([])  # learns where broker `broker` listens
            return client.call(broker, api_key, version, request, encode, decode)
        except (BrokerUnavailable, KeyError) as exc:
            raise ClusterError("NETWORK_EXCEPTION", f"cannot reach {'broker ' + str(broker) if broker is not None else 'a broker'}: {exc}") from None


def run_describe(args: argparse.Namespace) -> int:
    from common.kafka_client import error_name

    resource_type, word, broker = _entity(args)
    request = dc.request(DESCRIBE_VERSION, (resource_type, args.entity_name, None), include_synonyms=True)
    answer: Any = _call(args, broker, ApiKey.DESCRIBE_CONFIGS, DESCRIBE_VERSION, request,
                        dc.encode_describe_configs_request, dc.decode_describe_configs_response)
    [result] = answer.results
    if result.error_code:
        raise ClusterError(error_name(result.error_code), result.error_message or "")
    cli_common.say_lines(describe_lines(word, args.entity_name, result, show_all=args.all))
    return 0


def run_alter(args: argparse.Namespace) -> int:
    from common.kafka_client import error_name

    resource_type, word, broker = _entity(args)
    names = [n.strip() for item in args.delete_config for n in item.split(",")]
    if any(not n for n in names):
        raise UsageError("--delete-config: an empty config name")
    request = alter_request(resource_type, args.entity_name, parse_add_config(args.add_config), names)
    answer: Any = _call(args, broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, ALTER_VERSION, request,
                        messages.encode_request, messages.response_decoder(ApiKey.INCREMENTAL_ALTER_CONFIGS))
    [response] = answer.responses
    if response.error_code:
        raise ClusterError(error_name(response.error_code), response.error_message or "")
    if args.entity_name == "":
        cli_common.say(f"Completed updating default config for {word}s in the cluster.")
    else:
        cli_common.say(f"Completed updating config for {word} {args.entity_name}.")
    return 0
