"""Install and remove link faults: the run's iptables chains (filter: loss; nat: redirects to the
delay proxy), the HTB classes on lo, and the proxy. Every fault returns a handle; `remove`
undoes exactly that fault, `close` every fault, the chains and (when no other live run shapes)
the root qdisc. `clean` removes what crashed runs left (`tidelog chaos clean`: everything).

Chains carry their process's pid (TIDELOG-LINK-<pid>, TIDELOG-LINKNAT-<pid>): a run's chains
mark it alive, so one run's clean never removes another live run's faults.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

from chaos.links import rules
from chaos.links.proxy import LinkProxy, link_key
from chaos.links.rules import DelayParams
from chaos.nemeses.links import PacketMatch
from common.limits import COMMAND_TIMEOUT_S

log = logging.getLogger(__name__)

IPTABLES_LOCK_WAIT_S: Final = "5"
TABLES: Final = (("filter", rules.FILTER_CHAIN), ("nat", rules.NAT_CHAIN))


def _run(args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _iptables(table: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["iptables", "-w", IPTABLES_LOCK_WAIT_S, "-t", table, *args], check=check)


def missing() -> str | None:
    """Why link faults cannot run here, or None."""
    if os.geteuid() != 0:
        return "link faults need root (iptables, tc); skipped"
    for tool, package in (("iptables", "iptables"), ("tc", "iproute2"), ("ss", "iproute2")):
        if shutil.which(tool) is None:
            return f"link faults need {tool} (apt-get install {package}); skipped"
    return None


def _chains(table: str, prefix: str) -> list[str]:
    listed = _iptables(table, "-S", check=False).stdout.splitlines()
    return sorted(line.split()[1] for line in listed if line.startswith(f"-N {prefix}-"))


def _alive(chain: str) -> bool:
    pid = chain.rsplit("-", 1)[1]
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def _drop_chain(table: str, chain: str) -> None:
    while _iptables(table, "-D", "OUTPUT", "-j", chain, check=False).returncode == 0:  # one jump per open
        pass
    _iptables(table, "-F", chain, check=False)
    _iptables(table, "-X", chain, check=False)


def _qdisc_installed() -> bool:
    return rules.qdisc_handle() in _run(["tc", "qdisc", "show", "dev", rules.DEVICE], check=False).stdout


def _drop_root() -> None:
    _run(["tc", "qdisc", "del", "dev", rules.DEVICE, "root", "handle", rules.qdisc_handle()], check=False)


def clean(*, everything: bool = False) -> list[str]:
    """Remove the chains of runs whose process is gone (every run's with `everything`), and the
    root qdisc once no live run is left; what was removed."""
    if missing() is not None:
        return []
    removed = []
    for table, prefix in TABLES:
        for chain in _chains(table, prefix):
            if everything or not _alive(chain):
                _drop_chain(table, chain)
                removed.append(f"iptables {table} chain {chain}")
    if _qdisc_installed() and (everything or not any(_alive(c) for c in _chains("filter", rules.FILTER_CHAIN))):
        _drop_root()
        removed.append(f"qdisc {rules.qdisc_handle()} on {rules.DEVICE}")
    for what in removed:
        log.info("chaos clean: removed %s", what)
    return removed


def leftovers() -> list[str]:
    """What a crashed run (or this process, outside a LinkFaults block) left installed."""
    if missing() is not None:
        return []
    found = [f"iptables {table} chain {c}" for table, prefix in TABLES for c in _chains(table, prefix)
             if not _alive(c) or c.endswith(f"-{os.getpid()}")]
    if _qdisc_installed() and not any(_alive(c) for c in _chains("filter", rules.FILTER_CHAIN)):
        found.append(f"qdisc {rules.qdisc_handle()} on {rules.DEVICE}")
    return found


def state() -> tuple[str, str, str, str]:
    """The machine's iptables (filter, nat) rules and lo's qdiscs and classes, for before/after checks."""
    return (_iptables("filter", "-S", check=False).stdout, _iptables("nat", "-S", check=False).stdout,
            _run(["tc", "qdisc", "show", "dev", rules.DEVICE], check=False).stdout,
            _run(["tc", "class", "show", "dev", rules.DEVICE], check=False).stdout)


@dataclass(slots=True)
class _Installed:
    kind: str
    nat_rules: list[list[str]] = field(default_factory=list)
    filter_rules: list[list[str]] = field(default_factory=list)
    lossy: list[PacketMatch] = field(default_factory=list)
    minors: list[int] = field(default_factory=list)
    proxied: list[PacketMatch] = field(default_factory=list)


class LinkFaults:
    """The link faults of one run; `close` (or leaving the block) removes every one."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.chains = {table: f"{prefix}-{pid}" for table, prefix in TABLES}
        self._faults: dict[int, _Installed] = {}
        self._next = 0
        self._proxy: LinkProxy | None = None

    @classmethod
    def open(cls) -> LinkFaults:
        why = missing()
        if why is not None:
            raise RuntimeError(why)
        clean()  # a crashed run's rules would otherwise keep slowing links
        faults = cls()
        try:
            for table, chain in faults.chains.items():
                if chain not in _chains(table, chain.rsplit("-", 1)[0]):
                    _iptables(table, "-N", chain)
                    _iptables(table, "-I", "OUTPUT", "1", "-j", chain)
        except BaseException:
            faults.close()
            raise
        log.info("chaos: link fault chains %s created", sorted(faults.chains.values()))
        return faults

    def _add(self, installed: _Installed) -> int:
        self._next += 1
        self._faults[self._next] = installed
        return self._next

    def delay(self, matches: Sequence[PacketMatch], params: DelayParams, *, seed: int) -> int:
        """Every connection of the link relayed by the proxy with `params`; the link's established
        connections reset, so that they reconnect through it."""
        if self._proxy is None:
            self._proxy = LinkProxy.start()
        installed = _Installed("delay")
        handle = self._add(installed)
        for connection in rules.connections(matches):
            self._proxy.set_link(connection, params, seed=seed)
            installed.proxied.append(connection)
            rule = rules.redirect_rule(connection, self._proxy.port)
            _iptables("nat", "-A", self.chains["nat"], *rule)
            installed.nat_rules.append(rule)
        for connection in installed.proxied:
            _run(rules.kill_filter(connection), check=False)  # none established is fine
        log.info("chaos: link fault %d: %d connections via the proxy (delay %g±%g ms, close delay %g ms)", handle,
                 len(installed.proxied), params.delay_ms, params.jitter_ms, params.close_delay_ms)
        return handle

    def bandwidth(self, matches: Sequence[PacketMatch], kbit_per_s: int) -> int:
        """Each direction of the link's packets limited to `kbit_per_s` on its own HTB class."""
        installed = _Installed("bandwidth")
        handle = self._add(installed)
        if not _qdisc_installed():
            for command in rules.root_commands():
                _run(command)
        for direction in rules.by_direction(matches).values():
            used = rules.used_minors(_run(["tc", "class", "show", "dev", rules.DEVICE]).stdout)
            minor = rules.free_minor(used)
            installed.minors.append(minor)
            for command in rules.class_commands(minor, kbit_per_s, direction):
                _run(command)
        log.info("chaos: link fault %d: %d directions shaped to %d kbit/s", handle, len(installed.minors), kbit_per_s)
        return handle

    def loss(self, matches: Sequence[PacketMatch], probability: float) -> int:
        """Each of the link's packets dropped with `probability`, independently."""
        installed = _Installed("loss")
        handle = self._add(installed)
        installed.lossy = list(matches)
        for m in matches:  # a counting rule before each drop: `loss_counters` reports what was lost
            for rule in (rules.count_rule(m), rules.loss_rule(m, probability)):
                _iptables("filter", "-A", self.chains["filter"], *rule)
                installed.filter_rules.append(rule)
        log.info("chaos: link fault %d: %d packet matches lose %.1f %%", handle, len(matches), probability * 100)
        return handle

    def loss_counters(self, handle: int) -> tuple[int, int]:
        """(packets seen, packets dropped) by a loss fault so far."""
        installed = self._faults.get(handle)
        if installed is None or installed.kind != "loss":
            raise KeyError(f"no loss fault {handle}")
        listing = _iptables("filter", "-S", self.chains["filter"], "-v").stdout
        return rules.loss_counts(listing, installed.lossy)

    def relayed(self, handle: int) -> int:
        """How many connections a delay or slow-close fault's proxy relayed so far."""
        installed = self._faults.get(handle)
        if installed is None or self._proxy is None:
            return 0
        return sum(self._proxy.accepted.get(link_key(c), 0) for c in installed.proxied)

    def remove(self, handle: int) -> None:
        installed = self._faults.pop(handle, None)
        if installed is None:
            return
        for rule in installed.nat_rules:
            _iptables("nat", "-D", self.chains["nat"], *rule, check=False)
        for rule in installed.filter_rules:
            _iptables("filter", "-D", self.chains["filter"], *rule, check=False)
        for minor in installed.minors:
            for command in rules.class_removal(minor):
                _run(command, check=False)
        if self._proxy is not None:
            for connection in installed.proxied:
                self._proxy.forget_link(connection)
        for connection in installed.proxied:
            # A connection opened through the proxy keeps its NAT entry after the redirect is gone:
            # reset it here, or a client that missed the proxy's abort stalls on it until its own
            # timeout (replica.socket.timeout.ms: a 5.5 s stall measured after a heal).
            _run(rules.kill_filter(connection), check=False)  # none established is fine
        log.info("chaos: link fault %d (%s) removed", handle, installed.kind)

    def close(self) -> None:
        for handle in sorted(self._faults):
            self.remove(handle)
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        for table, chain in self.chains.items():
            _drop_chain(table, chain)
        if _qdisc_installed() and not any(_alive(c) for c in _chains("filter", rules.FILTER_CHAIN)):
            _drop_root()

    def __enter__(self) -> LinkFaults:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
