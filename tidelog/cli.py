"""The `tidelog` command: a thin argparse front over the packages. No logic lives here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

Runner = Callable[[argparse.Namespace], int]


def _add_dump_log(sub: argparse._SubParsersAction) -> None:
    from broker import dump_log

    parser = sub.add_parser(
        "dump-log",
        help="print segment, index and time-index files like Kafka's DumpLogSegments",
        description="Print the batches of .log files, or the entries of .index/.timeindex files.",
    )
    dump_log.add_arguments(parser)
    parser.set_defaults(run=dump_log.run)


def _add_up(sub: argparse._SubParsersAction) -> None:
    from tidelog import local_cluster

    parser = sub.add_parser(
        "up", help="start a local cluster on loopback addresses (or the nodes of it that are not running)",
        description="Start a local cluster, one process per node on its own loopback address "
                    "127.0.0.N (on a data dir whose cluster partly runs: the nodes that do not, each "
                    "named); wait until ready, print READY and the nodes, then run until "
                    "Ctrl-C (or return at once with --detach).")
    local_cluster.add_arguments(parser)
    parser.set_defaults(run=local_cluster.run)


def _add_down(sub: argparse._SubParsersAction) -> None:
    from tidelog import local_cluster

    parser = sub.add_parser(
        "down", help="stop the local cluster of a data dir",
        description="Stop every node of the cluster `tidelog up` started in --data-dir: SIGTERM, "
                    "a bounded wait, then SIGKILL for stragglers.")
    local_cluster.add_down_arguments(parser)
    parser.set_defaults(run=local_cluster.run_down)


@dataclass(frozen=True, slots=True)
class NodeCommand:
    """A subcommand that runs one node process from its server.properties."""

    name: str
    help: str
    description: str
    config_help: str
    module: str  # imported only when the command runs: a node's start-up stays lean
    run_args: tuple[tuple[str, bool], ...] = ()  # keyword arguments of the module's run()


NODE_COMMANDS: Final = (
    NodeCommand("controller", "run one controller: a metadata quorum voter and its HTTP API",
                "Run a controller (quorum voter, active-controller loop, admin API and broker RPCs "
                "on controller.listener) until SIGTERM or Ctrl-C.",
                "server.properties of this controller", "quorum.node",
                (("control", False), ("require_api", True))),
    NodeCommand("broker", "run one broker: the Kafka listener, its logs, and a metadata follower",
                "Run a broker (Kafka listener on `listeners`, partition logs in log.dirs, metadata "
                "follower of controller.api.voters, GET /metrics on metrics.listener) until SIGTERM "
                "or Ctrl-C.", "server.properties of this broker", "broker.node"),
    NodeCommand("combined", "run one combined node: a controller and a broker in one process",
                "Run a combined node (process.roles=broker,controller, Kafka's combined mode): a quorum "
                "voter with its HTTP API and a broker, until SIGTERM or Ctrl-C (the broker stops first, "
                "with a controlled shutdown).", "server.properties of this node", "tidelog.combined_node"),
)


def _with_console() -> None:
    """Every controller's admin server serves the web console (issue 32): quorum serves the
    extensions its process installs, and imports no package above it."""
    from console.routes import ConsoleRoutes
    from quorum import controller_server

    if ConsoleRoutes not in controller_server.EXTENSIONS:
        controller_server.EXTENSIONS.append(ConsoleRoutes)


def _add_node(sub: argparse._SubParsersAction, command: NodeCommand) -> None:
    parser = sub.add_parser(command.name, help=command.help, description=command.description)
    parser.add_argument("--config", required=True, help=command.config_help)

    def run(args: argparse.Namespace) -> int:
        if command.name != "broker":
            _with_console()
        module = importlib.import_module(command.module)
        return int(module.run(args.config, **dict(command.run_args)))

    parser.set_defaults(run=run)


def _add_clients(sub: argparse._SubParsersAction) -> None:
    """status, topics, produce, consume: thin clients of the admin API and the Kafka protocol."""
    from tidelog import (cli_configs, cli_consume, cli_features, cli_groups, cli_produce, cli_quorum, cli_reassign,
                         cli_status, cli_topics, cli_transactions)

    parser = sub.add_parser("status", help="the cluster at a glance: controllers, brokers, topics, processes",
                            description="Show the active controller, the voters, the brokers and the topics "
                                        "(exit 1 when no controller answers or none is active).")
    cli_status.add_arguments(parser)
    parser.set_defaults(run=cli_status.run)
    parser = sub.add_parser("topics", help="create, list, describe, delete topics and alter their configs",
                            description="Topic administration over the admin API, with kafka-topics.sh's options.")
    cli_topics.add_arguments(parser)
    parser = sub.add_parser("produce", help="write stdin's lines to a topic (kafka-console-producer)",
                            description=cli_produce.__doc__.splitlines()[0] if cli_produce.__doc__ else None)
    cli_produce.add_arguments(parser)
    parser.set_defaults(run=cli_produce.run)
    parser = sub.add_parser("consume", help="print a topic's records (kafka-console-consumer, no group)",
                            description=cli_consume.__doc__.splitlines()[0] if cli_consume.__doc__ else None)
    cli_consume.add_arguments(parser)
    parser.set_defaults(run=cli_consume.run)
    parser = sub.add_parser("groups", help="list, describe, delete consumer groups and reset their offsets",
                            description="Consumer-group administration over the Kafka protocol, with "
                                        "kafka-consumer-groups.sh's options and tables.")
    cli_groups.add_arguments(parser)
    from tidelog import cli_share_groups  # (issue 31, KIP-932)
    parser = sub.add_parser("share-groups", help="list, describe share groups and reset their start offsets",
                            description="Share-group administration over the Kafka protocol, with "
                                        "kafka-share-groups.sh's options and tables.")
    cli_share_groups.add_arguments(parser)
    parser = sub.add_parser("configs", help="describe and alter topic and broker configs",
                            description="Topic and broker configs over the Kafka protocol, with "
                                        "kafka-configs.sh's options and output.")
    cli_configs.add_arguments(parser)
    from tidelog import cli_acls  # (issue 29)
    parser = sub.add_parser("acls", help="add, remove, list ACLs (kafka-acls)",
                            description="ACLs over the Kafka protocol (CreateAcls, DeleteAcls, DescribeAcls), with "
                                        "kafka-acls.sh's options and output; needs a broker authorizer.")
    cli_acls.add_arguments(parser)
    from tidelog import cli_users  # (issue 29, KIP-554)
    parser = sub.add_parser("users", help="create, delete, list SCRAM users (kafka-configs --entity-type users)",
                            description="SCRAM credentials over the Kafka protocol (AlterUserScramCredentials, "
                                        "DescribeUserScramCredentials); the password is salted and hashed here.")
    cli_users.add_arguments(parser)
    parser = sub.add_parser("reassign", help="move partitions' replicas, change their RF (kafka-reassign-partitions)",
                            description="Partition reassignment (KIP-455) over the admin API, with "
                                        "kafka-reassign-partitions.sh's options and plan files.")
    cli_reassign.add_arguments(parser)
    parser = sub.add_parser("transactions", help="list, describe, abort transactions; find hanging ones",
                            description="Transaction tools (KIP-664) over the Kafka protocol, with "
                                        "kafka-transactions.sh's options and tables.")
    cli_transactions.add_arguments(parser)
    parser = sub.add_parser("quorum", help="describe the metadata quorum (kafka-metadata-quorum)",
                            description="DescribeQuorum over the admin API, with kafka-metadata-quorum.sh's "
                                        "describe --status / --replication output.")
    cli_quorum.add_arguments(parser)
    parser = sub.add_parser("features", help="describe, upgrade, downgrade, disable features (kafka-features)",
                            description="Finalized features (KIP-584) over the admin API, with kafka-features.sh's "
                                        "options and output.")
    cli_features.add_arguments(parser)


def _add_spark(sub: argparse._SubParsersAction) -> None:
    from tidelog import cli_spark  # stdlib only at import; PySpark loads when a job runs

    parser = sub.add_parser("spark", help="Spark jobs over tidelog topics (needs the spark extra)",
                            description="Spark jobs that use the tidelog data source.")
    jobs = parser.add_subparsers(dest="spark_command", required=True, metavar="JOB")
    ingest = jobs.add_parser(
        "ingest", help="stream a topic into Parquet files, exactly once",
        description="Stream a topic into files with Spark's file sink and a checkpoint (exactly-once output), "
                    "printing rows, offsets and lag per micro-batch.")
    cli_spark.add_ingest_arguments(ingest)
    ingest.set_defaults(run=cli_spark.run_ingest)


def _add_chaos(sub: argparse._SubParsersAction) -> None:
    from chaos import (
        cli as chaos_cli,  # stdlib only at import; clients load when a scenario runs
    )

    parser = sub.add_parser("chaos", help="chaos scenarios: list, run, report, clean",
                            description="Run chaos scenarios against a local cluster and report what held.")
    chaos_cli.add_arguments(parser)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser with every subcommand (or with the node command `only`)."""
    parser = argparse.ArgumentParser(prog="tidelog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # A node process (what `tidelog up` starts, six at once) builds only its own subcommand: the
    # other subcommands' imports would add ~0.2 s of CPU to every node's start-up.
    node = next((c for c in NODE_COMMANDS if c.name == only), None)
    if node is not None:
        _add_node(sub, node)
        return parser
    for add in (_add_up, _add_down, _add_clients):
        add(sub)
    for command in NODE_COMMANDS:
        _add_node(sub, command)
    _add_dump_log(sub)
    _add_spark(sub)
    _add_chaos(sub)
    _add_hosts(sub)
    from tidelog import cli_format  # (issue 30) stdlib and the config table only
    cli_format.add_arguments(sub.add_parser(
        "format", help="make one node's config and storage for its own machine (kafka-storage format)",
        description="Write server.properties, meta.properties and the cluster's secrets for one node, so it "
                    "starts on another machine with `tidelog broker|controller|combined --config`."))
    return parser


def _add_hosts(sub: argparse._SubParsersAction) -> None:
    from tidelog.hosts import up as hosts_up  # (issue 30) stdlib and iproute2 only

    parser = sub.add_parser("hosts", help="network-namespace hosts: clean the leftovers of dead runs",
                            description="The network namespaces `tidelog up --hosts netns` and the tests make.")
    hosts_up.add_hosts_arguments(parser)


def _keep_hypothesis_from_kio() -> None:
    """kio registers Hypothesis strategies for its message types whenever Hypothesis can be
    imported (it can wherever tidelog's test extra is installed), and Hypothesis then builds
    its character map, cached per working directory: measured 5 s of every node's start in a
    new directory (`tidelog up` READY after 8 s instead of 2.6 s). tidelog's processes never
    generate examples, so kio must not see Hypothesis. A test process that already imported
    it (pytest loads its plugin), or any pytest run, is left as it is."""
    if "pytest" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]  # import of it fails


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tidelog` console script."""
    _keep_hypothesis_from_kio()
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(words[0] if words else None).parse_args(words)
    run: Runner = args.run
    # a client command's --data-dir, or chaos run's --cluster-dir, may name a cluster of namespaced hosts
    named_dir = getattr(args, "data_dir", None) or getattr(args, "cluster_dir", None)
    if named_dir is not None and args.command not in {c.name for c in NODE_COMMANDS}:
        from tidelog.hosts.up import prepare_client_command  # (issue 30) a netns cluster's client namespace
        problem = prepare_client_command(args)
        if problem is not None:
            print(f"tidelog {args.command}: {problem}", file=sys.stderr)
            return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
