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

    python bench/reassignment.py [--gib 1] [--throttle 20971520]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

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


def partition(admin: str, topic: str) -> dict[str, Any]:
    view = http_json(f"{admin}/v1/topics/{topic}")
    return next(p for p in view["partitions"] if p["partition"] == 0)  # type: ignore[no-any-return]


def move(cluster: LocalCluster, topic: str, size: int, throttled: bool) -> dict[str, float]:
    admin = cluster.admin_url
    http_json(f"{admin}/v1/topics", "POST", {"name": topic, "assignments": [{"partition": 0, "replicas": [2]}]})
    wait_until(f"{topic} led by broker 2", lambda: partition(admin, topic)["leader"] == 2, 30)
    fill_s = fill(cluster.bootstrap_servers or "", topic, size)
    if throttled:
        http_json(f"{admin}/v1/topics/{topic}/configs", "PATCH", {"configs": {
            "leader.replication.throttled.replicas": "0:2", "follower.replication.throttled.replicas": "0:3"}})
    started = time.monotonic()
    answer = http_json(f"{admin}/v1/reassignments", "POST",
                       {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3]}]})
    assert answer["results"][0]["error"] == "NONE", answer

    def done() -> bool:
        p = partition(admin, topic)
        ongoing = http_json(f"{admin}/v1/reassignments?topic={topic}")["partitions"]
        return p["replicas"] == [3] and p["isr"] == [3] and not ongoing

    wait_until(f"{topic} moved to broker 3", done, MOVE_TIMEOUT_S, poll_s=POLL_S)
    move_s = time.monotonic() - started
    http_json(f"{admin}/v1/topics/{topic}", "DELETE")  # frees the disk for the next run
    return {"fill_s": fill_s, "move_s": move_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="partition size in GiB (default 1)")
    parser.add_argument("--throttle", type=int, default=20 * MIB,
                        help="bytes/s (default 20 MiB/s: below what an unthrottled move reaches here)")
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        print("kcat is needed (apt-get install kcat)", file=sys.stderr)
        return 2
    size = int(args.gib * GIB) // len(BLOCK) * len(BLOCK)
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-reassign-"))
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    rate = str(args.throttle)
    try:
        with LocalCluster.start(root, controllers=1, brokers=3, raft_port=raft_port, admin_port=admin_port,
                                kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                                broker_config={"leader.replication.throttled.rate": rate,
                                               "follower.replication.throttled.rate": rate}) as cluster:
            results = {"unthrottled": move(cluster, "bench-free", size, throttled=False),
                       "throttled": move(cluster, "bench-throttled", size, throttled=True)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mib = size / MIB
    print(f"Reassignment of one {mib:.0f} MiB partition, broker 2 -> broker 3 (throttle {args.throttle / MIB:.0f} "
          "MiB/s on the throttled run)")
    print(f"{'run':<12} {'fill s':>8} {'move s':>8} {'MiB/s':>8}")
    for name, r in results.items():
        print(f"{name:<12} {r['fill_s']:>8.1f} {r['move_s']:>8.1f} {mib / r['move_s']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
