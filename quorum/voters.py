"""`controller.quorum.voters` as Kafka writes it: `1@127.0.0.1:9093,2@127.0.0.2:9093,...`.

Pure: strings in, `Voter`s out, every problem a `ConfigError` naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from common.config_schema import ConfigError
from common.limits import PORT_MAX

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

KEY = "controller.quorum.voters"
# host is a name or IPv4 address; IPv6 would need brackets, which pysyncobj's
# "host:port" node ids do not support (it splits at the last ':').
_VOTER = re.compile(r"(?P<id>[0-9]+)@(?P<host>[A-Za-z0-9._-]+):(?P<port>[0-9]+)")


@dataclass(frozen=True, slots=True)
class Voter:
    """One voter of the metadata quorum."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        """`host:port`, the node id pysyncobj uses for this voter."""
        return f"{self.host}:{self.port}"


def parse_voters(entries: Iterable[str]) -> Mapping[int, Voter]:
    """Voters by node id; ConfigError on a malformed entry, a repeated id or address."""
    voters: dict[int, Voter] = {}
    problems: list[str] = []
    addresses: set[str] = set()
    for entry in entries:
        match = _VOTER.fullmatch(entry.strip())
        if match is None:
            problems.append(f"config {KEY!r} entry {entry!r} is not id@host:port")
            continue
        voter = Voter(int(match["id"]), match["host"], int(match["port"]))
        if not 0 < voter.port <= PORT_MAX:
            problems.append(f"config {KEY!r} entry {entry!r} has port {voter.port} outside 1..{PORT_MAX}")
        elif voter.node_id in voters:
            problems.append(f"config {KEY!r} names node id {voter.node_id} twice")
        elif voter.address in addresses:
            problems.append(f"config {KEY!r} names address {voter.address} twice")
        else:
            voters[voter.node_id] = voter
            addresses.add(voter.address)
    if problems:
        raise ConfigError(problems)
    if not voters:
        raise ConfigError(f"config {KEY!r} must name at least one voter")
    return MappingProxyType(dict(sorted(voters.items())))
