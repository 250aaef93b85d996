"""`tidelog transactions ...`: kafka-transactions.sh (KIP-664) over the Kafka protocol.

    tidelog transactions list [--duration-filter 60000]
    tidelog transactions describe --transactional-id app-1
    tidelog transactions describe-producers --topic orders --partition 0 [--broker-id 2]
    tidelog transactions abort --topic orders --partition 0 --start-offset 1200
    tidelog transactions find-hanging --topic orders [--partition 0] [--max-transaction-timeout 15]
    tidelog transactions find-hanging --broker-id 2

Options, table headers and layout are kafka-transactions.sh's (each cell padded, then a tab),
so what reads Kafka's output reads ours. abort finds the producer of the open transaction
starting at --start-offset with DescribeProducers on the leader, then writes an abort marker
there with WriteTxnMarkers; a hanging transaction is one open longer than
--max-transaction-timeout minutes that its producer's coordinator does not list for that
partition (it will never write its marker). Errors print Kafka's error name and exit 1.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from common import transaction_admin as ta
from common.units import MINUTE_MS
from common.topic_partition import TopicPartition
from tidelog import cli_common
from tidelog.cli_common import ClusterError, UsageError

if TYPE_CHECKING:  # the client loads when a command runs, not when the parser is built
    from tidelog.transaction_admin import TransactionAdmin

T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="transactions_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="list transactions (ListTransactions on every broker)")
    cli_common.add_cluster_options(listing, admin=False)
    listing.add_argument("--duration-filter", type=int, metavar="MS",
                         help="only transactions running longer than this many milliseconds (KIP-994); "
                              "negative: all")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", help="describe the state of an active transactional-id",
                                  description="Describe the state of an active transactional-id.")
    cli_common.add_cluster_options(describe, admin=False)
    describe.add_argument("--transactional-id", required=True, help="transactional id")
    describe.set_defaults(run=run_describe)

    producers = actions.add_parser("describe-producers",
                                   help="describe the states of active producers for a topic partition")
    cli_common.add_cluster_options(producers, admin=False)
    producers.add_argument("--broker-id", type=int,
                           help="optional broker id to describe the producer state on a specific replica")
    producers.add_argument("--topic", required=True, help="topic name")
    producers.add_argument("--partition", required=True, type=cli_common.non_negative_int, help="partition number")
    producers.set_defaults(run=run_describe_producers)

    abort = actions.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    cli_common.add_cluster_options(abort, admin=False)
    abort.add_argument("--topic", required=True, help="topic name")
    abort.add_argument("--partition", required=True, type=cli_common.non_negative_int, help="partition number")
    newer = abort.add_argument_group("Brokers on versions 3.0 and above",
                                     "For newer brokers, only the start offset of the transaction to be aborted "
                                     "is required")
    newer.add_argument("--start-offset", type=cli_common.non_negative_int,
                       help="start offset of the transaction to abort")
    older = abort.add_argument_group("Brokers on versions older than 3.0",
                                     "For older brokers, you must provide all of these arguments")
    older.add_argument("--producer-id", type=cli_common.non_negative_int, help="producer id")
    older.add_argument("--producer-epoch", type=cli_common.non_negative_int, help="producer epoch")
    older.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")
    abort.set_defaults(run=run_abort)

    find = actions.add_parser("find-hanging", help="find hanging transactions")
    cli_common.add_cluster_options(find, admin=False)
    find.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    find.add_argument("--max-transaction-timeout", type=cli_common.non_negative_int,
                      default=ta.DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
                      help="maximum transaction timeout in minutes to limit the scope of the search "
                           f"(default: {ta.DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES})")
    find.add_argument("--topic", help="topic name to limit search to")
    find.add_argument("--partition", type=cli_common.non_negative_int, help="partition number")
    find.set_defaults(run=run_find_hanging)


def abort_request(args: argparse.Namespace) -> int | ta.AbortSpec:
    """--start-offset N (the leader finds the producer), or the older form's explicit spec.
    As Kafka's tool, a negative --coordinator-epoch (DescribeProducers' -1 for a producer
    whose transaction never ended) becomes 0, which is at most any epoch a coordinator had."""
    if args.start_offset is not None:
        return int(args.start_offset)
    if args.producer_id is None:
        raise UsageError("The transaction to abort must be identified either with --start-offset (for brokers on "
                         "3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for "
                         "older brokers)")
    if args.producer_epoch is None:
        raise UsageError("Missing required argument --producer-epoch")
    if args.coordinator_epoch is None:
        raise UsageError("Missing required argument --coordinator-epoch")
    return ta.AbortSpec(TopicPartition(args.topic, args.partition), args.producer_id, args.producer_epoch,
                        max(args.coordinator_epoch, 0))


def _run(args: argparse.Namespace, command: str, body: Callable[[TransactionAdmin], T]) -> T:
    """`body` with a TransactionAdmin on the cluster's brokers; its errors as the CLI reports them."""
    from common.kafka_client import KafkaClient
    from tidelog.transaction_admin import TransactionAdmin

    found = cli_common.resolve(args, need_kafka=True)
    with KafkaClient(found.bootstrap_servers, client_id="tidelog-transactions", security=found.security) as client:
        admin = TransactionAdmin(client)
        try:
            return body(admin)
        except ta.TransactionToolError as exc:
            if exc.error == "INVALID_REQUEST" and exc.field in ("topic", "partition"):
                raise UsageError(exc.message) from None
            raise ClusterError(exc.error, exc.message) from None
        except OSError as exc:
            raise ClusterError("NETWORK_EXCEPTION", f"{command}: {exc}") from None


def _list(args: argparse.Namespace) -> int:
    listings = _run(args, "list", lambda admin: admin.run(ta.list_transactions(
        admin.cluster(), duration_filter_ms=args.duration_filter)))
    cli_common.say_lines(ta.kafka_table(ta.LIST_HEADERS, ta.list_rows(listings)))
    return 0


def _describe(args: argparse.Namespace) -> int:
    description = _run(args, "describe", lambda admin: admin.run(ta.describe_transaction(args.transactional_id)))
    now_ms = int(time.time() * 1000)
    cli_common.say_lines(ta.kafka_table(ta.DESCRIBE_HEADERS, [ta.describe_row(description, now_ms)]))
    return 0


def _describe_producers(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    producers = _run(args, "describe-producers",
                     lambda admin: admin.run(ta.describe_producers(admin.cluster(), tp, args.broker_id)))
    cli_common.say_lines(ta.kafka_table(ta.PRODUCERS_HEADERS, ta.producer_rows(producers)))
    return 0


def _abort(args: argparse.Namespace) -> int:
    what = abort_request(args)
    tp = TopicPartition(args.topic, args.partition)
    if isinstance(what, ta.AbortSpec):
        _run(args, "abort", lambda admin: admin.run(ta.write_abort_marker(admin.cluster(), what)))
    else:
        _run(args, "abort", lambda admin: admin.run(ta.abort_transaction(admin.cluster(), tp, what)))
    return 0  # Kafka's tool prints nothing when the marker is written


def _find_hanging(args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise UsageError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                         "of the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("The --partition argument requires --topic to be provided")
    now_ms = int(time.time() * 1000)
    found = _run(args, "find-hanging", lambda admin: admin.run(ta.find_hanging(
        admin.cluster(), topic=args.topic, partition=args.partition, broker_id=args.broker_id,
        max_transaction_timeout_ms=args.max_transaction_timeout * MINUTE_MS, now_ms=now_ms)))
    cli_common.say_lines(ta.kafka_table(ta.HANGING_HEADERS, ta.hanging_rows(found, now_ms)))
    return 0


run_list = cli_common.guarded("transactions list", _list)
run_describe = cli_common.guarded("transactions describe", _describe)
run_describe_producers = cli_common.guarded("transactions describe-producers", _describe_producers)
run_abort = cli_common.guarded("transactions abort", _abort)
run_find_hanging = cli_common.guarded("transactions find-hanging", _find_hanging)
