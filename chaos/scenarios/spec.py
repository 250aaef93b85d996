"""A chaos scenario as data: cluster shape, topics, workload, a fault schedule, expectations.

    scenario = load_scenario(Path("leader-kill-loop.toml"))    # or parse_scenario(text)
    for fault in scenario.schedule(): ...                        # ScheduledFault, by start time

A scenario file is TOML (read with the standard library's tomllib). Faults name an action
(`kill`, `pause`, `shutdown`, `partition`, `drop`, `netem`, `disk`, `hold`, `power`, and the link
faults `delay`, `bandwidth`, `loss`, `slow-close`), a target selector
resolved against live metadata when the fault starts (chaos.engine.targets), a start
(`at_s` from the start of the workload, optionally `every_s` × `count`) and a `duration_s`
after which it heals. Faults may overlap: the whole-ISR-down scenarios kill a follower,
then the leader while the follower is still down. A `[generator]` table instead asks for
a seeded random schedule (chaos.scenarios.generator): the same seed, the same schedule.
"""

from __future__ import annotations

import dataclasses
import enum
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from localcluster.security_setup import SECURITY_PROTOCOLS

SELECTOR_HEADS: Final = frozenset({
    "active-controller", "controller-follower", "leader", "follower", "isr", "replicas", "broker", "node",
    "majority", "minority", "brokers", "controllers", "others", "nodes", "coordinator",
    "txn-coordinator", "client", "rack",
})


class ScenarioError(ValueError):
    """A scenario file that cannot run; the message names the field."""


class FaultAction(enum.Enum):
    KILL = "kill"            # SIGKILL; heal: restart from the data dir
    PAUSE = "pause"          # SIGSTOP; heal: SIGCONT
    SHUTDOWN = "shutdown"    # SIGTERM (a controlled shutdown for a broker); heal: restart
    PARTITION = "partition"  # drop every packet between target and peer (default: everyone else), both ways
    DROP = "drop"            # drop packets from target to peer only (one way)
    NETEM = "netem"          # tc netem delay/loss on target<->peer address pairs only
    DISK = "disk"            # SIGKILL, edit the stopped broker's log (params.mode), restart
    HOLD = "hold"            # a client's next request of one API (params.api) held until its next transaction began
    POWER = "power"          # SIGKILL and drop every write not yet fsynced (chaos.power); heal: restart
    # inside the target brokers (chaos.nemeses.requests): params are the fault (kind, api, error, times,
    # topic, client_id, group, delay_ms, throttle_ms); heal: removed, its firings noted
    REQUEST_FAULT = "request-fault"
    # link faults in userspace (chaos.links), target <-> peer: no netem needed
    DELAY = "delay"            # each direction's bytes delayed params.delay_ms ± params.jitter_ms, in order
    BANDWIDTH = "bandwidth"    # each direction limited to params.rate_kbit (HTB on lo)
    LOSS = "loss"              # each packet dropped with params.loss_pct % (iptables statistic)
    SLOW_CLOSE = "slow-close"  # each connection's FIN held params.delay_ms
    REASSIGN = "reassign"      # follower:T:P's replica moved to a broker without one (KIP-455); no heal


class LossPolicy(enum.Enum):
    NONE = "none"            # no acknowledged write may be lost
    EXPLAINED = "explained"  # lost only by unclean elections, every loss matched to one
    ANY = "any"              # loss is measured and reported, not judged (acks=1 demonstrations)


class Acks(enum.Enum):
    ALL = "all"
    LEADER = "1"


@dataclass(frozen=True, slots=True)
class Fault:
    action: FaultAction
    target: str
    at_s: float
    duration_s: float
    peer: str | None = None
    every_s: float | None = None
    count: int = 1
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    id: str
    start_s: float
    end_s: float
    fault: Fault

    def describe(self) -> str:
        peer = f" <-> {self.fault.peer}" if self.fault.peer and self.fault.action is not FaultAction.DROP else (
            f" -> {self.fault.peer}" if self.fault.peer else "")
        extra = "".join(f" {k}={v}" for k, v in self.fault.params)
        return f"{self.fault.action.value} {self.fault.target}{peer}{extra}"


@dataclass(frozen=True, slots=True)
class ClusterShape:
    controllers: int = 3
    brokers: int = 3
    combined: bool = False
    properties: tuple[tuple[str, str], ...] = ()
    racks: int = 0  # > 0: brokers in rack-1..rack-N (localcluster.racks), for `rack:NAME` targets
    # SASL_SSL, SSL or SASL_PLAINTEXT: brokers get that listener too, inter-broker traffic uses it and
    # the workload's clients connect through it (localcluster.security_setup); None: PLAINTEXT only
    security: str | None = None


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int = 3
    replication_factor: int = 3
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    topic: str = "chaos"
    acks: Acks = Acks.ALL
    idempotence: bool = True
    rate: float = 200.0           # sends per second, spread over the partitions
    consumers: int = 1            # consumers by assignment, each recording every poll
    sample_interval_s: float = 0.25
    message_timeout_ms: int = 30_000
    create_topics_every_s: float | None = None  # also create topics (1 partition each) this often
    group_consumers: int = 0      # members of one consumer group (subscribe, poll, commit), each poll recorded
    group_bounce_every_s: float | None = None  # member m0 leaves and rejoins the group this often
    # Kafka 4's groups (chaos.engine.member_workload), member processes c0.. / s0.. (client:NAME faults)
    consumer_members: int = 0     # members of one KIP-848 group (group.protocol=consumer)
    share_members: int = 0        # members of one KIP-932 share group (ShareConsumer)
    # transactions (chaos.engine.txn_workload): producers over these topics, a transform into txn_output
    txn_topics: tuple[str, ...] = ()
    txn_producers: int = 1
    txn_output: str | None = None
    txn_timeout_ms: int = 10_000
    txn_interval_ms: int = 50
    txn_held: tuple[str, ...] = ()  # clients whose connections go through the hold proxy (action hold)
    client_rack: str | None = None  # the consumers' client.rack (KIP-392: they may read a follower there)


@dataclass(frozen=True, slots=True)
class Expectations:
    lost: LossPolicy = LossPolicy.NONE
    min_lost: int = 0
    unclean_elections: bool | None = None
    max_unavailable_s: float | None = None
    min_unavailable_s: float | None = None
    min_acked: int = 1
    allow: tuple[str, ...] = ()
    isr_shrink_expand: bool = False  # the samples show an ISR shrink, then the full ISR again
    stays_online: bool = False  # no sample ever shows a partition without a leader
    stable_controller: bool = False  # no new active controller during the workload, no broker fenced


@dataclass(frozen=True, slots=True)
class GeneratorSpec:
    seed: int = 0
    faults: int = 6
    actions: tuple[FaultAction, ...] = (FaultAction.KILL, FaultAction.PAUSE, FaultAction.PARTITION)
    min_duration_s: float = 2.0
    max_duration_s: float = 6.0
    gap_s: float = 6.0


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    duration_s: float
    cluster: ClusterShape
    topics: tuple[TopicSpec, ...]
    workload: WorkloadSpec
    faults: tuple[Fault, ...]
    expect: Expectations
    generator: GeneratorSpec | None = None
    settle_s: float = 60.0  # how long the final heal may take (every broker back, full ISRs)
    text: str = field(default="", compare=False)

    def schedule(self) -> list[ScheduledFault]:
        """Every fault occurrence, by start time (ids f1, f2, ... in that order)."""
        occurrences: list[tuple[float, float, int, Fault]] = []
        for index, fault in enumerate(self.faults):
            for n in range(fault.count):
                start = fault.at_s + n * (fault.every_s or 0.0)
                occurrences.append((start, start + fault.duration_s, index, fault))
        occurrences.sort(key=lambda o: (o[0], o[2]))
        return [ScheduledFault(f"f{i + 1}", s, e, f) for i, (s, e, _, f) in enumerate(occurrences)]


def _get(table: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str) -> Any:
    value = table.get(key, default)
    if value is default:
        return value
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ScenarioError(f"{where}.{key}: expected a number, got {value!r}")
    if not isinstance(value, kind):
        raise ScenarioError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _enum(kind: type[enum.Enum], value: Any, where: str) -> Any:
    try:
        return kind(str(value))
    except ValueError:
        raise ScenarioError(f"{where}: {value!r} is not one of {[m.value for m in kind]}") from None


def check_selector(text: str, where: str) -> str:
    head = text.split(":", 1)[0]
    if head not in SELECTOR_HEADS:
        raise ScenarioError(f"{where}: unknown target {text!r} (one of {sorted(SELECTOR_HEADS)})")
    return text


def _fault(raw: dict[str, Any], where: str) -> Fault:
    action = _enum(FaultAction, raw.get("action"), f"{where}.action")
    unknown = set(raw) - {"action", "target", "peer", "at_s", "duration_s", "every_s", "count", "params"}
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)}")
    fault = Fault(action, check_selector(str(raw.get("target", "")), f"{where}.target"),
                  float(_get(raw, "at_s", (int, float), 0.0, where)),
                  float(_get(raw, "duration_s", (int, float), 0.0, where)),
                  None if raw.get("peer") is None else check_selector(str(raw["peer"]), f"{where}.peer"),
                  None if raw.get("every_s") is None else float(_get(raw, "every_s", (int, float), None, where)),
                  int(_get(raw, "count", int, 1, where)),
                  tuple(sorted(_get(raw, "params", dict, {}, where).items())))
    if fault.at_s < 0 or fault.duration_s < 0 or fault.count < 1:
        raise ScenarioError(f"{where}: at_s and duration_s must be >= 0 and count >= 1")
    if fault.count > 1 and not fault.every_s:
        raise ScenarioError(f"{where}: count > 1 needs every_s")
    _check_link_params(fault, where)
    if fault.action is FaultAction.REQUEST_FAULT:  # checked when the file is read, by the broker's rules
        from chaos.nemeses.requests import fault_spec

        try:
            fault_spec(dict(fault.params))
        except ValueError as exc:
            raise ScenarioError(f"{where}.params.{exc}") from None
    return fault


def _check_link_params(fault: Fault, where: str) -> None:
    """A link fault's params checked when the file is read, not when the fault starts."""
    from chaos.links import rules  # imported here: only link faults need it

    check = {FaultAction.DELAY: rules.delay_params, FaultAction.BANDWIDTH: rules.rate_kbit,
             FaultAction.LOSS: rules.loss_probability, FaultAction.SLOW_CLOSE: rules.slow_close_params}
    if fault.action in check:
        try:
            check[fault.action](dict(fault.params))
        except rules.LinkParamError as exc:
            raise ScenarioError(f"{where}.{exc}") from None


def _with_transactions(workload: WorkloadSpec, w: dict[str, Any], topics: set[str]) -> WorkloadSpec:
    txn_topics = tuple(str(t) for t in _get(w, "txn_topics", list, [], "workload"))
    output = _get(w, "txn_output", str, None, "workload")
    for name in (*txn_topics, *([output] if output else [])):
        if name not in topics:
            raise ScenarioError(f"workload: transactional topic {name!r} is not one of the scenario's topics")
    if output and not txn_topics:
        raise ScenarioError("workload.txn_output: a transform needs txn_topics (it reads the first)")
    held = tuple(str(c) for c in _get(w, "txn_held", list, [], "workload"))
    spec = dataclasses.replace(workload, txn_topics=txn_topics, txn_output=output, txn_held=held,
                               txn_producers=int(_get(w, "txn_producers", int, 1, "workload")),
                               txn_timeout_ms=int(_get(w, "txn_timeout_ms", int, 10_000, "workload")),
                               txn_interval_ms=int(_get(w, "txn_interval_ms", int, 50, "workload")))
    if spec.txn_producers < 0 or spec.txn_timeout_ms <= 0 or spec.txn_interval_ms < 0:
        raise ScenarioError("workload: txn_producers, txn_timeout_ms and txn_interval_ms must be positive")
    return spec


def parse_scenario(text: str, *, name: str = "scenario") -> Scenario:
    """A Scenario from TOML text; ScenarioError naming the field when something is wrong."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{name}: not valid TOML: {exc}") from None
    cluster_raw = _get(raw, "cluster", dict, {}, "")
    cluster = ClusterShape(int(_get(cluster_raw, "controllers", int, 3, "cluster")),
                           int(_get(cluster_raw, "brokers", int, 3, "cluster")),
                           bool(_get(cluster_raw, "combined", bool, False, "cluster")),
                           tuple(sorted((k, str(v)) for k, v in
                                        _get(cluster_raw, "properties", dict, {}, "cluster").items())),
                           int(_get(cluster_raw, "racks", int, 0, "cluster")),
                           _get(cluster_raw, "security", str, None, "cluster"))
    if cluster.security is not None and cluster.security not in SECURITY_PROTOCOLS:
        raise ScenarioError(f"cluster.security: expected one of {list(SECURITY_PROTOCOLS)}, got {cluster.security!r}")
    if not 0 <= cluster.racks <= cluster.brokers:
        raise ScenarioError(f"cluster.racks: expected 0 to the {cluster.brokers} broker(s), got {cluster.racks}")
    topics = tuple(TopicSpec(str(t["name"]), int(t.get("partitions", 3)), int(t.get("replication_factor", 3)),
                             tuple(sorted((k, str(v)) for k, v in t.get("configs", {}).items())))
                   for t in _get(raw, "topics", list, [{"name": "chaos"}], ""))
    w = _get(raw, "workload", dict, {}, "")
    workload = WorkloadSpec(str(w.get("topic", topics[0].name)), _enum(Acks, w.get("acks", "all"), "workload.acks"),
                            bool(w.get("idempotence", True)), float(w.get("rate", 200.0)),
                            int(w.get("consumers", 1)), float(w.get("sample_interval_s", 0.25)),
                            int(w.get("message_timeout_ms", 30_000)), w.get("create_topics_every_s"),
                            int(_get(w, "group_consumers", int, 0, "workload")),
                            _get(w, "group_bounce_every_s", (int, float), None, "workload"))
    workload = _with_transactions(workload, w, {t.name for t in topics})
    workload = dataclasses.replace(workload, consumer_members=int(_get(w, "consumer_members", int, 0, "workload")),
                                   share_members=int(_get(w, "share_members", int, 0, "workload")))
    if workload.consumer_members < 0 or workload.share_members < 0:
        raise ScenarioError("workload.consumer_members, share_members: expected 0 or more members")
    client_rack = _get(w, "client_rack", str, None, "workload")
    if client_rack is not None:
        workload = dataclasses.replace(workload, client_rack=str(client_rack))
    if workload.topic not in {t.name for t in topics}:
        raise ScenarioError(f"workload.topic: {workload.topic!r} is not one of the scenario's topics")
    if workload.group_consumers < 0:
        raise ScenarioError("workload.group_consumers: expected 0 or more members")
    if workload.group_bounce_every_s is not None and not workload.group_bounce_every_s > 0:
        raise ScenarioError("workload.group_bounce_every_s: expected a positive number of seconds")
    if cluster.security is not None and workload.txn_held:  # the hold proxy redirects the Kafka ports only
        raise ScenarioError("cluster.security: held transactional clients (txn_held) run PLAINTEXT only")
    if workload.acks is Acks.LEADER and workload.idempotence:
        raise ScenarioError("workload: acks=1 needs idempotence = false (Kafka requires acks=all for it)")
    e = _get(raw, "expect", dict, {}, "")
    expect = Expectations(_enum(LossPolicy, e.get("lost", "none"), "expect.lost"), int(e.get("min_lost", 0)),
                          e.get("unclean_elections"), e.get("max_unavailable_s"), e.get("min_unavailable_s"),
                          int(e.get("min_acked", 1)), tuple(e.get("allow", ())),
                          bool(e.get("isr_shrink_expand", False)), bool(e.get("stays_online", False)),
                          bool(e.get("stable_controller", False)))
    unknown = set(e) - {f.name for f in dataclasses.fields(Expectations)}
    if unknown:
        raise ScenarioError(f"expect: unknown keys {sorted(unknown)}")
    g = raw.get("generator")
    generator = None if g is None else GeneratorSpec(
        int(g.get("seed", 0)), int(g.get("faults", 6)),
        tuple(_enum(FaultAction, a, "generator.actions") for a in g.get("actions", ["kill", "pause", "partition"])),
        float(g.get("min_duration_s", 2.0)), float(g.get("max_duration_s", 6.0)), float(g.get("gap_s", 6.0)))
    faults = tuple(_fault(f, f"faults[{i}]") for i, f in enumerate(_get(raw, "faults", list, [], "")))
    return Scenario(str(raw.get("name", name)), str(raw.get("summary", "")),
                    float(_get(raw, "duration_s", (int, float), 30.0, "")), cluster, topics, workload, faults,
                    expect, generator, float(_get(raw, "settle_s", (int, float), 60.0, "")), text)


def load_scenario(path: Path) -> Scenario:
    return parse_scenario(path.read_text(encoding="utf-8"), name=path.stem)
