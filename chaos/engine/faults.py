"""Apply and heal one scheduled fault: each start and heal recorded in the history.

The mechanisms: chaos.nemesis (SIGKILL/restart, SIGSTOP/SIGCONT), SIGTERM for a
controlled shutdown, chaos.nemeses.firewall (iptables chain, tc netem), chaos.links (delay,
bandwidth, loss and slow close in userspace),
chaos.nemeses.disk and chaos.nemeses.power (SIGKILL, then every unsynced write dropped);
on a transactional client or a group member process (`client:NAME`): kill, pause (SIGSTOP) and hold
(chaos.nemeses.hold: its next request of `params.api` kept back until its next transaction). A fault whose mechanism is unavailable (no root, no iptables) or whose
target names nothing right now is recorded as `skip` with one line saying why.
"""

from __future__ import annotations

import json
import logging
import random
import urllib.request
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from chaos.engine.member_workload import MemberWorkload
from chaos.engine.targets import ClusterView, TargetError, admin_headers, resolve
from chaos.engine.txn_workload import TxnWorkload
from chaos.history import History
from chaos.nemeses import disk, links
from chaos.nemeses.firewall import Firewall, iptables_missing, tc_missing
from chaos.nemeses.hold import END_TXN, HoldProxy
from chaos.nemeses.power import PowerLayer, power_targets
from chaos.nemeses.requests import RequestFaultError, RequestFaultNemesis
from chaos.links import install as link_install, rules as link_rules
from chaos.links.install import LinkFaults
from chaos.nemesis import Nemesis
from chaos.scenarios.spec import FaultAction, ScheduledFault

log = logging.getLogger(__name__)

SIGNAL_ACTIONS = (FaultAction.KILL, FaultAction.PAUSE, FaultAction.SHUTDOWN, FaultAction.DISK, FaultAction.POWER,
                  FaultAction.REASSIGN)  # no peer, no firewall (a reassignment is an admin API call)
CLIENT_ACTIONS = (FaultAction.KILL, FaultAction.PAUSE, FaultAction.HOLD)
HELD_APIS = {"end_txn": END_TXN, "produce": 0}  # params.api of a hold -> Kafka API key
REASSIGN_TIMEOUT_S = 10.0  # the admin API answers a reassignment once its records are committed
LINK_ACTIONS = (FaultAction.DELAY, FaultAction.BANDWIDTH, FaultAction.LOSS, FaultAction.SLOW_CLOSE)


@runtime_checkable
class HostPartitions(Protocol):
    """A cluster whose nodes are separate hosts cuts its links itself (tidelog.hosts: iptables in
    the hosts' namespaces); the firewall and link faults here act on loopback only."""

    def partition(self, side_a: list[int], side_b: list[int], *, one_way: bool) -> int: ...

    def heal_partition(self, handle: int) -> None: ...


@dataclass(slots=True)
class ActiveFault:
    scheduled: ScheduledFault
    targets: list[int]
    peers: list[int] = field(default_factory=list)
    handle: int | None = None
    client: str | None = None  # a transactional client's name (client:NAME), not a node
    placed: dict[int, int] = field(default_factory=dict)  # request-fault: broker id -> the fault's id there
    host_cut: bool = False  # `handle` is the cluster's own partition (HostPartitions), not the firewall's


class FaultApplier:
    def __init__(self, view: ClusterView, nemesis: Nemesis, firewall: Firewall | None, history: History,
                 rng: random.Random, topic: str) -> None:
        self.view, self.nemesis, self.firewall, self.history = view, nemesis, firewall, history
        self.rng, self.topic = rng, topic
        self.applied = 0
        self.txns: TxnWorkload | None = None  # set by the runner for a transactional workload
        self.hold: HoldProxy | None = None
        self.power: PowerLayer | None = None  # set by the runner when the scenario has power faults
        self.links: LinkFaults | None = None  # set by the runner when the scenario has link faults
        self.requests: RequestFaultNemesis | None = None  # made at the first request-fault
        self.members: list[MemberWorkload] = []  # set by the runner: Kafka 4 group members (c0.., s0..)

    def _client_owner(self, name: str) -> TxnWorkload | MemberWorkload | None:
        """Whose process `client:NAME` is: a transactional client's or a group member's."""
        if self.txns is not None and name in self.txns.clients:
            return self.txns
        return next((m for m in self.members if name in m.clients), None)

    def _skip(self, scheduled: ScheduledFault, why: str) -> None:
        print(f"  skip {scheduled.id} ({scheduled.describe()}): {why}", flush=True)
        self.history.record("skip", id=scheduled.id, description=scheduled.describe(), why=why)

    def _start_client(self, scheduled: ScheduledFault) -> ActiveFault | None:
        fault, name = scheduled.fault, scheduled.fault.target.split(":", 1)[1]
        owner = self._client_owner(name)
        if owner is None:
            self._skip(scheduled, f"no transactional client or group member {name!r} in this workload")
            return None
        if fault.action is FaultAction.HOLD and owner is not self.txns:
            self._skip(scheduled, "hold applies to a transactional client only")
            return None
        if fault.action not in CLIENT_ACTIONS:
            self._skip(scheduled, f"{fault.action.value} does not apply to a client (kill, pause, hold)")
            return None
        if fault.action is FaultAction.HOLD:
            api = HELD_APIS.get(str(fault.param("api", "end_txn")))
            if api is None or self.hold is None:
                self._skip(scheduled, "no hold proxy (needs root and iptables' nat table, and the client in "
                           "workload.txn_held)" if api is not None else f"params.api: one of {sorted(HELD_APIS)}")
                return None
            self.hold.arm(api)
        elif fault.action is FaultAction.KILL:
            owner.kill(name)
        else:
            owner.pause(name)
        self.applied += 1
        self.history.record("fault-start", id=scheduled.id, action=fault.action.value,
                            description=scheduled.describe(), targets=[], peers=[], client=name)
        print(f"  {scheduled.id} start: {scheduled.describe()}", flush=True)
        return ActiveFault(scheduled, [], client=name)

    def start(self, scheduled: ScheduledFault) -> ActiveFault | None:
        fault = scheduled.fault
        if fault.target.startswith("client:"):
            return self._start_client(scheduled)
        if fault.action is FaultAction.HOLD:
            self._skip(scheduled, "hold applies to a transactional client (client:NAME) only")
            return None
        if fault.action is FaultAction.REQUEST_FAULT:
            return self._start_request_fault(scheduled)
        missing = (iptables_missing() if fault.action in (FaultAction.PARTITION, FaultAction.DROP)
                   else tc_missing() if fault.action is FaultAction.NETEM else None)
        if fault.action is FaultAction.POWER and self.power is None:
            missing = "no power-loss layer mounted for this run"
        if fault.action in LINK_ACTIONS:
            missing = link_install.missing() or (None if self.links is not None else "no link faults opened")
        if missing is not None or (self.firewall is None and fault.action not in SIGNAL_ACTIONS + LINK_ACTIONS):
            self._skip(scheduled, missing or "no firewall opened for this run")
            return None
        try:
            targets = resolve(fault.target, self.view, self.rng)
            peers = [] if fault.action in SIGNAL_ACTIONS else resolve(
                fault.peer or "others", self.view, self.rng, exclude=frozenset(targets))
        except (TargetError, OSError) as exc:
            self._skip(scheduled, str(exc))
            return None
        if fault.action is FaultAction.POWER:  # which replicas of each partition go dark together
            try:
                targets, replicas = power_targets(fault, targets, self.view, self.topic, self.rng)
            except (TargetError, OSError) as exc:
                self._skip(scheduled, str(exc))
                return None
            self.history.record("power-replicas", id=scheduled.id, targets=targets, replicas=replicas)
        active = ActiveFault(scheduled, targets, [p for p in peers if p not in targets])
        cluster = self.view.cluster
        a = fault.action
        started_at = self.history.now()  # a power fault's start is its kills, not the end of its rollbacks
        if a in (FaultAction.KILL, FaultAction.DISK, FaultAction.POWER):
            for node_id in targets:  # every target dead before any plug is pulled: "at once"
                self.nemesis.kill(node_id)
            if a is FaultAction.DISK:
                self._edit_disk(active)
            elif a is FaultAction.POWER:
                assert self.power is not None
                for node_id, lost in self.power.pull(targets).items():
                    self.history.record("power-loss", id=scheduled.id, node=node_id, **lost)
        elif a is FaultAction.PAUSE:
            for node_id in targets:
                self.nemesis.pause(node_id)
        elif a is FaultAction.SHUTDOWN:
            for node_id in targets:
                cluster.node(node_id).stop()
        elif a is FaultAction.REASSIGN:
            try:
                self._reassign(active)
            except (TargetError, OSError, ValueError) as exc:
                self._skip(scheduled, str(exc))
                return None
        elif isinstance(cluster, HostPartitions):
            if a not in (FaultAction.PARTITION, FaultAction.DROP):
                self._skip(scheduled, f"{a.value} acts on loopback links; this cluster's nodes are separate hosts")
                return None
            active.handle = cluster.partition(targets, active.peers, one_way=a is FaultAction.DROP)
            active.host_cut = True
        else:
            specs = {n.spec.node_id: n.spec for n in cluster.nodes}
            side_a, side_b = [specs[i] for i in targets], [specs[i] for i in active.peers]
            matches = links.cut(side_a, side_b, one_way_only=a is FaultAction.DROP)
            if a in LINK_ACTIONS:
                try:
                    active.handle = self._start_link(active, matches)
                except (RuntimeError, OSError) as exc:  # e.g. another run's qdisc: skipped, not fatal
                    self._skip(scheduled, f"link fault not installed: {exc}")
                    return None
            elif a is FaultAction.NETEM:
                assert self.firewall is not None
                args = ["delay", f"{fault.param('delay_ms', 200)}ms"]
                if fault.param("loss_pct"):
                    args += ["loss", f"{fault.param('loss_pct')}%"]
                active.handle = self.firewall.netem(matches, args)
            else:
                assert self.firewall is not None
                active.handle = self.firewall.drop(matches)
        self.applied += 1
        self.history.record("fault-start", id=scheduled.id, action=a.value, description=scheduled.describe(),
                            targets=targets, peers=active.peers, t=started_at if a is FaultAction.POWER else None)
        print(f"  {scheduled.id} start: {scheduled.describe()} -> nodes {targets}"
              f"{f' / {active.peers}' if active.peers else ''}", flush=True)
        return active

    def _reassign(self, active: ActiveFault) -> None:
        """Move the target follower's replica to the lowest broker without one (a reassignment
        that copies the partition's whole log over the new replica's links)."""
        head, topic, number_text = active.scheduled.fault.target.split(":")  # resolve() read follower:T:P
        number = int(number_text)
        replicas = list(self.view.partition(topic, number)["replicas"])
        outsiders = sorted(n.spec.node_id for n in self.view.cluster.brokers if n.spec.node_id not in replicas)
        if not outsiders or active.targets[0] not in replicas:
            raise TargetError(f"{topic}-{number}: no broker without a replica to move {active.targets} to")
        target = [outsiders[0] if r == active.targets[0] else r for r in replicas]
        body = {"version": 1, "partitions": [{"topic": topic, "partition": number, "replicas": target}]}
        headers = {"Content-Type": "application/json", **admin_headers(self.view.cluster)}
        request = urllib.request.Request(self.view.cluster.admin_url + "/v1/reassignments", method="POST",
                                         data=json.dumps(body).encode(), headers=headers)
        urllib.request.urlopen(request, timeout=REASSIGN_TIMEOUT_S).close()
        self.history.record("note", what="reassignment", id=active.scheduled.id, topic=topic, partition=number,
                            replicas=replicas, target=target)
        active.peers = [outsiders[0]]

    def _start_link(self, active: ActiveFault, matches: list[links.PacketMatch]) -> int:
        fault, faults = active.scheduled.fault, self.links
        assert faults is not None
        params = dict(fault.params)
        if fault.action is FaultAction.BANDWIDTH:
            return faults.bandwidth(matches, link_rules.rate_kbit(params))
        if fault.action is FaultAction.LOSS:
            return faults.loss(matches, link_rules.loss_probability(params))
        delay = (link_rules.delay_params(params) if fault.action is FaultAction.DELAY
                 else link_rules.slow_close_params(params))
        return faults.delay(matches, delay, seed=self.rng.randrange(1 << 30))

    def _start_request_fault(self, scheduled: ScheduledFault) -> ActiveFault | None:
        """The fault in `params` installed on every target broker (chaos.nemeses.requests)."""
        fault = scheduled.fault
        try:
            targets = resolve(fault.target, self.view, self.rng)
            if self.requests is None:
                self.requests = RequestFaultNemesis(self.view.cluster)
            placed = self.requests.install(dict(fault.params), targets)
        except (TargetError, ValueError, OSError, RequestFaultError) as exc:  # e.g. a controller-only target
            self._skip(scheduled, str(exc))
            return None
        self.applied += 1
        self.history.record("fault-start", id=scheduled.id, action=fault.action.value,
                            description=scheduled.describe(), targets=targets, peers=[])
        print(f"  {scheduled.id} start: {scheduled.describe()} -> brokers {targets}", flush=True)
        return ActiveFault(scheduled, targets, placed=placed)

    def _edit_disk(self, active: ActiveFault) -> None:
        mode = disk.DiskFault(active.scheduled.fault.param("mode", "truncate-tail"))
        for node_id in active.targets:
            node = self.view.cluster.node(node_id)
            for partition_dir in sorted((node.spec.directory / "data").glob(f"{self.topic}-*")):
                edit = disk.apply(partition_dir, mode, seed=self.rng.randrange(1 << 30))
                if edit is not None:
                    self.history.record("note", what="disk-edit", node=node_id, path=str(edit.path),
                                        detail=edit.description)

    def heal(self, active: ActiveFault) -> None:
        a = active.scheduled.fault.action
        owner = None if active.client is None else self._client_owner(active.client)
        if active.client is not None and owner is not None:
            if a is FaultAction.HOLD and self.hold is not None:
                self.hold.release()
            elif a is FaultAction.KILL:
                owner.restart(active.client)
            elif a is FaultAction.PAUSE:
                owner.resume(active.client)
        elif a in (FaultAction.KILL, FaultAction.DISK, FaultAction.SHUTDOWN, FaultAction.POWER):
            for node_id in active.targets:
                if not self.view.cluster.node(node_id).running():
                    self.nemesis.restart(node_id)
        elif a is FaultAction.PAUSE:
            for node_id in active.targets:
                self.nemesis.resume(node_id)
        elif a is FaultAction.REQUEST_FAULT and self.requests is not None:
            fired: dict[int, int] = {}  # the requests it changed, per broker (0 on one restarted meanwhile)
            try:
                fired = self.requests.remove(active.placed)
            except (OSError, RequestFaultError) as exc:
                log.warning("request-fault %s: not removed: %s", active.scheduled.id, exc)
            self.history.record("note", what="request-fault-fired", id=active.scheduled.id,
                                fired={str(k): v for k, v in fired.items()})
        elif active.host_cut and active.handle is not None and isinstance(self.view.cluster, HostPartitions):
            self.view.cluster.heal_partition(active.handle)
        elif a in LINK_ACTIONS and self.links is not None and active.handle is not None:
            if a is FaultAction.LOSS:  # what the link actually lost, beside the configured share
                seen, dropped = self.links.loss_counters(active.handle)
                self.history.record("note", what="link-loss", id=active.scheduled.id, packets=seen,
                                    dropped=dropped)
            elif a in (FaultAction.DELAY, FaultAction.SLOW_CLOSE):  # the connections it slowed
                self.history.record("note", what="link-relayed", id=active.scheduled.id,
                                    connections=self.links.relayed(active.handle))
            self.links.remove(active.handle)
        elif self.firewall is not None and active.handle is not None:
            if a is FaultAction.NETEM:
                self.firewall.remove_netem(active.handle)
            else:
                self.firewall.remove(active.handle)
        self.history.record("fault-end", id=active.scheduled.id, action=a.value)
        print(f"  {active.scheduled.id} heal: {active.scheduled.describe()}", flush=True)
