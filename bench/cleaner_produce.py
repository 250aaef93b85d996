"""Produce throughput of a real broker while its log cleaner runs, against idle.

One broker (and its controller) is started; kcat (librdkafka: a C-speed producer, so the
broker is what limits) sends the same file of keyed 100 B records, 10 % distinct keys:

- idle: to a compacted topic with `min.cleanable.dirty.ratio` 1.0, which no log exceeds:
  the same produce path (keys checked), the cleaner idle;
- cleaning: to a compacted topic with the same small segments and
  `min.cleanable.dirty.ratio` 0.01, so the cleaner (in its cleaner process, as the broker
  runs it) cleans again and again while kcat produces. The broker's cleaner metrics are
  read before and after, to show how much it cleaned in the window.

The ratio is cleaning / idle MB/s of produced record bytes (goal >= 80 %). Each phase runs
`rounds` times on fresh topics, idle and cleaning rounds alternating (so the machine's other
load hits both alike); the report gives the medians, the median of the per-round ratios and
their range.

    python bench/cleaner_produce.py [--records N] [--rounds 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from common.prometheus import samples
from common.units import MIB
from localcluster.launcher import LocalCluster, free_ports

HOSTS = ("127.0.0.1", "127.0.0.2")  # controller, broker
READY_S = 60.0
KCAT_TIMEOUT_S = 300.0
HTTP_TIMEOUT_S = 10.0
SEGMENT_BYTES = 4 * MIB
BROKER_CONFIG = {"log.cleaner.backoff.ms": "100"}
PHASES = (
    # min.cleanable.dirty.ratio 1.0: no log is ever dirtier, so never cleaned
    ("idle", {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
              "min.cleanable.dirty.ratio": "1.0"}),
    ("cleaning", {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
                  "min.cleanable.dirty.ratio": "0.01"}),
)


@dataclass(frozen=True, slots=True)
class ProduceRun:
    seconds: float
    payload_bytes: int
    cleaned_bytes: float
    cleaner_runs: float

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / MIB / self.seconds


def write_records(path: Path, records: int, record_size: int = 100, seed: int = 1) -> int:
    """A kcat input file of `key:value` lines (10 % distinct keys); its payload bytes."""
    rng = random.Random(seed)
    keys = max(1, records // 10)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    value_size = record_size - 13
    lines = []
    payload = 0
    for _ in range(records):
        key = f"key-{rng.randrange(keys):08d}"
        value = "".join(rng.choices(alphabet, k=value_size))
        lines.append(f"{key}:{value}\n")
        payload += len(key) + len(value)
    path.write_text("".join(lines))
    return payload


def create_topic(cluster: LocalCluster, name: str, configs: dict[str, str]) -> None:
    body = json.dumps({"name": name, "partitions": 1, "replication_factor": 1,
                       "configs": configs}).encode()
    request = urllib.request.Request(f"{cluster.admin_url}/v1/topics", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
        assert answer.status == 201, answer.read()


def delete_topic(cluster: LocalCluster, name: str) -> None:
    request = urllib.request.Request(f"{cluster.admin_url}/v1/topics/{name}", method="DELETE")
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
        assert answer.status in (200, 202, 204), answer.read()


def cleaner_metrics(cluster: LocalCluster) -> dict[str, float]:
    with urllib.request.urlopen(cluster.brokers[0].spec.metrics_url,
                                timeout=HTTP_TIMEOUT_S) as answer:
        text = answer.read().decode()
    return {name.split("log_cleaner_", 1)[1]: value for name, value in samples(text).items()
            if "log_cleaner_" in name and "{" not in name}


def kcat_produce(kcat: str, bootstrap: str, topic: str, path: Path) -> float:
    """Seconds for kcat to deliver every line of `path` (acks=1, LZ4 off, 16 KiB batches)."""
    start = time.perf_counter()
    done = subprocess.run(
        [kcat, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-K", ":", "-l",
         "-X", "acks=1", "-X", "linger.ms=5", "-X", "batch.size=16384",
         "-X", "queue.buffering.max.kbytes=65536", str(path)],
        capture_output=True, timeout=KCAT_TIMEOUT_S, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0 or b"ERROR" in done.stderr:
        raise RuntimeError(f"kcat failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return seconds


def wait_for_topic(kcat: str, bootstrap: str, topic: str) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:  # bounded by the deadline
        listing = subprocess.run([kcat, "-L", "-b", bootstrap, "-t", topic, "-m", "5"],
                                 capture_output=True, timeout=30, check=False).stdout.decode()
        if "leader: -1" not in listing and "partition 0, leader" in listing:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic} has no leader after {READY_S}s")


def produce_while_cleaning(root: Path, *, records: int,
                           rounds: int) -> dict[str, list[ProduceRun]]:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        raise RuntimeError("kcat is not installed (apt-get install kcat)")
    root.mkdir(parents=True, exist_ok=True)
    data = root / "records.txt"
    payload = write_records(data, records)
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    runs: dict[str, list[ProduceRun]] = {phase: [] for phase, _ in PHASES}
    with LocalCluster.start(root / "cluster", controllers=1, brokers=1, raft_port=raft,
                            admin_port=admin, kafka_port=kafka, metrics_port=metrics,
                            ready_timeout=READY_S, broker_config=BROKER_CONFIG) as cluster:
        bootstrap = cluster.bootstrap_servers
        assert bootstrap is not None
        # idle and cleaning rounds alternate, so that the machine's other load hits both
        # alike; a cleaning round's topic is deleted after it, so the cleaner is idle again
        for r in range(rounds):
            for phase, configs in PHASES:
                topic = f"{phase}-{r}"
                create_topic(cluster, topic, configs)
                wait_for_topic(kcat, bootstrap, topic)
                before = cleaner_metrics(cluster)
                seconds = kcat_produce(kcat, bootstrap, topic, data)
                after = cleaner_metrics(cluster)
                delete_topic(cluster, topic)
                runs[phase].append(ProduceRun(
                    seconds, payload,
                    after["bytes_cleaned_total"] - before["bytes_cleaned_total"],
                    after["runs_total"] - before["runs_total"]))
                print(f"  round {r} {phase}: {runs[phase][-1].mb_per_s:.1f} MB/s", flush=True)
    return runs


def report(runs: dict[str, list[ProduceRun]]) -> str:
    idle = [run.mb_per_s for run in runs["idle"]]
    busy = [run.mb_per_s for run in runs["cleaning"]]
    # idle and cleaning rounds alternate: each round's ratio saw about the same other load
    ratios = sorted(b / i for i, b in zip(idle, busy))
    ratio = statistics.median(ratios)
    cleanings = statistics.median(run.cleaner_runs for run in runs["cleaning"])
    cleaned = statistics.median(run.cleaned_bytes for run in runs["cleaning"]) / MIB
    seconds = statistics.median(run.seconds for run in runs["cleaning"])
    return (f"produce (kcat, 100 B records) MB/s, medians of {len(ratios)}: idle "
            f"{statistics.median(idle):.1f} ({min(idle):.1f}-{max(idle):.1f}); while cleaning "
            f"{statistics.median(busy):.1f} ({min(busy):.1f}-{max(busy):.1f}; {cleanings:.0f} "
            f"cleanings, {cleaned:.0f} MiB cleaned in {seconds:.1f} s) -> {ratio:.0%} of idle "
            f"(rounds {ratios[0]:.0%}-{ratios[-1]:.0%}; goal >= 80 %: "
            f"{'met' if ratio >= 0.8 else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-produce-", dir=args.dir))
    try:
        print(report(produce_while_cleaning(root, records=args.records, rounds=args.rounds)),
              flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
