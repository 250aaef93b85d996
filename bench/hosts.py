"""Hosts as network namespaces against loopback (issue 30): the same cluster shape on one
machine, once with every node on 127.0.0.N and once with every node in its own namespace
(veth pairs to a bridge, tidelog.hosts), the client in a namespace of its own; produce and
consume throughput and acks=all latency with the C client (bench/loadgen.c, librdkafka).

    .venv/bin/python bench/hosts.py [--records 200000] [--rounds 2]    # make bench-hosts (needs root)

Both clusters run at once (1 controller, 3 brokers, an RF=3 topic of 3 partitions with
min.insync.replicas=2, so every acks=all write crosses two links), and their phases alternate
round by round so that the shared machine's load falls on both alike. Per round and cluster:
`--records` × 100 B produced as fast as acks=all and linger.ms=5 allow (throughput), read back
from offset 0 (throughput), then LATENCY_RECORDS paced at LATENCY_RATE/s, each record's
acks=all round trip timed (p50/p99). The namespaced phases run the client from inside the
client namespace (setns on this thread; loadgen, a child, inherits it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from contextlib import ExitStack, nullcontext
from pathlib import Path
from collections.abc import Callable
from typing import Any, ContextManager, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import c_client  # noqa: E402
from common.waiting import wait_until  # noqa: E402
from localcluster.launcher import LocalCluster, free_ports  # noqa: E402
from tidelog.admin_client import AdminClient  # noqa: E402
from tidelog.hosts import netns  # noqa: E402
from tidelog.hosts.cluster import CLIENT_HOST, NetnsCluster, admin_token  # noqa: E402

VALUE_BYTES: Final = 100
PARTITIONS: Final = 3
LINGER_MS: Final = 5
LATENCY_RECORDS: Final = 3_000
LATENCY_RATE: Final = 500  # records/s: well below saturation, so the latency is the path's, not a queue's
READY_S: Final = 90.0
LOOPBACK_HOSTS: Final = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
TOPIC_CONFIGS: Final = {"min.insync.replicas": "2"}


class Target:
    """One cluster under test: where its client runs and how it reaches it."""

    def __init__(self, name: str, cluster: LocalCluster, admin: AdminClient,
                 client: Callable[[], ContextManager[Any]]) -> None:
        self.name, self.cluster, self.admin, self._client = name, cluster, admin, client
        self.results: list[dict[str, float]] = []

    @property
    def bootstrap(self) -> str:
        return str(self.cluster.bootstrap_servers)

    def entered(self) -> ContextManager[Any]:
        """Where this target's client runs (a fresh context each time: they are single-use)."""
        return self._client()

    def create_topic(self, topic: str) -> None:
        self.admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3, configs=TOPIC_CONFIGS)
        wait_until(f"{self.name}: {topic} fully replicated", lambda: all(
            p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"])
            for p in self.admin.topic(topic)["partitions"]), READY_S)


def one_round(binary: Path, target: Target, records: int, round_no: int) -> dict[str, float]:
    topic = f"bench-{round_no}"
    with target.entered():
        target.create_topic(topic)
        target.create_topic(f"{topic}-latency")
        produced = c_client.produce(binary, target.bootstrap, topic, records=records, value_bytes=VALUE_BYTES,
                                    partitions=PARTITIONS, acks="all", linger_ms=LINGER_MS)
        consumed = c_client.consume(binary, target.bootstrap, topic, records=records, partitions=PARTITIONS)
        paced = c_client.produce(binary, target.bootstrap, f"{topic}-latency", records=LATENCY_RECORDS,
                                 value_bytes=VALUE_BYTES, partitions=PARTITIONS, acks="all", linger_ms=0,
                                 rate=LATENCY_RATE, warmup=100)
    assert paced.p50_ms is not None and paced.p99_ms is not None, "a paced run times every record"
    result = {"produce_rps": produced.records / produced.seconds, "consume_rps": consumed.records / consumed.seconds,
              "p50_ms": paced.p50_ms, "p99_ms": paced.p99_ms}
    print(f"  round {round_no} {target.name:<9} produce {result['produce_rps']:>9,.0f} rec/s  consume "
          f"{result['consume_rps']:>9,.0f} rec/s  acks=all p50 {result['p50_ms']:.2f} ms  p99 "
          f"{result['p99_ms']:.2f} ms", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    unavailable = netns.available()
    if unavailable is not None:
        print(f"bench/hosts.py: {unavailable}", file=sys.stderr)
        return 2
    binary = c_client.build()
    if binary is None:
        return 1
    with ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tidelog-bench-hosts-")))
        raft, admin_port, kafka, metrics = free_ports(LOOPBACK_HOSTS, 4)
        loopback = stack.enter_context(LocalCluster.start(
            base / "loopback", controllers=1, brokers=3, raft_port=raft, admin_port=admin_port, kafka_port=kafka,
            metrics_port=metrics, ready_timeout=READY_S))
        hosted = NetnsCluster.start(base / "netns", controllers=1, brokers=3, ready_timeout=READY_S)
        stack.callback(hosted.remove)  # its nodes stopped and every namespace removed, whatever happens
        targets = [
            Target("loopback", loopback, AdminClient([loopback.admin_url]), nullcontext),
            Target("netns", hosted, AdminClient([n.spec.admin_url for n in hosted.controllers],
                                                token=admin_token(hosted.root)),
                   lambda: hosted.network.entered(CLIENT_HOST)),
        ]
        print(f"loadgen on librdkafka {c_client.librdkafka_version(binary)}; {args.records:,} x {VALUE_BYTES} B, "
              f"RF=3, {PARTITIONS} partitions, min ISR 2", flush=True)
        for round_no in range(1, args.rounds + 1):
            for target in targets if round_no % 2 else reversed(targets):  # alternate who goes first
                target.results.append(one_round(binary, target, args.records, round_no))
    print(f"\n{'cluster':<9} {'produce rec/s':>14} {'consume rec/s':>14} {'p50 ms':>8} {'p99 ms':>8}   (median of "
          f"{args.rounds} rounds)")
    for target in targets:
        med = {key: statistics.median(r[key] for r in target.results) for key in target.results[0]}
        print(f"{target.name:<9} {med['produce_rps']:>14,.0f} {med['consume_rps']:>14,.0f} {med['p50_ms']:>8.2f} "
              f"{med['p99_ms']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
