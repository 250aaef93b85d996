"""Run one scenario end to end: cluster, topics, workload, faults, heal, checks, report.

    outcome = run_scenario(scenario, RunOptions(report_dir=Path("chaos-report")))
    outcome.passed      # every expectation met

Nodes start as `tidelog chaos run` starts them, each a fresh `python -m tidelog` process
(NodeProcess.spawn), unless the caller passes `spawn=`: the chaos tests pass the zygote's fork
(tidelog.testing.zygote.fork_or_spawn), which starts a node in ~2 s instead of ~12 s on a loaded
box. Whichever it is also restarts the nodes faults killed (LocalCluster.spawn, chaos.nemesis), so
a run's nodes are all of one kind; a forked node is still its own process in its own session,
which SIGKILL, SIGSTOP and SIGTERM treat as a spawned one.

Phases, each a `phase` event: setup (cluster and topics), workload (faults on their
schedule, progress printed), heal (every fault undone, every node running, every ISR full),
catch-up (the final read below the high watermarks), verify (replicas compared on the
stopped cluster, node logs harvested, checkers run). Whatever happens — failure, Ctrl-C,
SIGTERM — the firewall chain and qdisc are removed, paused nodes resumed and every node
stopped before this returns or raises.
"""

from __future__ import annotations

import heapq
import json
import logging
import random
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from chaos.checkers.result import CheckResult
from chaos.checkers.suite import Verdict
from chaos.engine.admin_workload import TopicCreations, final_topics
from chaos.engine.faults import LINK_ACTIONS, ActiveFault, FaultApplier
from chaos.engine.group_workload import GroupConsumers
from chaos.engine.harvest import parse_controller_log, parse_node_log
from chaos.engine.member_workload import MemberWorkload
from chaos.engine.metadata_views import record_metadata_views
from chaos.engine.targets import ClusterView, admin_headers
from chaos.engine.txn_workload import HOLD_GID, TxnWorkload
from chaos.engine.workload import CLIENT_LOG, Consumers, Producers, Sampler, final_read, workload_clients
from chaos.history import History
from chaos.nemeses.firewall import Firewall, iptables_missing
from chaos.nemeses.hold import HoldProxy
from chaos.links import install as link_install
from chaos.links.install import LinkFaults
from chaos.nemeses.power import PowerLayer, needs_brokers, power_faults
from chaos.nemesis import Nemesis
from chaos.scenarios.spec import FaultAction, Scenario, ScheduledFault
from localcluster.cluster_layout import NodeSpec
from localcluster.hosted import attach_any
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess
from localcluster.replica_files import (
    partition_dir,
    replica_log_bytes,
    wait_replicas_caught_up,
)
from common.config import default_int
from common.waiting import NOT_YET_ERRORS, WaitTimeout, wait_until

PROGRESS_EVERY_S: Final = 5.0
LIVE_FLUSH_S: Final = 1.0  # history.jsonl flushed this often while faults run: the console's live view reads it
TICK_S: Final = 0.1
QUIESCE_S: Final = 2.0
GROUP_CATCH_UP_S: Final = 30.0  # a group polling on, after the final read, up to every high watermark
COMPARE_TIMEOUT_S: Final = 10.0  # replicas of a healed cluster agree on their log end well within this
NETWORK_ACTIONS: Final = (FaultAction.PARTITION, FaultAction.DROP, FaultAction.NETEM)

SpawnNode = Callable[[NodeSpec], NodeProcess]  # starts one node (LocalCluster.start's spawn=)


@dataclass(frozen=True, slots=True)
class RunOptions:
    report_dir: Path
    seed: int = 0
    cluster_dir: Path | None = None  # keep the nodes' files here (default: a temporary directory)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    report_dir: Path
    results: list[CheckResult]
    verdicts: list[Verdict]

    @property
    def passed(self) -> bool:
        return all(v.ok for v in self.verdicts)


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    urllib.request.urlopen(request, timeout=10).close()


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether `condition` came true within `timeout_s`; a controller restarting (a refused
    connection, a half answer) is "not yet". A run that gives up says so and goes on."""
    try:
        return wait_until(what, condition, timeout_s, poll_s=0.2,
                          not_yet=(*NOT_YET_ERRORS, ValueError, KeyError))
    except WaitTimeout:
        print(f"  gave up after {timeout_s:.0f} s waiting for {what}", flush=True)
        return False


def healed(view: ClusterView, topics: list[str]) -> bool:
    brokers = view.brokers()
    if len(brokers) < len(view.cluster.brokers) or any(b["fenced"] or b["in_controlled_shutdown"] for b in brokers):
        return False
    return all(p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"])
               for t in topics for p in view.partitions(t))


class ScenarioRun:
    def __init__(self, scenario: Scenario, options: RunOptions, history: History, *,
                 spawn: SpawnNode | None = None) -> None:
        self.scenario, self.options, self.history = scenario, options, history
        self.rng = random.Random(options.seed)
        self.spawn = spawn  # None: NodeProcess.spawn, a fresh process per node (the CLI's run)

    def start_cluster(self, root: Path) -> LocalCluster:
        shape = self.scenario.cluster
        count = shape.controllers if shape.combined else shape.controllers + shape.brokers
        hosts = [f"127.0.0.{n}" for n in range(1, count + 1)]
        raft, admin, kafka, metrics = free_ports(hosts, 4)
        return LocalCluster.start(root, controllers=shape.controllers, brokers=0 if shape.combined else shape.brokers,
                                  combined=shape.combined, raft_port=raft, admin_port=admin, kafka_port=kafka,
                                  metrics_port=metrics, ready_timeout=60, extra_properties=dict(shape.properties),
                                  racks=shape.racks, security=shape.security, spawn=self.spawn)

    def create_topics(self, cluster: LocalCluster, view: ClusterView) -> None:
        existing = {t["name"] for t in view.get("/v1/topics")}
        for topic in self.scenario.topics:
            if topic.name in existing:
                raise RuntimeError(f"topic {topic.name!r} already exists on this cluster: the workload's values "
                                   "would mix with its records; delete it (tidelog topics --delete) or use another")
            _post(cluster.admin_url + "/v1/topics", {"name": topic.name, "partitions": topic.partitions,
                                                     "replication_factor": topic.replication_factor,
                                                     "configs": dict(topic.configs)}, admin_headers(cluster))
        names = [t.name for t in self.scenario.topics]
        if not wait_for("the topics fully replicated", lambda: healed(view, names), 60):
            raise RuntimeError("the scenario's topics never had a leader and a full ISR")

    def faults(self, applier: FaultApplier, producers: Producers) -> None:
        """Start and heal faults on schedule until the duration is over and every fault healed."""
        schedule = self.scenario.schedule()
        start = time.monotonic()
        queue: list[tuple[float, int, str, ScheduledFault]] = [
            (f.start_s, i, "start", f) for i, f in enumerate(schedule)]
        heapq.heapify(queue)
        active: dict[str, ActiveFault] = {}
        next_progress = PROGRESS_EVERY_S
        next_flush = LIVE_FLUSH_S
        while queue or time.monotonic() - start < self.scenario.duration_s:  # bounded: finite schedule, duration
            elapsed = time.monotonic() - start
            if elapsed >= next_flush:
                next_flush = elapsed + LIVE_FLUSH_S
                self.history.flush()
            if elapsed >= next_progress:
                next_progress += PROGRESS_EVERY_S
                print(f"  t={elapsed:5.1f} s  faults applied {applier.applied}  active {sorted(active)}  "
                      f"writes acknowledged {producers.acked}/{producers.sent}", flush=True)
            if not queue or queue[0][0] > elapsed:
                time.sleep(TICK_S)
                continue
            _, seq, step, scheduled = heapq.heappop(queue)
            if step == "start":
                started = applier.start(scheduled)
                if started is not None:
                    active[scheduled.id] = started
                    heapq.heappush(queue, (scheduled.end_s, seq, "heal", scheduled))
            elif scheduled.id in active:
                applier.heal(active.pop(scheduled.id))

    def final_heal(self, cluster: LocalCluster, nemesis: Nemesis) -> bool:
        self.history.record("phase", name="heal")
        self.history.flush()  # the console's live view shows each phase as it begins
        nemesis.heal()
        for node in list(cluster.nodes):
            if not node.running():
                nemesis.restart(node.spec.node_id)
        view = ClusterView(cluster)
        return wait_for("every broker back and every ISR full", lambda: healed(view, [t.name for t in
                                                                                     self.scenario.topics]),
                        self.scenario.settle_s)

    def compare_replicas(self, cluster: LocalCluster) -> None:
        """With the workload stopped and every ISR full: every replica of each partition
        byte-identical, once every replica's log end offset agrees (a follower's last fetch may
        be in flight); replicas still apart after the wait are compared as they are."""
        topic = self.scenario.workload.topic
        partitions = next(t.partitions for t in self.scenario.topics if t.name == topic)
        for p in range(partitions):
            hosts = [node for node in cluster.brokers if partition_dir(node, topic, p).is_dir()]
            try:
                wait_replicas_caught_up(hosts, topic, [p], COMPARE_TIMEOUT_S)
            except WaitTimeout:
                pass  # divergence: the byte comparison below says how
            logs = {node.spec.node_id: replica_log_bytes(node, topic, p) for node in hosts}
            if len(set(logs.values())) > 1:
                sizes = ", ".join(f"broker {b}: {len(d)} bytes" for b, d in sorted(logs.items()))
                self.history.record("divergence", partition=p, detail=f"replicas differ ({sizes})")
        self.history.record("note", what="replicas-compared", partitions=partitions)

    def harvest(self, cluster: LocalCluster) -> None:
        topic = self.scenario.workload.topic
        for node in cluster.nodes:
            try:
                lines = node.spec.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            found_here = parse_node_log(lines, node_id=node.spec.node_id, topic=topic) \
                if node in cluster.brokers else []
            if node in cluster.controllers:  # whose line it was: one active controller per epoch
                found_here += [{**found, "node": node.spec.node_id} for found in parse_controller_log(lines)]
            for found in found_here:
                wall = found.pop("wall")
                if wall >= self.history.wall_start - 1:
                    kind = found.pop("kind")
                    self.history.record(kind, t=self.history.at_wall(wall), **found)

    def member_groups(self, cluster: LocalCluster, bootstrap: str, partitions: int,
                      security: Mapping[str, str]) -> list[MemberWorkload]:
        """The scenario's KIP-848 and share groups (workload.consumer_members, share_members)."""
        spec, found = self.scenario.workload, []
        security_dir = None if self.scenario.cluster.security is None else cluster.root
        if spec.consumer_members:
            found.append(MemberWorkload.consumers(bootstrap, spec.topic, partitions, count=spec.consumer_members,
                                                  history=self.history, log_dir=self.options.report_dir,
                                                  security_dir=security_dir, security=security))
        if spec.share_members:
            key = "group.share.delivery.count.limit"  # the checker needs the cluster's limit
            limit = int(dict(self.scenario.cluster.properties).get(key) or default_int(key))
            found.append(MemberWorkload.shares(bootstrap, spec.topic, partitions, count=spec.share_members,
                                               history=self.history, log_dir=self.options.report_dir,
                                               delivery_limit=limit, security_dir=security_dir, security=security))
        return found

    def finish_transactions(self, txns: TxnWorkload, healed_ok: bool) -> None:
        """Clients stopped (their transactions end), then the probe for hanging transactions and
        the final reads under both isolation levels, once nothing is left open."""
        print("phase transactions: clients stopped, probe for open transactions, final reads", flush=True)
        txns.stop_clients()
        if healed_ok:
            txns.probe()
        txns.stop_readers()
        if healed_ok:
            txns.final_reads()

    def run(self, root: Path) -> None:
        scenario, history = self.scenario, self.history
        needs_firewall = any(f.action in NETWORK_ACTIONS for f in scenario.faults)
        with ExitStack() as stack:  # leaves in reverse: resume paused nodes, remove rules, stop nodes
            history.record("phase", name="setup")
            running = attach_any(root)  # loopback, or separate hosts (tidelog.hosts registers them)
            power: PowerLayer | None = None
            if running is not None and any(n.running() for n in running.nodes):
                # a cluster `tidelog up` runs: used as it is (its own configs), and left running
                print(f"  using the running cluster of {root} (the scenario's [cluster] is not applied)", flush=True)
                history.record("note", what="attached", root=str(root))
                cluster = running
            else:
                targets = power_faults(scenario)
                if targets:  # mounted before the nodes start, unmounted after they stop
                    power = stack.enter_context(PowerLayer.open(root, scenario.cluster,
                                                                brokers_too=needs_brokers(targets, scenario.cluster)))
                cluster = stack.enter_context(self.start_cluster(root))
            firewall = None
            if needs_firewall:
                why = iptables_missing()
                if why is None:  # after the cluster: removed before the nodes stop, so they can say goodbye
                    firewall = stack.enter_context(Firewall.open())
                else:
                    print(f"  {why}", flush=True)
            links = None
            if any(f.action in LINK_ACTIONS for f in scenario.faults):
                why = link_install.missing()
                if why is None:  # like the firewall: removed before the nodes stop
                    links = stack.enter_context(LinkFaults.open())
                else:
                    print(f"  {why}", flush=True)
            nemesis = stack.enter_context(Nemesis(cluster))
            view = ClusterView(cluster)
            self.create_topics(cluster, view)
            bootstrap, security = workload_clients(cluster, scenario.cluster.security)
            topic = scenario.workload.topic
            partitions = next(t.partitions for t in scenario.topics if t.name == topic)
            producers = Producers(bootstrap, scenario.workload, partitions, history, security=security)
            consumers = Consumers(bootstrap, topic, partitions, scenario.workload.consumers, history,
                                  client_rack=scenario.workload.client_rack, security=security)
            sampler = Sampler(view, bootstrap, topic, partitions, scenario.workload.sample_interval_s, history,
                              security=security)
            creations = None if scenario.workload.create_topics_every_s is None else TopicCreations(
                view, history, prefix=f"{topic}-new", partitions=1,
                replication_factor=min(3, len(cluster.brokers)), interval_s=scenario.workload.create_topics_every_s)
            group = None
            if scenario.workload.group_consumers:
                group = GroupConsumers(bootstrap, topic, partitions, scenario.workload.group_consumers, history,
                                       bounce_every_s=scenario.workload.group_bounce_every_s, security=security)
                stack.callback(group.stop)  # before the nodes stop, whatever happens
            members = self.member_groups(cluster, bootstrap, partitions, security)
            for member_group in members:
                stack.callback(member_group.stop)  # no member process outlives the run
            txns, hold = None, None
            if scenario.workload.txn_topics:
                txns = TxnWorkload(bootstrap, scenario.workload, {t.name: t.partitions for t in scenario.topics},
                                   history, self.options.report_dir, probe_bootstrap=cluster.bootstrap_servers,
                                   security_dir=None if scenario.cluster.security is None else cluster.root)
                stack.callback(txns.stop)  # no client process outlives the run
                why = iptables_missing() if scenario.workload.txn_held else "no client held"
                if why is None:  # closed before the clients stop: a request still held is sent
                    hold = stack.enter_context(HoldProxy.open(
                        [(b.spec.host, b.spec.kafka_port) for b in cluster.brokers], gid=HOLD_GID, history=history))
                elif scenario.workload.txn_held:
                    print(f"  {why}", flush=True)
            history.record("phase", name="workload")
            print(f"phase workload: {len(scenario.schedule())} faults over {scenario.duration_s:.0f} s", flush=True)
            for part in (producers, consumers, sampler, creations, group, txns, *members):
                if part is not None:
                    part.start()
            applier = FaultApplier(view, nemesis, firewall, history, self.rng, topic)
            applier.txns, applier.hold, applier.power, applier.links = txns, hold, power, links
            applier.members = members
            try:
                self.faults(applier, producers)
                if firewall is not None:
                    firewall.close()
                if links is not None:
                    links.close()
                print("phase heal", flush=True)
                ok = self.final_heal(cluster, nemesis)
                time.sleep(QUIESCE_S)
            finally:
                left = producers.stop()
                sampler.stop()
                consumers.stop()
                if creations is not None:
                    creations.stop()
            history.record("phase", name="catch-up")
            history.flush()
            print(f"phase catch-up: {producers.acked} of {producers.sent} writes acknowledged, {left} unresolved",
                  flush=True)
            if ok and creations is not None:
                final_topics(view, history, creations.names, min(3, len(cluster.brokers)))
            if not (ok and final_read(bootstrap, topic, partitions, history, security=security)):
                history.record("note", what="final-read-incomplete")
            if group is not None:
                if ok and not group.catch_up(GROUP_CATCH_UP_S):
                    print(f"  the consumer group did not reach every high watermark in {GROUP_CATCH_UP_S:.0f} s",
                          flush=True)
                group.stop()
            for member_group in members:
                if ok and not member_group.catch_up(GROUP_CATCH_UP_S):
                    print(f"  the {member_group.role} group did not finish every record in {GROUP_CATCH_UP_S:.0f} s",
                          flush=True)
                member_group.stop()
            if txns is not None:
                self.finish_transactions(txns, ok)
            history.record("phase", name="verify")
            history.flush()
            print("phase verify", flush=True)
            if ok and wait_for("every ISR full after the workload", lambda: healed(view, [topic]), 30):
                self.compare_replicas(cluster)
            if power is not None:  # every broker's applied metadata beside the quorum's, healed or not
                record_metadata_views(view, history, [t.name for t in scenario.topics])
            self.harvest(cluster)


def run_scenario(scenario: Scenario, options: RunOptions, *, spawn: SpawnNode | None = None) -> RunOutcome:
    """Run `scenario` and write its report; `spawn` starts (and restarts) each node of the
    cluster it starts (None: a fresh process per node, see the module doc)."""
    from chaos.report.html import write_report

    options.report_dir.mkdir(parents=True, exist_ok=True)
    (options.report_dir / "scenario.toml").write_text(scenario.text or "", encoding="utf-8")
    path = options.report_dir / "history.jsonl"
    handler = logging.FileHandler(options.report_dir / "clients.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    CLIENT_LOG.addHandler(handler)
    CLIENT_LOG.propagate = False
    CLIENT_LOG.setLevel(logging.INFO)
    try:
        _run_to_history(scenario, options, path, spawn)
    finally:
        CLIENT_LOG.removeHandler(handler)
        handler.close()
    results, verdicts = write_report(options.report_dir, scenario)
    return RunOutcome(options.report_dir, results, verdicts)


def _run_to_history(scenario: Scenario, options: RunOptions, path: Path, spawn: SpawnNode | None) -> None:
    with History.create(path) as history:
        history.record("note", what="scenario", name=scenario.name, seed=options.seed,
                       schedule=[{"id": f.id, "start_s": f.start_s, "end_s": f.end_s, "fault": f.describe()}
                                 for f in scenario.schedule()])
        run = ScenarioRun(scenario, options, history, spawn=spawn)
        if options.cluster_dir is not None:
            run.run(options.cluster_dir)
        else:
            with tempfile.TemporaryDirectory(prefix="tidelog-chaos-") as tmp:
                run.run(Path(tmp))
