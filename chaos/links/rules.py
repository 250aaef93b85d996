"""The commands of link faults, built without running them: iptables and tc arguments, the
`ss -K` filter, and each fault's parameters checked (a bad one is a LinkParamError naming it).

A link's packets are chaos.nemeses.links.PacketMatch values (source address, destination
address, port, whether the port is the destination's). A *connection* of the link is a match
whose port is the destination's: the client's address, the server's address, its service port.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from chaos.nemeses.links import PacketMatch

FILTER_CHAIN: Final = "TIDELOG-LINK"  # each run's loss chain is FILTER_CHAIN-<pid> (filter table)
NAT_CHAIN: Final = "TIDELOG-LINKNAT"  # each run's redirect chain is NAT_CHAIN-<pid> (nat table)
PROXY_ADDRESS: Final = "127.0.0.252"  # no node of a local cluster uses it (nodes are 127.0.0.1..N)
PROXY_MARK: Final = 0x7C2D  # SO_MARK of the proxy's own upstream sockets: the redirect skips them
DEVICE: Final = "lo"
QDISC_MAJOR: Final = "7c2d"  # our HTB root on lo; 7c1d: is chaos.nemeses.firewall's netem prio
DEFAULT_MINOR: Final = 1  # the unlimited class every other packet of the machine goes through
FIRST_LINK_MINOR: Final = 0x10  # link classes and their filters' priorities: 0x10 and up
LAST_LINK_MINOR: Final = 0xFFF
UNLIMITED_RATE: Final = "100gbit"  # above loopback's throughput: the default class shapes nothing
DEFAULT_QUANTUM_BYTES: Final = 200_000  # HTB's per-round share; above lo's 64 KiB packets
BURST_S: Final = 0.01  # a link class may send 10 ms of its rate at once (plus one packet)
LO_MAX_PACKET_BYTES: Final = 65_536  # lo's MTU: HTB must let one such packet through in a burst

MAX_DELAY_MS: Final = 60_000
MIN_RATE_KBIT: Final = 8  # 1 kB/s: slower than this a link is cut, use `partition`
MAX_RATE_KBIT: Final = 10_000_000  # 10 Gbit/s


class LinkParamError(ValueError):
    """A link fault's parameter out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class DelayParams:
    delay_ms: float  # each direction's bytes, so a round trip gains twice this
    jitter_ms: float = 0.0  # each chunk's delay is uniform in delay_ms ± jitter_ms (order kept)
    close_delay_ms: float = 0.0  # a FIN (either way) held this much longer: slow close


def _number(params: Mapping[str, Any], name: str, default: float | None, low: float, high: float) -> float:
    value = params.get(name, default)
    if value is None:
        raise LinkParamError(f"params.{name}: required")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LinkParamError(f"params.{name}: expected a number, got {value!r}")
    if not low <= value <= high:
        raise LinkParamError(f"params.{name}: expected {low:g}..{high:g}, got {value!r}")
    return float(value)


def delay_params(params: Mapping[str, Any]) -> DelayParams:
    delay = _number(params, "delay_ms", None, 0, MAX_DELAY_MS)
    jitter = _number(params, "jitter_ms", 0.0, 0, MAX_DELAY_MS)
    if jitter > delay:
        raise LinkParamError(f"params.jitter_ms: at most delay_ms ({delay:g}), got {jitter:g}")
    return DelayParams(delay, jitter)


def slow_close_params(params: Mapping[str, Any]) -> DelayParams:
    return DelayParams(0.0, 0.0, _number(params, "delay_ms", None, 0, MAX_DELAY_MS))


def rate_kbit(params: Mapping[str, Any]) -> int:
    return int(_number(params, "rate_kbit", None, MIN_RATE_KBIT, MAX_RATE_KBIT))


def loss_probability(params: Mapping[str, Any]) -> float:
    return _number(params, "loss_pct", None, 0, 100) / 100


def connections(matches: Sequence[PacketMatch]) -> list[PacketMatch]:
    """The matches that name a connection's start (client -> server's service port)."""
    return [m for m in matches if m.port_is_destination]


def redirect_rule(connection: PacketMatch, proxy_port: int) -> list[str]:
    """A nat OUTPUT rule sending the connection's packets to the proxy (not the proxy's own)."""
    return [*connection.iptables_args(), "-m", "mark", "!", "--mark", hex(PROXY_MARK), "-j", "DNAT",
            "--to-destination", f"{PROXY_ADDRESS}:{proxy_port}"]


def loss_rule(match: PacketMatch, probability: float) -> list[str]:
    return [*match.iptables_args(), "-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}",
            "-j", "DROP"]


def count_rule(match: PacketMatch) -> list[str]:
    """A rule without a target: it only counts the match's packets."""
    return match.iptables_args()


def loss_counts(listing: str, matches: Sequence[PacketMatch]) -> tuple[int, int]:
    """(packets seen, packets dropped) from `iptables -S CHAIN -v` for a loss fault's matches: a
    counting rule's packets are seen, a DROP rule's dropped. iptables lists a rule's matches with
    their module (`-m tcp`) and its own rounding of the probability, so a listed rule is
    recognised by the words of its match."""
    seen = dropped = 0
    wanted = [set(m.iptables_args()) for m in matches]
    for line in listing.splitlines():
        words = line.split()
        if not words or words[0] != "-A" or "-c" not in words:
            continue
        at = words.index("-c")
        body = set(words[:at]) | set(words[at + 3:])
        if any(w <= body for w in wanted):
            if "DROP" in body:
                dropped += int(words[at + 1])
            else:
                seen += int(words[at + 1])
    return seen, dropped


def kill_filter(connection: PacketMatch) -> list[str]:
    """`ss -K` arguments resetting the connection's established sockets (not the proxy's own)."""
    return ["ss", "-K", "-t", "src", connection.source, "dst", connection.destination, "dport", "=",
            f":{connection.port}", "fwmark", "!=", hex(PROXY_MARK)]


def qdisc_handle() -> str:
    return f"{QDISC_MAJOR}:"


def root_commands() -> list[list[str]]:
    """The HTB root on lo and its unlimited default class."""
    return [["tc", "qdisc", "add", "dev", DEVICE, "root", "handle", qdisc_handle(), "htb", "default",
             str(DEFAULT_MINOR)],
            ["tc", "class", "add", "dev", DEVICE, "parent", qdisc_handle(), "classid", f"{QDISC_MAJOR}:{DEFAULT_MINOR}",
             "htb", "rate", UNLIMITED_RATE, "quantum", str(DEFAULT_QUANTUM_BYTES)]]


def burst_bytes(kbit_per_s: int) -> int:
    return LO_MAX_PACKET_BYTES + int(kbit_per_s * 1000 / 8 * BURST_S)


def class_commands(minor: int, kbit_per_s: int, matches: Sequence[PacketMatch]) -> list[list[str]]:
    """One shaped class at `kbit_per_s` (rate = ceil: it never borrows) and a filter per match,
    all at priority `minor` so that one `tc filter del ... prio` removes them."""
    if not FIRST_LINK_MINOR <= minor <= LAST_LINK_MINOR:
        raise ValueError(f"class minor {minor:#x} outside {FIRST_LINK_MINOR:#x}..{LAST_LINK_MINOR:#x}")
    classid = f"{QDISC_MAJOR}:{minor:x}"
    burst = str(burst_bytes(kbit_per_s))
    commands = [["tc", "class", "add", "dev", DEVICE, "parent", qdisc_handle(), "classid", classid, "htb", "rate",
                 f"{kbit_per_s}kbit", "ceil", f"{kbit_per_s}kbit", "burst", burst, "cburst", burst,
                 "quantum", str(LO_MAX_PACKET_BYTES)]]
    for m in matches:
        commands.append(["tc", "filter", "add", "dev", DEVICE, "parent", qdisc_handle(), "protocol", "ip", "prio",
                         str(minor), "u32", *m.u32_args(), "flowid", classid])
    return commands


def class_removal(minor: int) -> list[list[str]]:
    return [["tc", "filter", "del", "dev", DEVICE, "parent", qdisc_handle(), "protocol", "ip", "prio", str(minor)],
            ["tc", "class", "del", "dev", DEVICE, "classid", f"{QDISC_MAJOR}:{minor:x}"]]


def used_minors(class_listing: str) -> set[int]:
    """The link classes in `tc class show dev lo` output."""
    minors = set()
    prefix = f"{QDISC_MAJOR}:"
    for line in class_listing.splitlines():
        words = line.split()
        if len(words) > 2 and words[0] == "class" and words[2].startswith(prefix):
            minor = int(words[2][len(prefix):], 16)
            if minor != DEFAULT_MINOR:
                minors.add(minor)
    return minors


def free_minor(used: set[int]) -> int:
    for minor in range(FIRST_LINK_MINOR, LAST_LINK_MINOR + 1):  # bounded: 4080 classes
        if minor not in used:
            return minor
    raise RuntimeError(f"every link class {FIRST_LINK_MINOR:#x}..{LAST_LINK_MINOR:#x} on {DEVICE} is in use")


def by_direction(matches: Sequence[PacketMatch]) -> dict[tuple[str, str], list[PacketMatch]]:
    """Matches grouped by (source, destination): each direction of a link is shaped on its own."""
    grouped: dict[tuple[str, str], list[PacketMatch]] = {}
    for m in matches:
        grouped.setdefault((m.source, m.destination), []).append(m)
    return dict(sorted(grouped.items()))
