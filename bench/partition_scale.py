"""100,000 partitions RF=3 on 3 brokers: create, idle, fds, metadata, shutdown, crash, fencing — one table.

    python bench/partition_scale.py [--partitions 100000] [--topics 100] [--idle-s 30] [--keep DIR]
                                    [--json F] [--shapes big,many] [--fencing-partitions N]
                                    [--fencing-only] [--no-fencing]
                                    [--phases idle,metadata,new-broker,shutdown,sigkill] [--logs DIR]
                                    [--py-spy DIR]

    # only the create (and every node's log after it, in DIR):
    python bench/partition_scale.py --partitions 100000 --shapes many --no-fencing --phases "" --logs DIR

    # only the shutdown and crash of broker 4 after the create (issue 35's restart storm):
    python bench/partition_scale.py --partitions 100000 --shapes many --no-fencing --phases shutdown,sigkill

A real cluster on loopback (3 controllers, brokers 4..6, Kafka's default heartbeat settings).
Phases, in order, each printed as it ends and all together in one table at the end, beside
issue 35's goal where it sets one:

1. shape "big": `--partitions` partitions RF=3 in topics of at most 10,000 (Kafka's
   MAX_RECORDS_PER_USER_OP: one topic at 10,000, ten at 100,000), created through the admin API;
   "created" is the moment every broker's `partitions_led` gauge adds up to the partition count
   (every partition has a leader that serves it on its broker);
2. shape "many", on a second, fresh cluster: the same count as `--topics` topics, created
   concurrently; the phases below run on that cluster;
3. idle broker CPU over `--idle-s` seconds (utime+stime from /proc, % of one core), RSS, open
   file descriptors (/proc/PID/fd) beside the segment-file cache's bound (log.open.files.max);
4. the metadata image: the size of broker 4's checkpoint (`__metadata_snapshot`, the image as a
   snapshot encodes it) and the time to decode it (in this process);
5. a new broker (7, empty data dir) joins: its metadata catch-up (snapshot + tail), from its log's
   "follows the metadata log" to "caught up" lines; then it stops;
6. SIGTERM of broker 4 (leader of about a third of the partitions) → process exit, split by
   broker 4's own log: → PENDING_CONTROLLED_SHUTDOWN, → "Stopping broker" (the controller moved
   its leaderships and every active broker replayed them), → "Broker 4 stopped" (logs closed),
   → the exit seen here; each node's CPU meanwhile; `--logs DIR` keeps every node's log. Then its
   restart → broker 4 back in every ISR (admin API describe of every topic);
7. SIGKILL of broker 4 and restart → back in every ISR (recovery of every log after an unclean
   stop: only what the recovery point does not cover is scanned);
8. the longest controller stall of each cluster's run (its controllers' "was stalled for" lines),
   and of the brokers' on the second cluster ("its event loop was stalled for");
9. fencing (issue 36), on a third cluster of controllers only: `--fencing-partitions` (default:
   `--partitions`) partitions RF=3 all led by broker 4, whose heartbeats stop while brokers 5 and 6
   go on; the brokers are the RPC doubles of `tidelog.testing.fencing_scale` (real brokers would
   spend minutes creating the logs). Figures: session expiry → fenced, → out of every ISR, the
   longest "Controller N was stalled for X ms" any controller logged meanwhile (the stall probe
   logs 250 ms and more: "< 250" means none), the slowest heartbeat of a live broker, and
   whether a live broker was fenced. `--fencing-only` runs just this phase, `--no-fencing` skips it.

The controllers' CPU is reported too: each controller's during every create (s of CPU) and
while idle (% of one core), beside the brokers'.

Every figure is printed as its phase ends, beside its goal and the machine's load average (the
box is shared). Every wait is bounded: a create whose partitions are not all led within
CREATE_WAIT_S prints how many were, every PROGRESS_EVERY_S it prints how far it got, and a
create the controllers answered 504/503/429 (busy; nothing or not yet committed) is sent again
(409 TOPIC_ALREADY_EXISTS then means an earlier try committed). SIGTERM stops the clusters as
Ctrl-C does. Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bench_common import broker_gauge, http, process_cpu_s, rss_mib, wait_until
from common.waiting import WaitTimeout
from common.limits import MAX_RECORDS_PER_USER_OP
from localcluster.cluster_layout import BROKER_DATA_DIR, load_or_create_secrets
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess
from localcluster.rpc_keys import write_node_key
from localcluster.server_properties import node_properties
from metadata.snapshot import decode_snapshot
from tidelog.testing.fencing_scale import STALL, FencingScale

HOSTS: Final = tuple(f"127.0.0.{n}" for n in range(1, 8))  # 7: the broker that joins late
UNDER_TEST: Final = 4
NEW_BROKER: Final = 7
READY_S: Final = 120.0
WAIT_S: Final = 300.0
RESTART_WAIT_S: Final = 600.0  # SIGKILL at 100,000 partitions: the goal is 120 s, allow five times
CREATE_WAIT_S: Final = 600.0  # every partition led: ten times the 60 s goal, then report what was reached
PROGRESS_EVERY_S: Final = 30.0  # a long wait prints how far it got this often
POST_RETRY_S: Final = 300.0  # sending again a create the controllers answered busy (504/503/429)
POST_RETRY_PAUSE_S: Final = 1.0
# How often a create counts led partitions: each count renders every broker's /metrics, whose
# replication gauges walk all its partitions (~5 % of a broker's loop in a 100,000 create at
# 10 a second; a Prometheus scrapes every 15-60 s). The figure is this much coarser.
LED_POLL_S: Final = 0.5
GAUGE_TIMEOUT_S: Final = 10.0  # one broker's /metrics while counting led partitions (a busy loop answers late)
BUSY_STATUSES: Final = (429, 503, 504)  # THROTTLING_QUOTA_EXCEEDED, NOT_CONTROLLER, REQUEST_TIMED_OUT
ALREADY_EXISTS: Final = 409
SNAPSHOT_FILE: Final = "__metadata_snapshot"  # broker.metadata_checkpoint's file in the first log dir
LOG_TIME: Final = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
BROKER_STALL: Final = re.compile(r"Broker (\d+): its event loop was stalled for (\d+) ms")  # broker.loop_stalls
BECAME_ACTIVE: Final = "Became active controller with epoch"  # quorum.active_controller


def load() -> str:
    """The 1-minute load average, printed beside each figure (the machine is shared)."""
    return f"load {os.getloadavg()[0]:.1f}"


def led_total(cluster: LocalCluster) -> int:
    return int(sum(broker_gauge(b, "partitions_led", timeout=GAUGE_TIMEOUT_S) for b in cluster.brokers
                   if b.running()))


def figure(name: str, value: str) -> tuple[str, str]:
    """One figure, printed as its phase ends beside its goal and the load; the table's row."""
    goal = goal_of(name)
    print(f"  {name}: {value}{f'  (goal {goal})' if goal else ''} ({load()})", flush=True)
    return name, value


def post_topic(admin_url: str, name: str, partitions: int) -> None:
    """POST one create; a busy answer (nothing, or not yet, committed) is sent again until
    POST_RETRY_S; 409 after a busy answer means an earlier try committed."""
    deadline = time.monotonic() + POST_RETRY_S
    tries = 0
    while True:  # bounded by the deadline
        tries += 1
        try:
            http(f"{admin_url}/v1/topics", "POST", {"name": name, "partitions": partitions, "replication_factor": 3})
            return
        except urllib.error.HTTPError as exc:
            if exc.code == ALREADY_EXISTS and tries > 1:
                return
            if exc.code not in BUSY_STATUSES or time.monotonic() >= deadline:
                raise
            why = f"{exc.code} {exc.read()[:200].decode(errors='replace')}"
        except (TimeoutError, urllib.error.URLError) as exc:  # no answer within HTTP_TIMEOUT_S
            if time.monotonic() >= deadline:
                raise
            why = f"no answer ({exc})"
        print(f"  {name}: try {tries} answered {why}; sending it again ({load()})", flush=True)
        time.sleep(POST_RETRY_PAUSE_S)


def wait_led(cluster: LocalCluster, target: int, started: float) -> float | None:
    """Seconds from `started` until `target` partitions are led; None (after printing how many
    were) when CREATE_WAIT_S passes first. Prints progress every PROGRESS_EVERY_S."""
    reached, report_at = 0, time.monotonic() + PROGRESS_EVERY_S
    while time.monotonic() - started < CREATE_WAIT_S:  # bounded by CREATE_WAIT_S
        try:
            reached = led_total(cluster)
        except (OSError, ValueError, KeyError):  # a busy broker's /metrics: count again
            pass
        if reached >= target:
            return time.monotonic() - started
        if time.monotonic() >= report_at:
            report_at += PROGRESS_EVERY_S
            print(f"  ... {reached} of {target} partitions led after {time.monotonic() - started:.0f} s "
                  f"({load()})", flush=True)
        time.sleep(LED_POLL_S)
    print(f"  MISSED: {reached} of {target} partitions led after {CREATE_WAIT_S:.0f} s ({load()})", flush=True)
    return None


def create(cluster: LocalCluster, topics: dict[str, int]) -> tuple[float | None, list[tuple[str, str]]]:
    """Create `topics` (name -> partitions, RF=3) concurrently: seconds until all are led (None:
    not within CREATE_WAIT_S), and the controllers' CPU meanwhile as rows."""
    before = led_total(cluster)
    target = before + sum(topics.values())
    controllers = {c.spec.node_id: c.pid for c in cluster.controllers if c.pid is not None}
    cpu_before = {n: process_cpu_s(p) for n, p in controllers.items()}
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda item: post_topic(cluster.admin_url, *item), topics.items()))
    answered = time.monotonic() - started
    elapsed = wait_led(cluster, target, started)
    print(f"  created {len(topics)} topic(s), {sum(topics.values())} partitions: admin API answered in "
          f"{answered:.2f} s, " + ("not all led" if elapsed is None else f"all led in {elapsed:.2f} s")
          + f" ({load()})", flush=True)
    rows = [figure(f"CPU of controller {n} during the create (s)", f"{process_cpu_s(p) - cpu_before[n]:.1f}")
            for n, p in sorted(controllers.items())]
    return elapsed, rows


def created(elapsed: float | None) -> str:
    return "MISSED" if elapsed is None else f"{elapsed:.2f}"


def in_every_isr(cluster: LocalCluster, names: list[str], broker: int) -> bool:
    """Whether `broker` is in the ISR of every partition of `names` it replicates. Only topics
    with under-replicated partitions are described (a partition without `broker` in its ISR is
    one): describing all 100 topics of 1,000 partitions twice a second loaded the controllers
    the phase measures."""
    wanted = set(names)
    lagging = [t["name"] for t in http(f"{cluster.admin_url}/v1/topics")
               if t["name"] in wanted and t["under_replicated_partitions"]]
    for name in lagging:
        view = http(f"{cluster.admin_url}/v1/topics/{name}")
        if any(broker in p["replicas"] and broker not in p["isr"] for p in view["partitions"]):
            return False
    return True


def idle_cpu(nodes: list[NodeProcess], seconds: float) -> dict[int, float]:
    """% of one core each node used over `seconds` (utime+stime from /proc)."""
    pids = {b.spec.node_id: b.pid for b in nodes if b.pid is not None}
    before = {n: process_cpu_s(p) for n, p in pids.items()}
    started = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - started
    return {n: 100 * (process_cpu_s(p) - before[n]) / wall for n, p in pids.items()}


def open_fds(pid: int) -> int:
    """Descriptors `pid` holds now (sockets, pipes and files alike)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def start_cluster(root: Path) -> LocalCluster:
    root.mkdir(parents=True, exist_ok=True)
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    cluster = LocalCluster.start(root, controllers=3, raft_port=raft, admin_port=admin, brokers=3,
                                 kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S)
    try:
        wait_until("3 brokers unfenced", lambda: sum(
            1 for b in http(f"{cluster.admin_url}/v1/brokers") if b["state"] == "UNFENCED") == 3)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def longest_stall(cluster: LocalCluster) -> str:
    """The longest "Controller N was stalled for X ms" in the controllers' logs ("< 250": none)."""
    stalls = [int(m.group(2)) for node in cluster.controllers
              for m in STALL.finditer(node.spec.log_path.read_text(errors="replace"))]
    return f"{max(stalls)}" if stalls else "< 250"


def controller_changes(cluster: LocalCluster) -> str:
    """How often a controller became active after the first one did (a failover each)."""
    became = sum(node.spec.log_path.read_text(errors="replace").count(BECAME_ACTIVE) for node in cluster.controllers)
    return f"{max(became - 1, 0)}"


def longest_broker_stall(cluster: LocalCluster) -> str:
    """The longest "its event loop was stalled for X ms" in the brokers' logs ("< 250": none);
    a restarted broker's log keeps its earlier incarnation's lines (the launcher appends)."""
    stalls = [int(m.group(2)) for node in cluster.brokers
              for m in BROKER_STALL.finditer(node.spec.log_path.read_text(errors="replace"))]
    return f"{max(stalls)}" if stalls else "< 250"


def logged_at(line: str) -> float:
    """The time a node's log line was written (common.log_setup's asctime), as a timestamp."""
    match = LOG_TIME.match(line)
    if match is None:
        raise ValueError(f"no time at the start of {line[:80]!r}")
    return datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def catch_up_s(log_path: Path, broker: int) -> float | None:
    """Seconds from the broker's last "follows the metadata log" line to the "caught up" line
    after it (its metadata catch-up: snapshot or records, applied); None before it caught up."""
    lines = log_path.read_text(errors="replace").splitlines()
    follows = [i for i, line in enumerate(lines) if f"Broker {broker} follows the metadata log" in line]
    if not follows:
        return None
    caught = next((line for line in lines[follows[-1]:]
                   if f"Broker {broker} caught up with the metadata log" in line), None)
    return None if caught is None else logged_at(caught) - logged_at(lines[follows[-1]])


def metadata_figures(cluster: LocalCluster) -> list[tuple[str, str]]:
    """Phase 4: broker 4's metadata checkpoint, its size and the time to decode it."""
    path = cluster.node(UNDER_TEST).spec.directory / BROKER_DATA_DIR / SNAPSHOT_FILE
    data = path.read_bytes()
    decode_s = float("inf")
    for _ in range(2):  # the better of two: the first also pays for lazy imports
        started = time.perf_counter()
        image = decode_snapshot(data)
        decode_s = min(decode_s, time.perf_counter() - started)
    partitions = sum(len(t.partitions) for t in image.topics.by_id.values())
    return [figure(f"metadata snapshot ({partitions} partitions) size (MiB)", f"{len(data) / 2**20:.1f}"),
            figure("metadata snapshot decode (s)", f"{decode_s:.2f}")]


def new_broker(cluster: LocalCluster) -> list[tuple[str, str]]:
    """Phase 5: broker 7 (an empty data dir) starts; its metadata catch-up, then it stops."""
    template = cluster.node(UNDER_TEST).spec
    spec = dataclasses.replace(template, node_id=NEW_BROKER, host=f"127.0.0.{NEW_BROKER}",
                               directory=cluster.root / f"broker-{NEW_BROKER}")
    rpc_secret = cluster.root / "rpc.secret"
    write_node_key(spec, rpc_secret)
    spec.properties_path.write_text(node_properties(spec, [*cluster.specs, spec],
                                                    load_or_create_secrets(cluster.root), None, rpc_secret))
    node = NodeProcess.spawn(spec)
    try:
        seconds = wait_until(f"broker {NEW_BROKER} caught up", lambda: catch_up_s(spec.log_path, NEW_BROKER),
                             timeout=WAIT_S, poll=0.2)
    finally:
        node.stop()
        # A broker stopped right after its unfence may leave without a controlled shutdown; the
        # controller then counts it as active until its session expires, and the next phase's
        # controlled shutdown waits for it (Kafka's lowest-active-offset rule): 7 of 9.1 s once.
        wait_until(f"broker {NEW_BROKER} fenced or gone", lambda: all(
            b["state"] != "UNFENCED" for b in http(f"{cluster.admin_url}/v1/brokers")
            if b["broker_id"] == NEW_BROKER), timeout=WAIT_S, poll=0.2)
    return [figure(f"new broker {NEW_BROKER}: metadata catch-up, snapshot + tail (s)", f"{seconds:.2f}")]


# Broker 4's log lines that split SIGTERM -> exit (shutdown.broker_lifecycle, broker.node): the
# controller's part ends at "Stopping broker" (should_shut_down), the logs' close at "stopped".
SHUTDOWN_MARKS: Final = (("SIGTERM -> PENDING_CONTROLLED_SHUTDOWN", "to PENDING_CONTROLLED_SHUTDOWN."),
                         ("-> Stopping broker (leaderships moved)", f"Stopping broker {UNDER_TEST}"),
                         ("-> Broker stopped (logs closed)", f"Broker {UNDER_TEST} stopped"))


def shutdown_split(log_path: Path, log_from: int, signalled_at: float, exited_at: float) -> list[tuple[str, str]]:
    """SIGTERM -> exit in the steps broker 4 logs (SHUTDOWN_MARKS), each from the one before, then
    the last logged step -> the exit this process saw (interpreter teardown); the log's times
    have millisecond resolution and the wall clock is the same machine's."""
    with log_path.open("rb") as f:
        f.seek(log_from)
        lines = f.read().decode(errors="replace").splitlines()
    rows: list[tuple[str, str]] = []
    previous = signalled_at
    for name, text in SHUTDOWN_MARKS:
        line = next((line for line in lines if text in line and LOG_TIME.match(line)), None)
        if line is None:
            rows.append((f"controlled shutdown broker {UNDER_TEST}: {name} (s)", "not logged"))
            continue
        at = logged_at(line)
        rows.append(figure(f"controlled shutdown broker {UNDER_TEST}: {name} (s)", f"{at - previous:.2f}"))
        previous = at
    rows.append(figure(f"controlled shutdown broker {UNDER_TEST}: -> process exit (s)", f"{exited_at - previous:.2f}"))
    return rows


def shutdown_cpu(cluster: LocalCluster, before: dict[int, float], seconds: float) -> list[tuple[str, str]]:
    """CPU (utime+stime) each node still running spent between SIGTERM and broker 4's exit: which
    process paces a controlled shutdown on a shared machine."""
    rows = []
    for n in cluster.nodes:
        if n.spec.node_id in before and n.running() and n.pid is not None:
            used = process_cpu_s(n.pid) - before[n.spec.node_id]
            rows.append(figure(f"controlled shutdown: CPU of node {n.spec.node_id} over the {seconds:.1f} s (s)",
                               f"{used:.2f}"))
    return rows


def copy_logs(cluster: LocalCluster, to: Path) -> None:
    """Copy every node's log (the cluster's temp dir is deleted at exit)."""
    to.mkdir(parents=True, exist_ok=True)
    for n in cluster.nodes:
        if n.spec.log_path.exists():
            shutil.copyfile(n.spec.log_path, to / f"{n.spec.directory.name}.log")
    print(f"  logs copied to {to}", flush=True)


def registration(cluster: LocalCluster) -> tuple[str, int] | None:
    """Broker 4's (incarnation id, broker epoch) while it is registered and unfenced, else None."""
    return next(((b["incarnation_id"], b["broker_epoch"]) for b in http(f"{cluster.admin_url}/v1/brokers")
                 if b["broker_id"] == UNDER_TEST and b["state"] == "UNFENCED"), None)


RESTART_AFTER_SHUTDOWN = True  # --no-restart: the controlled shutdown's figures only (a before/after of them)
PY_SPY_RATE: Final = 200  # samples/s: enough to split a ~7 s shutdown by function, light on the box


def start_profiles(cluster: LocalCluster, to: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy (non-blocking: it never pauses the node, so it does not move what it measures) on
    every running node, one collapsed-stack file per node and thread in `to`; stop_profiles ends
    them."""
    to.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("py-spy")
    spies = []
    for n in cluster.nodes:
        if n.running() and n.pid is not None:
            spies.append(subprocess.Popen(
                [str(exe if exe.exists() else "py-spy"), "record", "--pid", str(n.pid), "--nonblocking",
                 "--threads", "--rate", str(PY_SPY_RATE), "--format", "raw",
                 "-o", str(to / f"{n.spec.directory.name}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)  # py-spy reads the interpreter's symbols before it samples
    return spies


def stop_profiles(spies: list[subprocess.Popen[bytes]], to: Path) -> None:
    for spy in spies:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    for spy in spies:
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()
    print(f"  py-spy profiles in {to}", flush=True)


def restart(cluster: LocalCluster, names: list[str], how: signal.Signals,
            logs_to: Path | None = None, profile_to: Path | None = None) -> list[tuple[str, str]]:
    """Phases 6 and 7: stop broker 4 with `how`, start it again, wait until it is in every ISR;
    after a SIGTERM, the nodes' logs are copied to `logs_to` when given, and every node is
    profiled from the signal to broker 4's exit into `profile_to` when given."""
    node = cluster.node(UNDER_TEST)
    what = "controlled shutdown" if how == signal.SIGTERM else how.name
    rows: list[tuple[str, str]] = []
    before = registration(cluster)
    log_from = node.spec.log_path.stat().st_size  # this incarnation's shutdown lines come after
    spies = start_profiles(cluster, profile_to) if profile_to is not None and how == signal.SIGTERM else []
    cpu_before = {n.spec.node_id: process_cpu_s(n.pid) for n in cluster.nodes if n.running() and n.pid is not None}
    signalled_at = time.time()
    started = time.monotonic()
    node.send(how)
    try:
        wait_until(f"broker {UNDER_TEST} to exit", lambda: not node.running(), poll=0.005)
    finally:
        if profile_to is not None and spies:
            stop_profiles(spies, profile_to)
    if how == signal.SIGTERM:
        exited_at = time.time()
        rows.append(figure(f"controlled shutdown broker {UNDER_TEST}: SIGTERM -> exit (s)",
                           f"{time.monotonic() - started:.2f}"))
        rows.extend(shutdown_split(node.spec.log_path, log_from, signalled_at, exited_at))
        rows.extend(shutdown_cpu(cluster, cpu_before, exited_at - signalled_at))
        if logs_to is not None:
            copy_logs(cluster, logs_to)
        out = sum(1 for name in names for p in http(f"{cluster.admin_url}/v1/topics/{name}")["partitions"]
                  if UNDER_TEST in p["replicas"] and UNDER_TEST not in p["isr"])
        rows.append((f"partitions with broker {UNDER_TEST} out of the ISR at exit", f"{out}"))
        if not RESTART_AFTER_SHUTDOWN:
            return rows
    new = NodeProcess.spawn(node.spec)
    cluster.nodes[cluster.nodes.index(node)] = new
    cluster.write_cluster_file()
    started = time.monotonic()
    # After a SIGKILL the controller still lists the old incarnation in every ISR until its
    # session expires: only the new incarnation, registered and unfenced, back in them counts.
    wait_until(f"broker {UNDER_TEST} registered again and unfenced",
               lambda: registration(cluster) not in (before, None), timeout=RESTART_WAIT_S, poll=0.2)
    wait_until(f"broker {UNDER_TEST} in every ISR", lambda: in_every_isr(cluster, names, UNDER_TEST),
               timeout=RESTART_WAIT_S, poll=0.5)
    rows.append(figure(f"{what} broker {UNDER_TEST}, restart -> in every ISR (s)", f"{time.monotonic() - started:.2f}"))
    caught = catch_up_s(node.spec.log_path, UNDER_TEST)
    if caught is not None:
        rows.append((f"{what} broker {UNDER_TEST}, restart: metadata catch-up from its checkpoint (s)",
                     f"{caught:.2f}"))
    assert new.pid is not None
    rows.append((f"RSS broker {UNDER_TEST} after {what} and restart (MiB)", f"{rss_mib(new.pid):.0f}"))
    return rows


def fencing(root: Path, partitions: int) -> list[tuple[str, str]]:
    """Phase 9: a broker leading every one of `partitions` partitions stops heartbeating."""
    print(f"fencing a broker that leads {partitions} partitions (controllers and broker doubles):", flush=True)
    with FencingScale.start(root, partitions=partitions) as scale:
        print(f"  created in {scale.create_s:.1f} s", flush=True)
        figures = scale.fence(4)
    rows = [
        (f"fence broker leading {partitions}: silent -> fenced (s)", f"{figures.detect_s:.1f}"),
        (f"fence broker leading {partitions}: silent -> in no ISR (s)", f"{figures.fence_s:.1f}"),
        (f"fence broker leading {partitions}: longest controller stall (ms)",
         f"{figures.longest_stall_ms}" if figures.longest_stall_ms else "< 250"),
        (f"fence broker leading {partitions}: slowest live heartbeat (ms)", f"{figures.live_heartbeat_max_ms:.0f}"),
        (f"fence broker leading {partitions}: live brokers fenced", f"{len(figures.live_brokers_fenced)}"),
    ]
    for name, value in rows:
        print(f"  {name}: {value}", flush=True)
    for line in figures.stalls + figures.slow_decisions:
        print(f"  controller log: {line}", flush=True)
    return rows


def big_topics(partitions: int) -> dict[str, int]:
    """`partitions` in as few topics as Kafka allows one creation (MAX_RECORDS_PER_USER_OP each)."""
    sizes = [MAX_RECORDS_PER_USER_OP] * (partitions // MAX_RECORDS_PER_USER_OP)
    if partitions % MAX_RECORDS_PER_USER_OP:
        sizes.append(partitions % MAX_RECORDS_PER_USER_OP)
    return {f"big{i:02d}" if len(sizes) > 1 else "big": size for i, size in enumerate(sizes)}


STEADY_AFTER_S: Final = 60.0  # the idle phase's second window starts this long after its first
PHASES: Final = ("idle", "metadata", "new-broker", "shutdown", "sigkill")  # --phases: the phases after a create


def many_topics(cluster: LocalCluster, partitions: int, topics: int, idle_s: float,
                phases: tuple[str, ...] = PHASES, logs_to: Path | None = None,
                profile_to: Path | None = None) -> list[tuple[str, str]]:
    """Phases 2-7 on one cluster: `topics` topics sharing `partitions` (of 3-7, only `phases`)."""
    rows: list[tuple[str, str]] = []
    per = partitions // topics
    names = [f"t{i:04d}" for i in range(topics)]
    print(f"{topics} topics of {per} partitions RF=3:", flush=True)
    elapsed, cpu_rows = create(cluster, dict.fromkeys(names, per))
    rows.append(figure(f"create {topics} x {per} RF=3 (s)", created(elapsed)))
    rows.extend(cpu_rows)
    if logs_to is not None and "shutdown" not in phases:  # the create's logs (shutdown copies later)
        copy_logs(cluster, logs_to)
    if elapsed is None:  # the phases below need every partition: report what was reached instead
        rows.append(figure(f"{topics} topics: longest controller stall over the run (ms)", longest_stall(cluster)))
        return rows
    led = broker_gauge(cluster.node(UNDER_TEST), "partitions_led")
    rows.append(figure(f"broker {UNDER_TEST} leads", f"{led:.0f}"))
    if "idle" in phases:
        rows.extend(idle_figures(cluster, idle_s))
    if "metadata" in phases:
        rows.extend(metadata_figures(cluster))
    for key, what, phase in (("new-broker", "new broker catch-up", lambda: new_broker(cluster)),
                             ("shutdown", "controlled shutdown", lambda: restart(cluster, names, signal.SIGTERM, logs_to,
                                                                                   profile_to)),
                             ("sigkill", "SIGKILL and restart", lambda: restart(cluster, names, signal.SIGKILL))):
        if key not in phases:
            continue
        phase_rows, finished = guarded(what, phase)
        rows.extend(phase_rows)
        if not finished:  # broker 4 may be half way: the phases after it would measure that
            break
    rows.append(figure(f"{topics} topics: longest controller stall over the run (ms)", longest_stall(cluster)))
    rows.append(figure(f"{topics} topics: longest broker stall over the run (ms)", longest_broker_stall(cluster)))
    rows.append(figure(f"{topics} topics: active controller changes over the run", controller_changes(cluster)))
    if logs_to is not None:  # the restarts' logs too: the copy above is from before them
        copy_logs(cluster, logs_to / "end")
    return rows


def idle_figures(cluster: LocalCluster, idle_s: float) -> list[tuple[str, str]]:
    """Phase 3: idle CPU of every node, RSS and open fds of every broker."""
    rows: list[tuple[str, str]] = []
    idle = idle_cpu(cluster.brokers + cluster.controllers, idle_s)
    for node_id, share in sorted(idle.items()):
        kind = "broker" if node_id in {b.spec.node_id for b in cluster.brokers} else "CPU of controller"
        rows.append(figure(f"idle CPU broker {node_id} over {idle_s:.0f} s (% core)" if kind == "broker"
                           else f"CPU of controller {node_id} idle over {idle_s:.0f} s (% core)", f"{share:.1f}"))
    # The window above opens right after the create and holds the brokers' first offset
    # checkpoint (every log new); a second one STEADY_AFTER_S after its start shows the steady cost.
    time.sleep(max(0.0, STEADY_AFTER_S - idle_s))
    steady = idle_cpu(cluster.brokers, idle_s)
    rows.extend(figure(f"idle CPU broker {node_id} steady, {STEADY_AFTER_S:.0f} s later, over {idle_s:.0f} s "
                       "(% core)", f"{share:.1f}") for node_id, share in sorted(steady.items()))
    for b in cluster.brokers:
        assert b.pid is not None
        rows.append(figure(f"RSS broker {b.spec.node_id} (MiB)", f"{rss_mib(b.pid):.0f}"))
        rows.append(figure(f"open fds broker {b.spec.node_id} (segment-file bound "
                           f"{broker_gauge(b, 'open_segment_files_max'):.0f})", f"{open_fds(b.pid)}"))
    return rows


def guarded(what: str, phase: Callable[[], list[tuple[str, str]]]) -> tuple[list[tuple[str, str]], bool]:
    """A phase's rows and True; when one of its bounded waits runs out, one MISSED row saying
    what it waited for, and False."""
    try:
        return phase(), True
    except WaitTimeout as exc:
        return [figure(f"{what}: MISSED", str(exc)[:300])], False


def run(partitions: int, topics: int, idle_s: float, keep: Path | None,
        fencing_partitions: int | None = None, fencing_only: bool = False,
        shapes: tuple[str, ...] = ("big", "many"), with_fencing: bool = True,
        phases: tuple[str, ...] = PHASES, logs_to: Path | None = None,
        profile_to: Path | None = None) -> list[tuple[str, str]]:
    """Each shape on a fresh cluster: no phase pays for what the one before left behind."""
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-scale-", dir=keep and str(keep)) as tmp:
        if fencing_only:
            return fencing(Path(tmp) / "fencing", fencing_partitions or partitions)
        if "big" in shapes:
            big = big_topics(partitions)
            with start_cluster(Path(tmp) / "big-topics") as cluster:
                shape = f"{len(big)} x {max(big.values())}"
                print(f"{shape} partitions RF=3:", flush=True)
                elapsed, cpu_rows = create(cluster, big)
                rows.append(figure(f"create {shape} RF=3 (s)", created(elapsed)))
                rows.extend(cpu_rows)
                if elapsed is not None:
                    idle = idle_cpu(cluster.controllers, idle_s)
                    rows.extend(figure(f"CPU of controller {n} idle over {idle_s:.0f} s (% core)", f"{share:.1f}")
                                for n, share in sorted(idle.items()))
                rows.append(figure(f"{shape}: longest controller stall over the run (ms)", longest_stall(cluster)))
        if "many" in shapes:
            with start_cluster(Path(tmp) / "many-topics") as cluster:
                rows.extend(many_topics(cluster, partitions, topics, idle_s, phases, logs_to, profile_to))
        if with_fencing:
            rows.extend(fencing(Path(tmp) / "fencing", fencing_partitions or partitions))
    return rows


GOALS: Final = (("CPU of controller", ""), ("create ", "<= 60 s"), ("idle CPU", "<= 5 %"), ("RSS broker", "<= 1024 MiB"),
                 ("open fds", "bounded by the setting"), ("SIGTERM -> exit", "<= 10 s"),
                 ("SIGKILL broker 4, restart -> in every ISR", "<= 120 s"),
                 ("new broker", "<= 5 s"), ("longest controller stall", "< 1000 ms"),
                 ("live brokers fenced", "0"))


def goal_of(name: str) -> str:
    """Issue 35's goal for a figure, where it sets one."""
    return next((goal for key, goal in GOALS if key in name), "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100, help="the second shape: this many topics")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--keep", type=Path, help="a directory for the cluster's temp dir (logs survive a crash)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here (bench/all.py)")
    parser.add_argument("--shapes", default="big,many", help="which shapes to run: big, many or both")
    parser.add_argument("--fencing-partitions", type=int, default=None,
                        help="partitions the fenced broker leads in the fencing phase (default: --partitions)")
    parser.add_argument("--fencing-only", action="store_true", help="run only the fencing phase")
    parser.add_argument("--no-fencing", action="store_true", help="skip the fencing phase")
    parser.add_argument("--logs", type=Path, default=None,
                        help="copy the nodes' logs into this directory after the controlled shutdown "
                             "(after the 'many' create when --phases has no shutdown)")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                        help="profile every node with py-spy from broker 4's SIGTERM to its exit, "
                             "collapsed stacks per node and thread in DIR")
    parser.add_argument("--no-restart", action="store_true",
                        help="after the controlled shutdown, do not restart broker 4 (skips its restart -> "
                             "every ISR wait, ~1 min at 100,000 partitions; the phases after it need it)")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"which phases run after the 'many' create (of {','.join(PHASES)})")
    args = parser.parse_args()
    phases = tuple(p for p in args.phases.split(",") if p)
    if args.no_restart and "sigkill" in phases:
        parser.error("--no-restart leaves broker 4 stopped: the sigkill phase needs it running")
    global RESTART_AFTER_SHUTDOWN
    RESTART_AFTER_SHUTDOWN = not args.no_restart
    if set(phases) - set(PHASES):
        parser.error(f"--phases takes some of {','.join(PHASES)}, not {args.phases!r}")
    shapes = tuple(s for s in args.shapes.split(",") if s)
    if not shapes or set(shapes) - {"big", "many"}:
        parser.error(f"--shapes takes big, many or big,many, not {args.shapes!r}")
    # SIGTERM (a timeout, the lead's kill) unwinds like Ctrl-C, so every cluster is stopped
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = load()
    rows = run(args.partitions, args.topics, args.idle_s, args.keep, args.fencing_partitions, args.fencing_only,
               shapes, not args.no_fencing, phases, args.logs, args.py_spy)
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": [[name, value, goal_of(name)] for name, value in rows]}))
    width = max(len(name) for name, _ in rows)
    print(f"\n{'measure'.ljust(width)}  {'value':>8}  goal (issue 35)   [{started} at the start, {load()} at the end]")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value:>8}  {goal_of(name)}")


if __name__ == "__main__":
    main()
