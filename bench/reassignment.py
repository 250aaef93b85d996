"""How long a partition reassignment (KIP-455) takes: one 1 GiB partition moved to another
broker, unthrottled and with `--throttle` (Kafka's replication throttle), side by side.

One cluster: controller 1 on 127.0.0.1, brokers 2, 3 and 4 on 127.0.0.2-4, file-backed, no
fsync, the brokers' leader/follower.replication.throttled.rate set to `--throttle` (a rate
only slows the replicas a topic names in its throttled-replicas configs, so the unthrottled
run shares the cluster). Per run: a fresh RF=1 topic on broker 2 is filled with `--gib` GiB of
1 KiB records by kcat (librdkafka at C speed, acks=1, big batches), then moved to broker 3
through the admin API (`POST /v1/reassignments`, what `tidelog reassign` and
AlterPartitionReassignments use; the throttled run first sets the topic's
leader/follower.replication.throttled.replicas as `tidelog reassign --throttle` does). The
time runs from the request until the controller's image shows the move complete (replicas
= [3], nothing adding), polled every 50 ms; broker 2's directory is gone soon after.

Kafka's throttle measures its rate over 11 one-second windows, counting at least 10 s, so the
first ~10 x rate bytes go at full speed; expect throttled time ~ (size - 10 x rate) / rate
plus the unthrottled time of the burst.

With `--link-mbps M` (issue 30; needs root, iptables and tc) the link between brokers 2 and 3
is shaped to M MB/s each way (chaos.links: HTB on lo) for both runs, so the move crosses a
slow link, and a probe measures what the throttle is for: while each move runs, a topic whose
leader is broker 2 and follower broker 3 takes one acks=all write every PROBE_INTERVAL_S, whose
latency (its replication crosses the same link) is reported beside the move's time.

    python bench/reassignment.py [--gib 1] [--throttle 20971520] [--link-mbps 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

from chaos.links import install as link_install  # noqa: E402
from chaos.links.install import LinkFaults  # noqa: E402
from chaos.nemeses.links import both_ways  # noqa: E402
from common.units import GIB, MIB, SECONDS  # noqa: E402
from localcluster.launcher import LocalCluster, free_ports  # noqa: E402
from common.waiting import wait_until  # noqa: E402

HOSTS: Final = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
READY_S: Final = 60 * SECONDS
FILL_TIMEOUT_S: Final = 600 * SECONDS  # kcat writing one partition
MOVE_TIMEOUT_S: Final = 900 * SECONDS  # one reassignment, throttled included
POLL_S: Final = 0.05 * SECONDS
HTTP_TIMEOUT_S: Final = 10 * SECONDS
RECORD: Final = b"r" * 1023 + b"\n"  # kcat sends one record per line: 1 KiB each
BLOCK: Final = RECORD * 1024  # 1 MiB written to kcat at a time
PROBE_INTERVAL_S: Final = 0.05 * SECONDS  # the live topic's write rate during a move: 20/s
PROBE_TIMEOUT_S: Final = 60 * SECONDS  # one probe write; a saturated link may hold it for seconds
MB: Final = 1_000_000  # --link-mbps counts decimal megabytes, as link rates are quoted


def http_json(url: str, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
        return json.loads(answer.read())


def fill(bootstrap: str, topic: str, size: int) -> float:
    """Write `size` bytes of records to partition 0 with kcat; the seconds it took."""
    started = time.monotonic()
    kcat = subprocess.Popen(["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-X", "acks=1",
                             "-X", "linger.ms=20", "-X", "batch.size=1000000", "-X", "compression.type=none",
                             "-X", "queue.buffering.max.kbytes=262144"], stdin=subprocess.PIPE)
    try:
        assert kcat.stdin is not None
        for _ in range(size // len(BLOCK)):  # bounded by size
            kcat.stdin.write(BLOCK)
        kcat.stdin.close()
        if kcat.wait(FILL_TIMEOUT_S) != 0:
            raise RuntimeError(f"kcat exited {kcat.returncode}")
    finally:
        if kcat.poll() is None:
            kcat.kill()
            kcat.wait()
    return time.monotonic() - started


def wait_serving(cluster: LocalCluster) -> None:
    """Every broker answering Kafka clients: a broker serves them only once its start-up is done,
    after the controllers call it ready, and kcat gives up at once when every connection closes."""
    from confluent_kafka import KafkaException, Producer

    for broker in cluster.brokers:
        client = Producer({"bootstrap.servers": broker.spec.bootstrap_address, "log_level": 0})

        def answers() -> bool:
            try:
                return bool(client.list_topics(timeout=2).brokers)
            except KafkaException:
                return False

        wait_until(f"{broker.spec.label} serving clients", answers, READY_S)


def partition(admin: str, topic: str) -> dict[str, Any]:
    view = http_json(f"{admin}/v1/topics/{topic}")
    return next(p for p in view["partitions"] if p["partition"] == 0)  # type: ignore[no-any-return]


class LatencyProbe:
    """acks=all writes, one at a time, to a topic led by broker 2 with its follower on broker 3."""

    def __init__(self, cluster: LocalCluster, topic: str) -> None:
        from confluent_kafka import Producer

        admin = cluster.admin_url
        http_json(f"{admin}/v1/topics", "POST", {"name": topic, "assignments": [{"partition": 0, "replicas": [2, 3]}],
                                                 "configs": {"min.insync.replicas": "2"}})
        wait_until(f"{topic} replicated", lambda: partition(admin, topic)["isr"] == [2, 3], 30)
        self.topic = topic
        self.latencies_s: list[float] = []
        self._producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency-probe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():  # until stop(); one write per pass
            began = time.monotonic()
            self._producer.produce(self.topic, b"probe", partition=0)
            if self._producer.flush(PROBE_TIMEOUT_S) == 0:
                self.latencies_s.append(time.monotonic() - began)
            self._stop.wait(PROBE_INTERVAL_S)

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(PROBE_TIMEOUT_S)

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies_s) or [float("nan")]
        return {"probe_p50_ms": 1000 * ordered[len(ordered) // 2],
                "probe_p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                "probe_max_ms": 1000 * ordered[-1]}


def move(cluster: LocalCluster, topic: str, size: int, throttled: bool, probe: bool = False) -> dict[str, float]:
    admin = cluster.admin_url
    http_json(f"{admin}/v1/topics", "POST", {"name": topic, "assignments": [{"partition": 0, "replicas": [2]}]})
    wait_until(f"{topic} led by broker 2", lambda: partition(admin, topic)["leader"] == 2, 30)
    fill_s = fill(cluster.bootstrap_servers or "", topic, size)
    if throttled:
        http_json(f"{admin}/v1/topics/{topic}/configs", "PATCH", {"configs": {
            "leader.replication.throttled.replicas": "0:2", "follower.replication.throttled.replicas": "0:3"}})
    live = LatencyProbe(cluster, f"{topic}-live") if probe else None

    def done() -> bool:
        p = partition(admin, topic)
        ongoing = http_json(f"{admin}/v1/reassignments?topic={topic}")["partitions"]
        return p["replicas"] == [3] and p["isr"] == [3] and not ongoing

    with live if live is not None else contextlib.nullcontext():
        started = time.monotonic()
        answer = http_json(f"{admin}/v1/reassignments", "POST",
                           {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3]}]})
        assert answer["results"][0]["error"] == "NONE", answer
        wait_until(f"{topic} moved to broker 3", done, MOVE_TIMEOUT_S, poll_s=POLL_S)
        move_s = time.monotonic() - started
    http_json(f"{admin}/v1/topics/{topic}", "DELETE")  # frees the disk for the next run
    return {"fill_s": fill_s, "move_s": move_s, **(live.summary() if live is not None else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="partition size in GiB (default 1)")
    parser.add_argument("--throttle", type=int, default=20 * MIB,
                        help="bytes/s (default 20 MiB/s: below what an unthrottled move reaches here)")
    parser.add_argument("--link-mbps", type=float, default=0.0,
                        help="shape the link between brokers 2 and 3 to this many MB/s each way (needs root)")
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        print("kcat is needed (apt-get install kcat)", file=sys.stderr)
        return 2
    if args.link_mbps and link_install.missing() is not None:
        print(f"--link-mbps: {link_install.missing()}", file=sys.stderr)
        return 2
    size = int(args.gib * GIB) // len(BLOCK) * len(BLOCK)
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-reassign-"))
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    rate = str(args.throttle)
    try:
        with LocalCluster.start(root, controllers=1, brokers=3, raft_port=raft_port, admin_port=admin_port,
                                kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                                broker_config={"leader.replication.throttled.rate": rate,
                                               "follower.replication.throttled.rate": rate}) as cluster, \
                LinkFaults.open() if args.link_mbps else contextlib.nullcontext() as links:
            if links is not None:
                specs = {n.spec.node_id: n.spec for n in cluster.brokers}
                links.bandwidth(both_ways(specs[2], specs[3]), int(args.link_mbps * MB * 8 / 1000))
            probe = bool(args.link_mbps)
            wait_serving(cluster)
            results = {"unthrottled": move(cluster, "bench-free", size, throttled=False, probe=probe),
                       "throttled": move(cluster, "bench-throttled", size, throttled=True, probe=probe)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mib = size / MIB
    link = f", the 2<->3 link shaped to {args.link_mbps:g} MB/s" if args.link_mbps else ""
    print(f"Reassignment of one {mib:.0f} MiB partition, broker 2 -> broker 3 (throttle {args.throttle / MIB:g} "
          f"MiB/s on the throttled run{link})")
    probe_head = f" {'live p50 ms':>12} {'live p99 ms':>12} {'live max ms':>12}" if args.link_mbps else ""
    print(f"{'run':<12} {'fill s':>8} {'move s':>8} {'MiB/s':>8}{probe_head}")
    for name, r in results.items():
        probe_cols = (f" {r['probe_p50_ms']:>12.1f} {r['probe_p99_ms']:>12.1f} {r['probe_max_ms']:>12.1f}"
                      if args.link_mbps else "")
        print(f"{name:<12} {r['fill_s']:>8.1f} {r['move_s']:>8.1f} {mib / r['move_s']:>8.1f}{probe_cols}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
