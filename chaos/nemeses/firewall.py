"""Network faults with an iptables chain of the harness's own, and tc netem on chosen pairs.

    with Firewall.open() as firewall:            # creates chain TIDELOG-CHAOS-<n>-<pid>, jumped to from OUTPUT
        handle = firewall.drop(matches)          # matches from chaos.nemeses.links
        firewall.remove(handle)
    # leaving the block deletes every rule, the jump and the chain; so does `tidelog chaos clean`

Loopback packets pass OUTPUT once, so one DROP rule there cuts a link. Rules never leave
the chain: removing our chain removes every trace. Slow links: a `prio` root qdisc on lo
whose default band passes everything untouched, a netem child on one band, and u32
filters that send only the chosen pairs' packets there; removing that root qdisc (tagged
by its handle) restores lo. Without root or the tools, `available()` says why, and the
engine skips those faults with one line.
"""

from __future__ import annotations

from common.limits import COMMAND_TIMEOUT_S
import functools
import itertools
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

from chaos.nemeses.links import CHAIN, PacketMatch

log = logging.getLogger(__name__)

QDISC_HANDLE: Final = "7c1d:"  # our root qdisc on lo; nothing else on the machine uses it
NETEM_BAND: Final = "7c1d:1"
IPTABLES_LOCK_WAIT_S: Final = "5"
# bands 1-3; the priomap sends all ordinary traffic to band 3 (7c1d:3), untouched
_SERIAL: Final = itertools.count(1)  # chains of one process: TIDELOG-CHAOS-<n>-<pid>
PRIO_ARGS: Final = ("prio", "bands", "3", "priomap", *["2"] * 16)


def _run(args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["iptables", "-w", IPTABLES_LOCK_WAIT_S, *args], check=check)


def iptables_missing() -> str | None:
    """Why iptables faults cannot run here, or None."""
    if os.geteuid() != 0:
        return "network partitions need root (iptables); skipped"
    if shutil.which("iptables") is None:
        return "network partitions need iptables (apt-get install iptables); skipped"
    return None


@functools.cache
def tc_missing() -> str | None:
    """Why netem faults cannot run here, or None (probed once: the kernel may lack the qdiscs)."""
    if os.geteuid() != 0:
        return "slow links need root (tc netem); skipped"
    if shutil.which("tc") is None:
        return "slow links need tc (apt-get install iproute2); skipped"
    if QDISC_HANDLE in _run(["tc", "qdisc", "show", "dev", "lo"], check=False).stdout:
        return None  # ours, installed: the kernel has them
    # the probe's netem delays nothing (0 ms) and no filter sends packets to it; removed at once
    added = _run(["tc", "qdisc", "add", "dev", "lo", "root", "handle", QDISC_HANDLE, *PRIO_ARGS], check=False)
    if added.returncode == 0:
        added = _run(["tc", "qdisc", "add", "dev", "lo", "parent", NETEM_BAND, "handle", "7c1e:", "netem", "delay",
                      "0ms"], check=False)
        _run(["tc", "qdisc", "del", "dev", "lo", "root", "handle", QDISC_HANDLE], check=False)
    if added.returncode != 0:
        return (f"slow links need the kernel's prio and netem qdiscs (sch_prio, sch_netem): "
                f"{added.stderr.strip()}; skipped")
    return None


def chains() -> list[str]:
    """The harness's chains (one per run: CHAIN-<pid>)."""
    listed = _iptables("-S", check=False).stdout.splitlines()
    return sorted(line.split()[1] for line in listed if line.startswith(f"-N {CHAIN}-"))


def _another_live_run(chain: str, *, this_process: bool = False) -> bool:
    """The chain of a run still going in another process (or, with `this_process`, in this one)."""
    pid = chain.rsplit("-", 1)[1]
    if pid.isdigit() and int(pid) == os.getpid():
        return this_process
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def _qdisc_installed() -> bool:
    return bool(os.geteuid() == 0 and shutil.which("tc")
                and QDISC_HANDLE in _run(["tc", "qdisc", "show", "dev", "lo"], check=False).stdout)


def clean(*, everything: bool = False, keep_this_process: bool = False) -> list[str]:
    """Remove the harness's rules and qdisc left by crashed runs and by this process; what was
    removed. The chains of runs still going in other processes stay, unless `everything`
    (`tidelog chaos clean`): a second run must not heal the first one's faults."""
    removed: list[str] = []
    if iptables_missing() is None:
        for chain in chains():
            if not everything and _another_live_run(chain, this_process=keep_this_process):
                continue
            while _iptables("-D", "OUTPUT", "-j", chain, check=False).returncode == 0:  # one jump per open
                pass
            _iptables("-F", chain, check=False)
            _iptables("-X", chain, check=False)
            removed.append(f"iptables chain {chain}")
        from chaos.nemeses.hold import clean_nat  # the hold proxy's nat chains (chaos.nemeses.hold)

        removed += clean_nat(everything=everything)
    if _qdisc_installed() and (everything or not any(_another_live_run(c) for c in chains())):
        _run(["tc", "qdisc", "del", "dev", "lo", "root", "handle", QDISC_HANDLE], check=False)
        removed.append(f"qdisc {QDISC_HANDLE} on lo")
    for what in removed:
        log.info("chaos clean: removed %s", what)
    return removed


def leftovers() -> list[str]:
    """What of the harness this process or a crashed run left installed (empty after a clean end)."""
    found = ([f"iptables chain {c}" for c in chains() if not _another_live_run(c)]
             if iptables_missing() is None else [])
    if iptables_missing() is None:
        from chaos.nemeses.hold import nat_chains

        found += [f"iptables nat chain {c}" for c in nat_chains() if not _another_live_run(c)]
    if _qdisc_installed():
        found.append(f"qdisc {QDISC_HANDLE} on lo")
    return found


class Firewall:
    """The harness's chain; each fault adds DROP rules and removes exactly those at its heal."""

    def __init__(self, chain: str) -> None:
        self.chain = chain
        self._rules: dict[int, list[PacketMatch]] = {}
        self._netem: dict[int, tuple[list[PacketMatch], list[str]]] = {}
        self._next = 0
        self._qdisc = False

    @classmethod
    def open(cls) -> Firewall:
        clean(keep_this_process=True)  # a crashed run's chain would otherwise keep cutting links
        chain = f"{CHAIN}-{next(_SERIAL)}-{os.getpid()}"
        if iptables_missing() is None:
            _iptables("-N", chain)
            _iptables("-I", "OUTPUT", "1", "-j", chain)
            log.info("chaos: iptables chain %s created", chain)
        return cls(chain)

    def drop(self, matches: Sequence[PacketMatch]) -> int:
        self._next += 1
        self._rules[self._next] = list(matches)
        for m in matches:
            _iptables("-A", self.chain, *m.iptables_args(), "-j", "DROP")
        return self._next

    def remove(self, handle: int) -> None:
        for m in self._rules.pop(handle, []):
            _iptables("-D", self.chain, *m.iptables_args(), "-j", "DROP", check=False)

    def netem(self, matches: Sequence[PacketMatch], netem_args: Sequence[str]) -> int:
        """Delay/lose the matched packets only (one netem at a time: the band is shared)."""
        if not self._qdisc:
            _run(["tc", "qdisc", "add", "dev", "lo", "root", "handle", QDISC_HANDLE, *PRIO_ARGS])
            self._qdisc = True
        else:
            _run(["tc", "qdisc", "del", "dev", "lo", "parent", NETEM_BAND], check=False)
        _run(["tc", "qdisc", "add", "dev", "lo", "parent", NETEM_BAND, "handle", "7c1e:", "netem", *netem_args])
        for m in matches:
            _run(["tc", "filter", "add", "dev", "lo", "parent", QDISC_HANDLE, "protocol", "ip", "prio", "1",
                  "u32", *m.u32_args(), "flowid", NETEM_BAND])
        self._next += 1
        self._netem[self._next] = (list(matches), list(netem_args))
        return self._next

    def remove_netem(self, handle: int) -> None:
        self._netem.pop(handle, None)
        if self._qdisc:  # filters cannot be deleted one by one without their handles: drop the root
            _run(["tc", "qdisc", "del", "dev", "lo", "root", "handle", QDISC_HANDLE], check=False)
            self._qdisc = False

    def close(self) -> None:
        for handle in sorted(self._rules):
            self.remove(handle)
        for handle in sorted(self._netem):
            self.remove_netem(handle)
        if iptables_missing() is None:
            while _iptables("-D", "OUTPUT", "-j", self.chain, check=False).returncode == 0:  # one jump
                pass
            _iptables("-F", self.chain, check=False)
            _iptables("-X", self.chain, check=False)
        clean(keep_this_process=True)

    def __enter__(self) -> Firewall:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
