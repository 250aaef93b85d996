"""SIGTERM → exit of a broker that leads many partitions: the controlled-shutdown path, timed.

    python bench/controlled_shutdown.py [--partitions 1000] [--runs 3] [--records-per-partition 0]
    python bench/controlled_shutdown.py --in-process [--partitions 10000] [--topics 1000]

A real cluster on loopback (3 controllers, brokers 4 and 5, default heartbeat settings).
Broker 5 is stopped first, so a topic of `--partitions` RF=1 partitions created next is led
entirely by broker 4; broker 5 is started again (it must be an active broker: the controller
answers should_shut_down only once every active broker has replayed the shutdown's records).
Then, `--runs` times: wait until broker 4 leads every partition, SIGTERM it, time until
the process exits, and start it again.

Per run it prints SIGTERM → exit, and from broker 4's own log the two phases: SIGTERM → the
controller's should_shut_down (leaders moved: RF=1 partitions go offline, KIP-841) and
should_shut_down → exit (listener, follower checkpoint, logs flushed and closed, clean
marker). The goal (issue 6) is ≤ 2 s for 1 000 partitions on the development machine.
`--in-process` measures what issue 35 found to dominate a controlled shutdown at 10,000
partitions: the other brokers taking the leaving broker's roles. One ReplicaManager (broker 5,
logs in a temp dir) hosts `--partitions` RF=3 partitions of brokers 4, 5 and 6 in `--topics`
topics, replicas in the six orders, and applies the image where broker 4 left every ISR and its
leaderships moved to the next replica, in the metadata follower's slices. It prints the process
CPU (all threads) and wall time of that apply, per role change (new leaderships and followers
of a new leader epoch), beside the load average; run it against an earlier commit with
`PYTHONPATH=<a git archive of it>`.

Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Final

from bench_common import broker_gauge, http, wait_until
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess

HOSTS: Final = tuple(f"127.0.0.{n}" for n in range(1, 6))
UNDER_TEST, OTHER = 4, 5
READY_S: Final = 60.0
WAIT_S: Final = 120.0
EXIT_WAIT_S: Final = 60.0
HTTP_TIMEOUT_S: Final = 30.0
SETTLE_S: Final = 2.0  # after broker 4 leads everything: let its follower and the other broker's settle
PROPERTIES: Final[dict[str, str]] = {}  # Kafka's defaults: heartbeats every 2 s, sessions of 9 s
STAMP: Final = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def led_by(cluster: LocalCluster, topic: str, broker: int) -> int:
    view = http(f"{cluster.admin_url}/v1/topics/{topic}")
    return sum(1 for p in view["partitions"] if p["leader"] == broker)


def restart(cluster: LocalCluster, node_id: int) -> NodeProcess:
    old = cluster.node(node_id)
    new = NodeProcess.spawn(old.spec)
    cluster.nodes[cluster.nodes.index(old)] = new
    cluster.write_cluster_file()
    return new


def stamps(log: str, since: int) -> dict[str, float]:
    """Epoch seconds of the shutdown transitions logged after byte `since` of the node log."""
    marks = {"pending": "Transitioning from RUNNING to PENDING_CONTROLLED_SHUTDOWN.",
             "should_shut_down": "Transitioning from PENDING_CONTROLLED_SHUTDOWN to SHUTTING_DOWN.",
             "stopped": "Transitioning from SHUTTING_DOWN to SHUTDOWN."}
    out: dict[str, float] = {}
    for line in log[since:].splitlines():
        match = STAMP.match(line)
        for name, text in marks.items():
            if match and text in line and name not in out:
                out[name] = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return out


def produce(cluster: LocalCluster, topic: str, partitions: int, per_partition: int) -> None:
    if not per_partition:
        return
    from common.records import build_batch
    from common.kafka_client import KafkaClient

    host, port = cluster.node(UNDER_TEST).spec.bootstrap_address.split(":")
    with KafkaClient([(host, int(port))]) as client:
        client.metadata([topic])
        batch = build_batch([(None, b"x" * 100)] * per_partition)
        for first in range(0, partitions, 100):
            batches = {p: batch for p in range(first, min(partitions, first + 100))}
            answers = client.produce(UNDER_TEST, topic, batches, acks=-1, timeout_ms=30_000)
            bad = {p: a.error_code for p, a in answers.items() if a.error_code}
            if bad:
                raise SystemExit(f"produce failed: {bad}")


def run(partitions: int, runs: int, per_partition: int, keep: Path | None) -> list[float]:
    results: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-shutdown-") as tmp:
        raft, admin, kafka, metrics = free_ports(HOSTS, 4)
        with LocalCluster.start(keep or Path(tmp), controllers=3, raft_port=raft, admin_port=admin, brokers=2,
                                kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S,
                                extra_properties=PROPERTIES) as cluster:
            other = cluster.node(OTHER)
            other.stop()
            wait_until("broker 5 fenced", lambda: http(f"{cluster.admin_url}/v1/brokers/{OTHER}")["fenced"])
            http(f"{cluster.admin_url}/v1/topics", "POST",
                 {"name": "many", "partitions": partitions, "replication_factor": 1})
            other = restart(cluster, OTHER)
            wait_until("broker 5 unfenced", lambda: http(f"{cluster.admin_url}/v1/brokers/{OTHER}")["state"]
                       == "UNFENCED")
            for attempt in range(1, runs + 1):
                node = cluster.node(UNDER_TEST)
                wait_until(f"broker 4 unfenced, leading all {partitions} partitions",
                           lambda: http(f"{cluster.admin_url}/v1/brokers/{UNDER_TEST}")["state"] == "UNFENCED"
                           and led_by(cluster, "many", UNDER_TEST) == partitions
                           and broker_gauge(node, "partitions_led", HTTP_TIMEOUT_S) == partitions)
                time.sleep(SETTLE_S)
                if attempt == 1:
                    produce(cluster, "many", partitions, per_partition)
                since = node.spec.log_path.stat().st_size
                wall = time.time()
                started = time.monotonic()
                node.send(signal.SIGTERM)
                wait_until("broker 4 to exit", lambda: not node.running(), EXIT_WAIT_S, poll=0.005)
                elapsed = time.monotonic() - started
                results.append(elapsed)
                marks = stamps(node.spec.log_path.read_text(errors="replace"), since)
                phases = ""
                if "should_shut_down" in marks:
                    phases = (f"  (SIGTERM → should_shut_down {(marks['should_shut_down'] - wall) * 1000:.0f} ms, "
                              f"→ logs closed {(marks.get('stopped', wall) - marks['should_shut_down']) * 1000:.0f}"
                              " ms, then process exit)")
                print(f"run {attempt}: broker {UNDER_TEST} leading {partitions} partitions: SIGTERM → exit "
                      f"{elapsed * 1000:.0f} ms, exit status {node.exit_status}{phases}", flush=True)
                restart(cluster, UNDER_TEST)
    return results


def role_changes(partitions: int, topics: int) -> None:
    """`--in-process`: broker 5 takes broker 4's roles (see the module docstring)."""
    import asyncio

    from role_changes import images, one_run  # bench/role_changes.py, without its fetchers here

    before, after = images(partitions, topics)
    run = asyncio.run(one_run(before, after, with_fetchers=False))
    roles, cpu, wall, synced = run.roles, run.cpu_s, run.wall_s, run.checkpoint_s
    print(f"broker {OTHER} hosting {partitions} partitions in {topics} topics takes {roles} roles of broker "
          f"{UNDER_TEST} ({run.changed} partitions changed): CPU {cpu:.2f} s "
          f"({cpu / roles * 1000:.3f} ms per role change), wall {wall:.2f} s, then the next recovery-point "
          f"checkpoint {synced:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records-per-partition", type=int, default=0,
                        help="records written to every partition before the first run (default 0)")
    parser.add_argument("--keep", type=Path, help="an empty directory for the cluster, kept afterwards (logs)")
    parser.add_argument("--in-process", action="store_true",
                        help="only the role changes of the other brokers, in this process (see above)")
    parser.add_argument("--topics", type=int, default=1000, help="with --in-process: topics sharing the partitions")
    args = parser.parse_args()
    if args.in_process:
        role_changes(args.partitions, args.topics)
        return
    results = run(args.partitions, args.runs, args.records_per_partition, args.keep)
    print(f"SIGTERM → exit over {len(results)} runs: median {statistics.median(results) * 1000:.0f} ms, "
          f"max {max(results) * 1000:.0f} ms (goal: ≤ 2000 ms for 1000 partitions)")


if __name__ == "__main__":
    main()
