"""Network partitions between hosts of a namespaced cluster: iptables DROP rules inside the hosts'
own namespaces, so a cut acts on the hosts' real interfaces (their veths), not on loopback.

    partitions = HostPartitions(network)                    # a tidelog.hosts.netns.HostNetwork
    handle = partitions.cut(["node4"], ["node5", "node6"])  # both ways; one_way=True: only 4 -> 5, 6
    partitions.heal(handle)                                 # exactly that cut's rules go
    partitions.heal_all()

A two-way cut drops, in each host of one side, what it sends to the other side (OUTPUT -d) and
what it receives from it (INPUT -s): each host drops both directions itself, so the cut holds
even while a rule of the other host is being added or removed. A one-way cut drops the sender's
OUTPUT and the receiver's INPUT for that direction only (Jepsen's asymmetric partition). Hosts on
neither side (the client namespace, unless named) keep every link, so the workload still reaches
both sides, as in the loopback engine's partitions.

The rules live in the run's own namespaces, which no other run and nothing of the machine uses:
no chain of our own is needed to tell them apart, and deleting the namespaces (the cluster's
removal, its watchdog, `tidelog hosts clean`) removes every rule on every path. Planning is pure
(`cut_rules`, `rule_command`); `HostPartitions` runs the commands.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from common.units import SECONDS
from tidelog.hosts.netns import HostNetwork, NetnsError, NetworkPlan

log = logging.getLogger(__name__)

IPTABLES_LOCK_WAIT_S: Final = "5"  # iptables -w: each namespace has its own xtables lock
RULE_TIMEOUT: Final = 10 * SECONDS  # one `ip netns exec ... iptables`; it takes milliseconds


@dataclass(frozen=True, slots=True)
class HostRule:
    """One DROP rule in one host's namespace: `chain` is INPUT or OUTPUT, `peer` the other host's address."""

    namespace: str
    chain: str
    peer: str

    def spec(self) -> list[str]:
        direction = "-d" if self.chain == "OUTPUT" else "-s"
        return [self.chain, direction, f"{self.peer}/32", "-j", "DROP"]


def cut_rules(plan: NetworkPlan, side_a: Sequence[str], side_b: Sequence[str], *,
              one_way: bool = False) -> list[HostRule]:
    """The rules that cut every link between the hosts of `side_a` and `side_b` (with `one_way`,
    only what `side_a` sends to `side_b`); NetnsError naming an unknown host, ValueError for an
    empty side or a host on both sides."""
    if not side_a or not side_b:
        raise ValueError(f"a partition needs a host on each side, got {list(side_a)} / {list(side_b)}")
    both = sorted(set(side_a) & set(side_b))
    if both:
        raise ValueError(f"host(s) {', '.join(both)} on both sides of the partition")
    a_hosts = [plan.host(name) for name in sorted(set(side_a))]
    b_hosts = [plan.host(name) for name in sorted(set(side_b))]
    rules: list[HostRule] = []
    for a in a_hosts:
        for b in b_hosts:
            rules += [HostRule(a.namespace, "OUTPUT", b.address), HostRule(b.namespace, "INPUT", a.address)]
            if not one_way:
                rules += [HostRule(b.namespace, "OUTPUT", a.address), HostRule(a.namespace, "INPUT", b.address)]
    return rules


def rule_command(rule: HostRule, operation: str) -> list[str]:
    """`ip netns exec <ns> iptables -A|-D <rule>`."""
    if operation not in ("-A", "-D"):
        raise ValueError(f"operation {operation!r}: -A or -D")
    return ["ip", "netns", "exec", rule.namespace, "iptables", "-w", IPTABLES_LOCK_WAIT_S, operation, *rule.spec()]


def _run(command: Sequence[str]) -> None:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=RULE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(command)}: {exc}") from None
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")


class HostPartitions:
    """The partitions of one namespaced network; each `cut` is a handle that `heal` undoes."""

    def __init__(self, network: HostNetwork) -> None:
        self.network = network
        self._cuts: dict[int, list[HostRule]] = {}
        self._next = 0

    def cut(self, side_a: Sequence[str], side_b: Sequence[str], *, one_way: bool = False) -> int:
        """Drop every packet between the two sides' hosts (both ways unless `one_way`); the handle.
        A rule that fails is reported after the ones already added are removed again."""
        rules = cut_rules(self.network.plan, side_a, side_b, one_way=one_way)
        added: list[HostRule] = []
        try:
            for rule in rules:
                _run(rule_command(rule, "-A"))
                added.append(rule)
        except BaseException:
            self._delete(added)
            raise
        self._next += 1
        self._cuts[self._next] = rules
        log.info("hosts: partition %d of run %s: %s %s %s (%d rules)", self._next, self.network.plan.run_id,
                 ",".join(sorted(side_a)), "-/->" if one_way else "<-/->", ",".join(sorted(side_b)), len(rules))
        return self._next

    def heal(self, handle: int) -> None:
        """Remove exactly the rules of cut `handle` (nothing for an unknown or healed one)."""
        rules = self._cuts.pop(handle, None)
        if rules is None:
            return
        errors = self._delete(rules)
        log.info("hosts: partition %d of run %s healed", handle, self.network.plan.run_id)
        if errors:
            raise NetnsError("; ".join(errors))

    def heal_all(self) -> None:
        for handle in sorted(self._cuts):
            self.heal(handle)

    def active(self) -> list[int]:
        return sorted(self._cuts)

    @staticmethod
    def _delete(rules: Sequence[HostRule]) -> list[str]:
        """Delete each rule (one failure does not spare the others); the errors, one line each."""
        errors = []
        for rule in rules:
            try:
                _run(rule_command(rule, "-D"))
            except NetnsError as exc:
                errors.append(str(exc))
        return errors
