"""`tidelog consume TOPIC`: records to stdout, like kafka-console-consumer (without a group).

    tidelog consume demo --from-beginning --max-messages 10 --property print.key=true
    tidelog consume demo --partition 0 --offset 42 --timeout-ms 5000

Every partition of the topic is read (or only `--partition`), from the latest offset unless
`--from-beginning` or `--offset earliest|latest|N` (which, as in Kafka, needs `--partition`);
`tidelog.consumer` fetches each from its leader and follows leadership moves. It stops after
`--max-messages`, after `--timeout-ms` without a new record, or on Ctrl-C, then says
"Processed a total of N messages" on stderr (as Kafka's does) and exits 0; an unknown topic
or a cluster error exits 1 with Kafka's error name; bad options exit 2.

There is no consumer group here (as kafka-console-consumer without --group): nothing is
committed, and two consumers both read everything. Group consumers: any Kafka client.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Final

from tidelog import cli_common
from tidelog.cli_common import ClusterError, UsageError

if TYPE_CHECKING:
    from tidelog.consumer import StartOffset

EARLIEST: Final = "earliest"
LATEST: Final = "latest"


def parse_offset(text: str) -> tuple[str | None, int | None]:
    """kafka-console-consumer's --offset: a non-negative number, earliest or latest, as (name, offset)."""
    if text in (EARLIEST, LATEST):
        return text, None
    if text.isdigit():
        return None, int(text)
    raise argparse.ArgumentTypeError(f"must be a non-negative number, 'earliest' or 'latest', got {text!r}")


def start_offset(*, from_beginning: bool, offset: tuple[str | None, int | None] | None,
                 partition: int | None) -> StartOffset:
    """Kafka's option rules; UsageError naming the clash."""
    from tidelog.consumer import StartOffset

    if offset is not None and partition is None:
        raise UsageError("--offset needs --partition (as kafka-console-consumer)")
    if offset is not None and from_beginning:
        raise UsageError("--from-beginning and --offset cannot be given together")
    if offset is not None:
        return StartOffset(named=offset[0], offset=offset[1])
    return StartOffset(named=EARLIEST if from_beginning else LATEST)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC", help="the topic to read")
    cli_common.add_cluster_options(parser, admin=False)
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset (default: the latest, only new records)")
    parser.add_argument("--partition", type=cli_common.non_negative_int, help="read only this partition")
    parser.add_argument("--offset", type=parse_offset, metavar="N|earliest|latest",
                        help="where to start reading --partition")
    parser.add_argument("--max-messages", type=cli_common.positive_int, help="stop after this many records")
    parser.add_argument("--timeout-ms", type=cli_common.positive_int, help="stop when no record came for this long")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="kafka-console-consumer's print.key, print.value, print.partition, print.offset, "
                             "print.timestamp, print.headers, key.separator (default tab), line.separator, "
                             "headers.separator, null.literal")


def consume(args: argparse.Namespace) -> int:
    # imported here: `tidelog` builds every subcommand's parser, and the nodes need none of this
    from tidelog.console_records import FormatError, consumer_format
    from tidelog.consumer import Consumer, existing_topic
    from common.kafka_client import KafkaClient

    try:
        fmt = consumer_format(args.property)
    except FormatError as exc:
        raise UsageError(str(exc)) from None
    start = start_offset(from_beginning=args.from_beginning, offset=args.offset, partition=args.partition)
    found = cli_common.resolve(args, need_kafka=True)
    out = sys.stdout.buffer
    consumer: Consumer | None = None
    with KafkaClient(found.bootstrap_servers, client_id="tidelog-console-consumer", security=found.security) as client:
        try:
            topic = existing_topic(client, args.topic)
            if args.partition is not None and args.partition not in topic.partitions:
                raise ClusterError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {args.topic!r} has no partition "
                                   f"{args.partition} (it has {len(topic.partitions)})")
            partitions = [args.partition] if args.partition is not None else sorted(topic.partitions)
            consumer = Consumer(client, args.topic, partitions, start, fmt, out,
                                reset=EARLIEST if args.from_beginning else LATEST)
            last_record = time.monotonic()
            while args.max_messages is None or consumer.count < args.max_messages:  # until a limit or Ctrl-C
                if consumer.poll(args.max_messages):
                    out.flush()
                    last_record = time.monotonic()
                elif args.timeout_ms is not None and time.monotonic() - last_record >= args.timeout_ms / 1000:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            if consumer is not None:
                print(f"Processed a total of {consumer.count} messages", file=sys.stderr)
    out.flush()
    return 0


run = cli_common.guarded("consume", consume)
