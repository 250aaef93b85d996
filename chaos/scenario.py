"""A randomized fault run against a local cluster, checked at the end: `python -m chaos`.

    python -m chaos --faults 12 --seed 7        # or: make chaos

Starts 3 controllers and 3 brokers on loopback (127.0.0.1-6), an RF=3 topic with
min.insync.replicas=2, an idempotent acks=all producer and a high-watermark sampler. Then,
one fault at a time: SIGKILL a partition leader, SIGKILL a follower, SIGSTOP a broker for
less than its session, SIGKILL the active controller, SIGSTOP the active controller until
the others have elected a new one — each node brought back and the cluster healed (every
replica in the ISR) before the next. At the end every promise is
checked on the recorded history: acknowledged writes read back exactly once at their
offsets, dense offsets, a high watermark that never went backwards, byte-identical
replicas. Exit status 0 when all hold, 1 otherwise; every process is stopped either way.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chaos.checker import (
    check_acked_read_once,
    check_identical,
    check_monotonic,
    check_offsets_dense,
)
from chaos.nemesis import Nemesis
from chaos.workload import (
    HighWatermarkSampler,
    ProducerWorkload,
    describe_partitions,
    read_all,
)
from localcluster.launcher import LocalCluster, free_ports
from localcluster.replica_files import replica_log_bytes, wait_replicas_caught_up
from common.limits import CHAOS_POLL_S
from common.waiting import wait_until

HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 7))
TOPIC = "chaos"
PARTITIONS = 3
HEAL_S = 60.0
SESSION_MS = 3000
PROPERTIES = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": str(SESSION_MS),
              "replica.lag.time.max.ms": "5000", "replica.fetch.backoff.ms": "200",
              "replica.socket.timeout.ms": "5000"}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _wait(what: str, condition: Callable[[], bool], timeout_s: float = HEAL_S) -> None:
    wait_until(what, condition, timeout_s, poll_s=CHAOS_POLL_S)


class Run:
    """One cluster, its nemesis and workload, and the faults applied so far."""

    def __init__(self, cluster: LocalCluster, nemesis: Nemesis, rng: random.Random) -> None:
        self.cluster, self.nemesis, self.rng = cluster, nemesis, rng
        self.log: list[str] = []

    def admin(self, path: str) -> Any:
        for node in self.cluster.controllers:  # any live controller answers reads
            if node.running():
                try:
                    return _get(node.spec.admin_url + path)
                except OSError:
                    continue
        raise OSError("no controller answered")

    def partitions(self) -> list[dict[str, Any]]:
        return self.admin(f"/v1/topics/{TOPIC}")["partitions"]

    def healed(self) -> bool:
        brokers = {b["broker_id"]: b for b in self.admin("/v1/brokers")}
        return all(not b["fenced"] for b in brokers.values()) and all(
            p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in self.partitions())

    def note(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        self.log.append(line)
        print(line, flush=True)

    # ---- faults ------------------------------------------------------------------------

    def kill_leader(self) -> None:
        p = self.rng.choice(self.partitions())
        self._kill_and_restart(p["leader"], f"leader of {TOPIC}-{p['partition']}")

    def kill_follower(self) -> None:
        p = self.rng.choice(self.partitions())
        follower = self.rng.choice([r for r in p["replicas"] if r != p["leader"]])
        self._kill_and_restart(follower, f"follower of {TOPIC}-{p['partition']}")

    def pause_broker(self) -> None:
        broker = self.rng.choice([n.spec.node_id for n in self.cluster.brokers])
        seconds = self.rng.uniform(0.5, SESSION_MS / 1000 * 0.6)
        self.note(f"pause broker {broker} for {seconds:.1f} s")
        with self.nemesis.paused(broker):
            time.sleep(seconds)

    def kill_active_controller(self) -> None:
        active = self.admin("/v1/cluster")["active_controller"]
        if active is None or active < 0:
            self.note("no active controller to kill")
            return
        self._kill_and_restart(active, "active controller")

    def pause_active_controller(self) -> None:
        """Long enough for the others to elect a new leader: the paused one wakes up deposed."""
        active = self.admin("/v1/cluster")["active_controller"]
        if active is None or active < 0:
            self.note("no active controller to pause")
            return
        seconds = self.rng.uniform(2.0, 4.0)
        self.note(f"pause active controller {active} for {seconds:.1f} s")
        with self.nemesis.paused(active):
            time.sleep(seconds)

    def _kill_and_restart(self, node_id: int, what: str) -> None:
        broker = node_id in {n.spec.node_id for n in self.cluster.brokers}
        epoch = self.admin(f"/v1/brokers/{node_id}")["broker_epoch"] if broker else None
        self.note(f"kill {what} (node {node_id})")
        self.nemesis.kill(node_id)
        time.sleep(self.rng.uniform(0.5, SESSION_MS / 1000 * 1.5))
        node = self.nemesis.restart(node_id)
        self.note(f"restart node {node_id}")
        if broker:  # back means registered again: a new broker epoch (then `healed` waits for the ISR)
            _wait(f"broker {node_id} registered again",
                  lambda: self.admin(f"/v1/brokers/{node_id}")["broker_epoch"] != epoch)
        else:
            _wait(f"controller {node_id} serving again",
                  lambda: _get(node.spec.admin_url + "/v1/cluster")["active_controller"] not in (None, -1))

    def unavailable(self, during: str, exc: Exception, bootstrap: str) -> list[str]:
        """An availability failure with its evidence: the error, and what the controllers and every
        broker answer now (each line also printed)."""
        problems = [f"availability: {during} failed: {type(exc).__name__}: {exc}"]
        try:
            brokers = self.admin("/v1/brokers")
            problems.append("admin API brokers: " + ", ".join(
                f"{b['broker_id']} {'fenced' if b['fenced'] else 'unfenced'}" for b in brokers))
            problems.append("admin API partitions: " + "; ".join(
                f"{TOPIC}-{p['partition']} leader {p['leader']} isr {p['isr']}" for p in self.partitions()))
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"admin API: {error}")
        try:
            problems += describe_partitions(bootstrap, TOPIC, PARTITIONS)
        except Exception as error:  # noqa: BLE001 - evidence is best effort
            problems.append(f"Metadata/ListOffsets evidence failed: {type(error).__name__}: {error}")
        for line in problems:
            self.note(line)
        return problems

    FAULTS: Sequence[str] = ("kill_leader", "kill_follower", "pause_broker", "kill_active_controller",
                             "pause_active_controller")


def run(faults: int, seed: int, root: Path) -> list[str]:
    """Apply `faults` random faults; the problems found (empty: every promise kept).

    A harness step that fails after the cluster started (the cluster never heals, a fresh
    consumer cannot read a partition) is an availability failure: it is reported with the
    evidence (what each broker answers), and the run still checks what it can and stops the
    cluster."""
    rng = random.Random(seed)
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    checks: dict[str, list[str]] = {}
    with LocalCluster.start(root, controllers=3, brokers=3, raft_port=raft, admin_port=admin, kafka_port=kafka,
                            metrics_port=metrics, ready_timeout=60, extra_properties=PROPERTIES) as cluster, \
            Nemesis(cluster) as nemesis:
        chaos = Run(cluster, nemesis, rng)
        body = json.dumps({"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 3,
                           "configs": {"min.insync.replicas": "2"}}).encode()
        request = urllib.request.Request(cluster.admin_url + "/v1/topics", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).close()
        _wait("the topic fully replicated", chaos.healed)
        bootstrap = cluster.bootstrap_servers or ""
        availability: list[str] = []
        with ProducerWorkload(bootstrap, TOPIC, partitions=PARTITIONS) as writer, \
                HighWatermarkSampler(bootstrap, TOPIC, partitions=PARTITIONS) as sampler:
            for n in range(faults):
                fault = rng.choice(Run.FAULTS)
                try:
                    getattr(chaos, fault)()
                    _wait("every broker unfenced and every replica in the ISR", chaos.healed)
                except Exception as exc:  # noqa: BLE001 - a verdict, not a traceback
                    availability += chaos.unavailable(f"fault {n + 1}/{faults} ({fault})", exc, bootstrap)
                    break
                chaos.note(f"healed after fault {n + 1}/{faults}; {len(writer.acked)} writes acknowledged")
            left = writer.stop()
        acked = [(a.partition, a.offset, a.value) for a in writer.acked]
        try:
            read: list[tuple[int, int, bytes]] | None = read_all(bootstrap, TOPIC, PARTITIONS)
        except Exception as exc:  # noqa: BLE001 - e.g. KafkaException _UNKNOWN_PARTITION
            availability += chaos.unavailable("a fresh consumer reading every partition", exc, bootstrap)
            read = None
        if read is not None:
            checks["acknowledged writes read back once"] = check_acked_read_once(acked, read)
            checks["dense offsets"] = check_offsets_dense(read)
        checks["monotonic high watermark"] = check_monotonic(sampler.samples)
        delivery = [f"{left} records never acknowledged after the final flush"] if left else []
        if writer.errors:
            delivery.append(f"{len(writer.errors)} failed deliveries, e.g. {writer.errors[:3]}")
        checks["every write acknowledged"] = delivery
        try:
            _wait("every replica in the ISR", chaos.healed)
            wait_replicas_caught_up(cluster.brokers, TOPIC, range(PARTITIONS))
        except Exception as exc:  # noqa: BLE001 - as above
            availability += chaos.unavailable("healing before the replica comparison", exc, bootstrap)
        checks["availability"] = availability
        cluster.stop()
        identical: list[str] = []
        for p in range(PARTITIONS):
            logs = {}
            for node in cluster.brokers:
                logs[node.spec.node_id] = replica_log_bytes(node, TOPIC, p)
            identical += check_identical(logs, f"{TOPIC}-{p}")
        checks["identical replicas"] = identical
        problems = [problem for found in checks.values() for problem in found]
        for name, found in checks.items():
            chaos.note(f"check {name}: {'ok' if not found else f'{len(found)} problem(s)'}")
        chaos.note(f"{faults} faults, {len(acked)} acknowledged writes, {len(sampler.samples)} HW samples: "
                   f"{'all promises kept' if not problems else f'{len(problems)} problems'}")
        return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=10, help="faults to apply, one at a time (default 10)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the cluster's files here")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"chaos: {args.faults} faults, seed {seed}", flush=True)
    if args.data_dir is not None:
        problems = run(args.faults, seed, args.data_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="tidelog-chaos-") as tmp:
            problems = run(args.faults, seed, Path(tmp))
    for problem in problems[:40]:
        print(f"PROBLEM {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
