"""Checks a node makes at start when it is not on loopback alone (issue 30): bad input between
hosts is a clear error naming the setting, not a node that hangs or never gets traffic.

    problems = peer_problems(me, views, brokers)     # pure: this node's settings vs its peers' answers
    check_node(config, role="broker")               # the shell: asks the controllers, ConfigError

- an advertised address the peers cannot reach: a loopback address while the controllers are
  elsewhere, or a host name that does not resolve (`advertised.listeners`, `controller.listener`);
- two nodes with one id: a broker whose node.id is registered, unfenced and heartbeating, by a
  broker that advertises other addresses (the same addresses: this broker restarting, whose old
  session has not expired yet);
- a controller list that disagrees between nodes: a controller that answers with another address
  for a controller both lists name (`controller.quorum.voters`, `controller.api.voters`; ids only
  one list names are no error, since KIP-853 changes the voter set at run time), or another
  cluster id.

Only controllers that answer within `PEER_TIMEOUT` are compared, once: on a first start nobody
answers yet and nothing is checked, and no check ever waits longer than that per controller.
A node whose every address is loopback (`tidelog up`) is not checked (its layout is one file).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from common.limits import MAX_CONTROLLER_ANSWER_BYTES
from common.config_schema import Config, ConfigError, Password
from common.units import SECONDS

PEER_TIMEOUT: Final = 1 * SECONDS  # one controller's answer; a peer slower than this is not compared


@dataclass(frozen=True, slots=True)
class NodeView:
    """What this node's config says about itself and its peers."""

    node_id: int
    role: str  # "broker", "controller" or "combined"
    cluster_id: str | None
    quorum_voters: Mapping[int, str]  # id -> host:port (controllers only; {} for a broker)
    api_voters: Mapping[int, str]  # id -> host:port
    advertised: tuple[str, ...]  # host:port this node tells peers to use


def _host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def beyond_loopback(me: NodeView) -> bool:
    return not all(_loopback(_host(a)) for a in [*me.api_voters.values(), *me.advertised])


def local_problems(me: NodeView, resolves: Mapping[str, bool]) -> list[str]:
    """Problems this node's config shows alone; `resolves`: host name -> whether it resolves."""
    key = "advertised.listeners" if me.role != "controller" else "controller.listener"
    remote = sorted({_host(a) for a in me.api_voters.values() if not _loopback(_host(a))})
    problems = []
    for address in me.advertised:
        host = _host(address)
        if _loopback(host) and remote:
            problems.append(f"config {key!r} advertises {address}, a loopback address the controllers at "
                            f"{', '.join(remote)} cannot reach: advertise an address of this host they reach")
        elif not resolves.get(host, True):
            problems.append(f"config {key!r} advertises {address}, but {host} does not resolve to an address")
    return problems


def peer_problems(me: NodeView, views: Mapping[int, Mapping[str, Any]],
                  brokers: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """Disagreements between this node and the controllers that answered (`views`: GET /v1/cluster by
    controller id) and the brokers they list (GET /v1/brokers, None if not asked)."""
    problems = []
    for controller_id, view in sorted(views.items()):
        where = f"controller {controller_id} (at {me.api_voters.get(controller_id)})"
        if me.cluster_id is not None and view.get("cluster_id") not in (None, me.cluster_id):
            problems.append(f"config 'cluster.id' is {me.cluster_id}, but {where} belongs to cluster "
                            f"{view.get('cluster_id')}")
        voters = [v for v in view.get("voters", []) if isinstance(v, dict)]
        theirs_api = {int(v["node_id"]): str(v.get("api_address")) for v in voters}
        theirs_quorum = {int(v["node_id"]): str(v.get("quorum_address")) for v in voters}
        # only ids both name: a voter set may grow or shrink at run time (KIP-853), an address may not differ
        for key, mine, theirs in (("controller.api.voters", me.api_voters, theirs_api),
                                  ("controller.quorum.voters", me.quorum_voters, theirs_quorum)):
            differ = sorted(i for i in set(mine) & set(theirs) if mine[i] != theirs[i])
            if differ:
                problems.append(f"config {key!r} here is {_voters(mine)}, but {where} has {_voters(theirs)} "
                                f"(controller {', '.join(map(str, differ))} differs): every node must list "
                                "the same controllers")
    for broker in brokers or []:
        if broker.get("broker_id") != me.node_id or broker.get("fenced") is not False:
            continue
        addresses = sorted(_listener_addresses(broker))
        if addresses and not set(addresses) & set(me.advertised):
            problems.append(f"config 'node.id' {me.node_id} is registered by another live broker, which advertises "
                            f"{', '.join(addresses)} (this one: {', '.join(me.advertised)}): two nodes with one id; "
                            "give this node an id no other node has")
    return problems


def _voters(voters: Mapping[int, str]) -> str:
    return ",".join(f"{i}@{a}" for i, a in sorted(voters.items()))


def _listener_addresses(broker: Mapping[str, Any]) -> list[str]:
    """host:port of a /v1/brokers entry's listeners (a list of {host, port} or of URLs, or one string)."""
    listeners = broker.get("listeners") or broker.get("listener") or []
    if isinstance(listeners, (str, dict)):
        listeners = [listeners]
    addresses = []
    for entry in listeners:
        if isinstance(entry, dict) and "host" in entry and "port" in entry:
            addresses.append(f"{entry['host']}:{entry['port']}")
        elif isinstance(entry, str):
            addresses.append(entry.rpartition("//")[2])
    return addresses


# --- the shell ---------------------------------------------------------------------------------


def _voter_map(entries: object) -> dict[int, str]:
    voters = {}
    for entry in entries if isinstance(entries, tuple) else ():
        node, _, address = str(entry).partition("@")
        voters[int(node)] = address
    return voters


def node_view(config: Config, role: str) -> NodeView:
    """This node's view, from its parsed config."""
    quorum = _voter_map(config["controller.quorum.voters"]) if role != "broker" else {}
    api = _voter_map(config["controller.api.voters"])
    if not api and quorum and isinstance(config["controller.listener"], str):  # one port: the layout default
        port = str(config["controller.listener"]).rpartition(":")[2]
        api = {i: f"{_host(a)}:{port}" for i, a in quorum.items()}
    advertised: list[str] = []
    if role != "controller":
        listeners = config["advertised.listeners"] or config["listeners"]
        for entry in listeners if isinstance(listeners, tuple) else (listeners,) if listeners else ():
            advertised.append(str(entry).rpartition("//")[2])
    elif isinstance(config["controller.listener"], str):
        advertised.append(str(config["controller.listener"]))
    cluster_id = config["cluster.id"]
    return NodeView(int(str(config["node.id"])), role, cluster_id if isinstance(cluster_id, str) else None,
                    quorum, api, tuple(advertised))


def _get(url: str, token: str | None) -> Any:
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=PEER_TIMEOUT) as answer:
        return json.loads(answer.read(MAX_CONTROLLER_ANSWER_BYTES))


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    return True


def check_node(config: Config, *, role: str) -> None:
    """ConfigError listing every problem (see the module's docstring); nothing for a loopback node."""
    me = node_view(config, role)
    if not beyond_loopback(me):
        return
    problems = local_problems(me, {_host(a): _resolves(_host(a)) for a in me.advertised})
    token = config["admin.token"]
    secret = token.value if isinstance(token, Password) and token.value else None
    views: dict[int, Mapping[str, Any]] = {}
    brokers = None
    for node_id, address in sorted(me.api_voters.items()):
        if node_id == me.node_id:
            continue  # this node itself, not started yet
        try:
            view = _get(f"http://{address}/v1/cluster", secret)
            if isinstance(view, dict):
                views[node_id] = view
            if brokers is None and role != "controller":
                answer = _get(f"http://{address}/v1/brokers", secret)
                brokers = [b for b in answer if isinstance(b, dict)] if isinstance(answer, list) else None
        except (OSError, ValueError, urllib.error.URLError):  # not up yet, or not answering us: not compared
            continue
    problems += peer_problems(me, views, brokers)
    if problems:
        raise ConfigError(problems)
