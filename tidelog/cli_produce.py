"""`tidelog produce TOPIC`: lines from stdin to a topic, like kafka-console-producer.

    printf 'k1:hello\\nk2:world\\n' | tidelog produce demo --key-separator :
    tidelog produce demo --property parse.key=true --property key.separator=: < lines.txt

Each line is one record (its value; with a key separator, KEY SEP VALUE), stamped with the
time it was read. Records are batched (`--batch-size` lines, or `--linger-ms` after the first
pending line, whichever comes first) and sent with acks=all by default; partitioning and
retries are `tidelog.producer`'s (Kafka's partitioner; retriable errors resend until
`--delivery-timeout-ms`). Exit 0 once every line is acknowledged; 1 with Kafka's error name
when a record cannot be delivered; 2 for bad options.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import Final

from common.limits import READ_SIZE
from common.units import KIB
from tidelog import cli_common
from tidelog.cli_common import ClusterError, UsageError

MAX_PENDING_BYTES: Final = 512 * KIB  # a flush before one request grows past this (message.max.bytes is 1 MiB)
ACKS: Final = {"all": -1, "-1": -1, "1": 1, "0": 0}
CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")  # common.record_batch.CompressionType's names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC", help="the topic to write to")
    cli_common.add_cluster_options(parser, admin=False)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="each line is KEY SEP VALUE (implies --property parse.key=true; \\t is a tab)")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="kafka-console-producer's parse.key, key.separator (default tab), ignore.error")
    parser.add_argument("--partition", type=cli_common.non_negative_int, help="write every record to this partition")
    parser.add_argument("--request-required-acks", choices=sorted(ACKS), default="all",
                        help="acks: all (-1, default), 1 or 0")
    parser.add_argument("--compression-codec", choices=CODECS, default="none")
    parser.add_argument("--batch-size", type=cli_common.positive_int, default=200,
                        help="lines sent in one request at most (default 200, as kafka-console-producer)")
    parser.add_argument("--linger-ms", type=cli_common.non_negative_int, default=100,
                        help="longest a read line waits for more before it is sent (default 100)")
    parser.add_argument("--request-timeout-ms", type=cli_common.positive_int, default=30_000,
                        help="the Produce request's timeout at the broker (default 30000)")
    parser.add_argument("--delivery-timeout-ms", type=cli_common.positive_int, default=30_000,
                        help="give up on a record after this long, retries included (default 30000)")


def _lines(fd: int, linger_s: float, pending: Callable[[], bool]) -> Iterator[bytes | None]:
    """Lines from `fd` as they come; None when pending records have lingered long enough (a flush)."""
    from tidelog.console_records import LineSplitter

    splitter = LineSplitter()
    waiting_since: float | None = None
    while True:  # until end of input
        if not pending():
            waiting_since = None
        elif waiting_since is None:
            waiting_since = time.monotonic()
        timeout = None if waiting_since is None else max(0.0, waiting_since + linger_s - time.monotonic())
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            waiting_since = None
            yield None
            continue
        data = os.read(fd, READ_SIZE)
        if not data:
            yield from splitter.finish()
            return
        yield from splitter.feed(data)


def produce(args: argparse.Namespace) -> int:
    # imported here: `tidelog` builds every subcommand's parser, and the nodes need none of this
    from common.record_batch import CompressionType
    from tidelog.console_records import FormatError, producer_format
    from common.kafka_client import KafkaClient
    from tidelog.producer import PendingRecord, Producer, Router

    try:
        fmt = producer_format(args.property, args.key_separator)
    except FormatError as exc:
        raise UsageError(str(exc)) from None
    found = cli_common.resolve(args, need_kafka=True)
    records: list[PendingRecord] = []
    size = 0
    line_number = 0
    with KafkaClient(found.bootstrap_servers, client_id="tidelog-console-producer", security=found.security) as client:
        producer = Producer(client, args.topic, acks=ACKS[args.request_required_acks],
                            request_timeout_ms=args.request_timeout_ms, delivery_timeout_ms=args.delivery_timeout_ms,
                            compression=CompressionType[args.compression_codec.upper()], router=Router(args.partition))

        def flush() -> None:
            nonlocal size
            if records:
                producer.send(records)
                records.clear()
                size = 0
        try:
            for line in _lines(sys.stdin.fileno(), args.linger_ms / 1000, lambda: bool(records)):
                if line is None:
                    flush()
                    continue
                line_number += 1
                try:
                    key, value = fmt.parse(line)
                except FormatError as exc:
                    raise ClusterError("INVALID_RECORD", f"line {line_number}: {exc}") from None
                records.append(PendingRecord(key, value, time.time_ns() // 1_000_000,
                                             movable=key is None and args.partition is None))
                size += len(value) + len(key or b"")
                if len(records) >= args.batch_size or size >= MAX_PENDING_BYTES:
                    flush()
            flush()
        except FormatError as exc:  # a line longer than the splitter holds
            raise ClusterError("RECORD_LIST_TOO_LARGE", f"after line {line_number}: {exc}") from None
        except KeyboardInterrupt:
            try:
                flush()  # what was read and not yet acknowledged is sent, as kafka-console-producer's close() does
            except KeyboardInterrupt:
                print(f"tidelog produce: interrupted again; {len(records)} record(s) not sent", file=sys.stderr)
    partitions = ", ".join(map(str, sorted(producer.partitions_written))) or "none"
    print(f"tidelog produce: {producer.delivered} record(s) to {args.topic} (partitions {partitions})",
          file=sys.stderr)
    return 0


run = cli_common.guarded("produce", produce)
