"""Hosts as Linux network namespaces: each node its own network stack, joined to the others by a
veth pair to a bridge, on an address of 198.18.0.0/15 (RFC 2544's benchmark range, routed nowhere).

    network = HostNetwork.create(["c1", "c2", "b1", "client"])     # needs root and `ip netns`
    network.popen("c1", [sys.executable, "-m", "tidelog", ...])    # the unchanged node command
    with network.entered("client"):                                # this thread's sockets: in "client"
        ...
    network.remove()                                               # every namespace, veth, bridge

Every namespace a run makes is named `tidelog-<run id>-<host>` (the run id: the creator's pid and
random hex), so parallel runs never collide, and `leftover_runs` finds the runs whose creator is
gone and whose namespaces hold no process any more (`tidelog hosts clean` removes them). The
bridge lives in a namespace of its own (`tidelog-<run id>-bridge`), never in the machine's: the
root namespace gets no interface, no address and no route, and nothing is bridged to a real
interface. Interface names need no prefix: each lives in a namespace of this run only.

Planning (names, addresses, the `ip` commands) is pure; `HostNetwork` runs the commands.
Entering a namespace is setns(2) through ctypes on /var/run/netns/<name> (Python 3.11 has no
`os.setns`): it moves only the calling thread, keeps the process (its signals, stdin, pid), and
threads it starts afterwards (librdkafka's, kafka-python's heartbeat) inherit the namespace.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from common.processes import pid_exists
from common.units import SECONDS

NAMESPACE_PREFIX: Final = "tidelog-"
NETNS_DIR: Final = Path("/var/run/netns")
HOST_NETWORK: Final = ipaddress.IPv4Network("198.18.0.0/15")  # RFC 2544: benchmark tests, routed nowhere
FIRST_HOST_OFFSET: Final = 10  # hosts from 198.18.0.10: the first addresses stay free for a gateway
MAX_HOSTS: Final = 200
BRIDGE_HOST: Final = "bridge"
BRIDGE_DEVICE: Final = "br0"
HOST_DEVICE: Final = "eth0"  # the node's end of its veth, inside its own namespace
IP_TIMEOUT: Final = 10 * SECONDS  # one `ip` command; they take milliseconds
CLONE_NEWNET: Final = 0x40000000
_HOST_NAME = re.compile(r"[a-z0-9]{1,12}")  # also the bridge-side veth's name: 15 characters at most
_RUN_ID = re.compile(r"(?P<pid>[0-9]{1,10})x(?P<tag>[0-9a-f]{6})")
_NAMESPACE = re.compile(rf"{NAMESPACE_PREFIX}(?P<run>{_RUN_ID.pattern})-(?P<host>[a-z0-9]+)")

log = logging.getLogger(__name__)


class NetnsError(RuntimeError):
    """A namespace could not be made, entered or removed; the message names the command and why."""


# --- the plan (pure) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    namespace: str
    address: str  # inside its namespace only


@dataclass(frozen=True, slots=True)
class NetworkPlan:
    run_id: str
    bridge_namespace: str
    hosts: tuple[Host, ...]

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace of the run, hosts first (removed before the bridge)."""
        return (*(h.namespace for h in self.hosts), self.bridge_namespace)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise NetnsError(f"no host {name!r} in run {self.run_id} (hosts: {', '.join(h.name for h in self.hosts)})")

    def to_document(self) -> dict[str, Any]:
        """The `hosts` entry of cluster.json."""
        return {"kind": "netns", "run_id": self.run_id, "bridge_namespace": self.bridge_namespace,
                "hosts": {h.name: {"namespace": h.namespace, "address": h.address} for h in self.hosts}}

    @classmethod
    def from_document(cls, document: object) -> NetworkPlan:
        """The plan a cluster.json `hosts` entry records; NetnsError naming what is malformed."""
        try:
            assert isinstance(document, dict) and document["kind"] == "netns"
            hosts = tuple(Host(str(name), str(h["namespace"]), str(h["address"]))
                          for name, h in document["hosts"].items())
            plan = cls(str(document["run_id"]), str(document["bridge_namespace"]), hosts)
        except (AssertionError, KeyError, TypeError, AttributeError) as exc:
            raise NetnsError(f"cluster.json: a malformed hosts entry {document!r:.200} ({exc!r})") from None
        for namespace in plan.namespaces:
            if not _NAMESPACE.fullmatch(namespace):
                raise NetnsError(f"cluster.json: {namespace!r} is not a tidelog namespace name")
        return plan


def new_run_id(pid: int, tag: str | None = None) -> str:
    """`<pid>x<6 hex>`: the creator's pid (to tell dead runs) and randomness (a recycled pid)."""
    return f"{pid}x{tag if tag is not None else secrets.token_hex(3)}"


def namespace_name(run_id: str, host: str) -> str:
    return f"{NAMESPACE_PREFIX}{run_id}-{host}"


def plan_network(run_id: str, names: Sequence[str]) -> NetworkPlan:
    """One namespace per host name (in order: addresses 198.18.0.10, .11, ...) and the bridge's."""
    if not _RUN_ID.fullmatch(run_id):
        raise NetnsError(f"run id {run_id!r} is not <pid>x<6 hex>")
    if not 1 <= len(names) <= MAX_HOSTS:
        raise NetnsError(f"a network has 1 to {MAX_HOSTS} hosts, asked for {len(names)}")
    if len(set(names)) != len(names):
        raise NetnsError(f"host names repeat: {sorted(names)}")
    for name in names:
        if not _HOST_NAME.fullmatch(name) or name == BRIDGE_HOST:
            raise NetnsError(f"host name {name!r} must be 1-12 lowercase letters or digits, not {BRIDGE_HOST!r}")
    base = int(HOST_NETWORK.network_address) + FIRST_HOST_OFFSET
    hosts = tuple(Host(name, namespace_name(run_id, name), str(ipaddress.IPv4Address(base + i)))
                  for i, name in enumerate(names))
    return NetworkPlan(run_id, namespace_name(run_id, BRIDGE_HOST), hosts)


def setup_commands(plan: NetworkPlan) -> list[list[str]]:
    """The `ip` commands that build `plan`: namespaces, the bridge, one veth pair per host made
    with both ends already in their namespaces (the root namespace never holds one), addresses."""
    bridge = plan.bridge_namespace
    commands = [["ip", "netns", "add", ns] for ns in plan.namespaces]
    commands += [["ip", "-n", bridge, "link", "add", BRIDGE_DEVICE, "type", "bridge"],
                 ["ip", "-n", bridge, "link", "set", BRIDGE_DEVICE, "up"]]
    prefix = HOST_NETWORK.prefixlen
    for host in plan.hosts:
        port = f"v{host.name}"
        commands += [
            ["ip", "link", "add", HOST_DEVICE, "netns", host.namespace, "type", "veth",
             "peer", "name", port, "netns", bridge],
            ["ip", "-n", bridge, "link", "set", port, "master", BRIDGE_DEVICE],
            ["ip", "-n", bridge, "link", "set", port, "up"],
            ["ip", "-n", host.namespace, "link", "set", "lo", "up"],
            ["ip", "-n", host.namespace, "addr", "add", f"{host.address}/{prefix}", "dev", HOST_DEVICE],
            ["ip", "-n", host.namespace, "link", "set", HOST_DEVICE, "up"],
        ]
    return commands


def parse_namespace_list(text: str) -> list[str]:
    """Names in `ip netns list` output ("name" or "name (id: 3)" per line)."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def runs_of(namespaces: Sequence[str]) -> dict[str, list[str]]:
    """run id -> its namespaces, for the tidelog namespaces among `namespaces` (others are ignored)."""
    runs: dict[str, list[str]] = {}
    for name in sorted(namespaces):
        match = _NAMESPACE.fullmatch(name)
        if match:
            runs.setdefault(match["run"], []).append(name)
    return runs


def run_creator(run_id: str) -> int:
    match = _RUN_ID.fullmatch(run_id)
    if match is None:
        raise NetnsError(f"run id {run_id!r} is not <pid>x<6 hex>")
    return int(match["pid"])


def dead_runs(runs: Mapping[str, Sequence[str]], *, creator_alive: Mapping[str, bool],
              busy: Mapping[str, bool]) -> list[str]:
    """The runs to remove: creator gone and no process left in any of their namespaces (a detached
    `tidelog up` outlives its creator: its nodes keep it)."""
    return [run for run in sorted(runs) if not creator_alive.get(run, False)
            and not any(busy.get(ns, False) for ns in runs[run])]


# --- the shell: `ip`, setns(2) -----------------------------------------------------------------


def available() -> str | None:
    """None when namespaces can be made here, else why not (a test's skip reason)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    try:
        _ip(["ip", "netns", "list"])
    except NetnsError as exc:
        return f"`ip netns` does not work here: {exc}"
    return None


def _ip(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=IP_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(argv)}: {exc}") from None
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def list_namespaces() -> list[str]:
    return parse_namespace_list(_ip(["ip", "netns", "list"]))


def namespace_pids(namespace: str) -> list[int]:
    try:
        return [int(p) for p in _ip(["ip", "netns", "pids", namespace]).split()]
    except NetnsError:  # gone already
        return []


def delete_namespaces(namespaces: Sequence[str]) -> list[str]:
    """`ip netns del` each that exists (its veth end goes with it; the bridge with the bridge's);
    the errors, one line each (one failure does not spare the others)."""
    present = set(list_namespaces())
    errors = []
    for namespace in namespaces:
        if namespace in present:
            try:
                _ip(["ip", "netns", "del", namespace])
            except NetnsError as exc:
                errors.append(str(exc))
    return errors


def clean_dead_runs() -> list[str]:
    """Remove the namespaces of every dead run (see `dead_runs`); the run ids removed."""
    runs = runs_of(list_namespaces())
    alive = {run: pid_exists(run_creator(run)) for run in runs}
    busy = {ns: bool(namespace_pids(ns)) for names in runs.values() for ns in names}
    removed = dead_runs(runs, creator_alive=alive, busy=busy)
    for run in removed:
        hosts_first = sorted(runs[run], key=lambda ns: ns.endswith(f"-{BRIDGE_HOST}"))
        for error in delete_namespaces(hosts_first):
            log.warning("removing run %s: %s", run, error)
        log.info("removed the namespaces of dead run %s: %s", run, " ".join(hosts_first))
    return removed


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetnsError(f"setns: {os.strerror(err)}")


@contextmanager
def entered_namespace(namespace: str) -> Iterator[None]:
    """The calling thread in `namespace` while inside, back in its own namespace after."""
    own = os.open(f"/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            target = os.open(NETNS_DIR / namespace, os.O_RDONLY)
        except OSError as exc:
            raise NetnsError(f"cannot open namespace {namespace}: {exc.strerror}") from None
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


def enter_namespace_for_good(namespace: str) -> None:
    """Move the calling thread (a CLI's main thread, before it starts any) into `namespace`."""
    try:
        target = os.open(NETNS_DIR / namespace, os.O_RDONLY)
    except OSError as exc:
        raise NetnsError(f"cannot open namespace {namespace}: {exc.strerror} (is the cluster still up?)") from None
    try:
        _setns(target)
    finally:
        os.close(target)


class HostNetwork:
    """The namespaces of one run, made by `create`; `remove()` takes them all away."""

    def __init__(self, plan: NetworkPlan) -> None:
        self.plan = plan

    @classmethod
    def create(cls, names: Sequence[str], *, run_id: str | None = None) -> HostNetwork:
        plan = plan_network(run_id or new_run_id(os.getpid()), names)
        network = cls(plan)
        try:
            for command in setup_commands(plan):
                _ip(command)
        except BaseException:
            network.remove()
            raise
        log.info("network %s: bridge namespace %s, hosts %s", plan.run_id, plan.bridge_namespace,
                 ", ".join(f"{h.name}={h.address}" for h in plan.hosts))
        return network

    def address(self, name: str) -> str:
        return self.plan.host(name).address

    def namespace(self, name: str) -> str:
        return self.plan.host(name).namespace

    def command(self, name: str, argv: Sequence[str]) -> list[str]:
        """`argv` run inside host `name`'s namespace (`ip netns exec` execs it: the pid is argv's)."""
        return ["ip", "netns", "exec", self.namespace(name), *argv]

    def popen(self, name: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command(name, argv), **kwargs)

    @contextmanager
    def entered(self, name: str) -> Iterator[None]:
        with entered_namespace(self.namespace(name)):
            yield

    def remaining(self) -> list[str]:
        """The namespaces of this run that still exist (after `remove()`: none)."""
        return [ns for ns in list_namespaces() if ns in self.plan.namespaces]

    def remove(self) -> None:
        """Delete every namespace of the run (hosts first, the bridge last); NetnsError if any stays."""
        errors = delete_namespaces(self.plan.namespaces)
        if errors:
            raise NetnsError("; ".join(errors))
        log.info("network %s removed", self.plan.run_id)
