"""The `tidelog` command: a thin argparse front over the packages. No logic lives here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

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
        "up", help="start a local cluster on loopback addresses",
        description="Start a local cluster, one process per node on its own loopback address "
                    "127.0.0.N; wait until ready, print READY and the nodes, then run until "
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


def _add_controller(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "controller", help="run one controller: a metadata quorum voter and its HTTP API",
        description="Run a controller (quorum voter, active-controller loop, admin API and broker RPCs "
                    "on controller.listener) until SIGTERM or Ctrl-C.")
    parser.add_argument("--config", required=True, help="server.properties of this controller")

    def run(args: argparse.Namespace) -> int:
        from quorum import node

        return node.run(args.config, control=False, require_api=True)

    parser.set_defaults(run=run)


def _add_broker(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "broker", help="run one broker: the Kafka listener, its logs, and a metadata follower",
        description="Run a broker (Kafka listener on `listeners`, partition logs in log.dirs, metadata "
                    "follower of controller.api.voters, GET /metrics on metrics.listener) until SIGTERM "
                    "or Ctrl-C.")
    parser.add_argument("--config", required=True, help="server.properties of this broker")

    def run(args: argparse.Namespace) -> int:
        from broker import node

        return node.run(args.config)

    parser.set_defaults(run=run)


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="tidelog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_up, _add_down, _add_controller, _add_broker, _add_dump_log):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tidelog` console script."""
    args = build_parser().parse_args(argv)
    run: Runner = args.run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
