"""Attach to the cluster of a data dir whatever its hosts: loopback (`LocalCluster.attach`) or a
kind of hosts another package provides (tidelog.hosts registers "netns" when imported).

    register("netns", NetnsCluster.attach)          # by the package that makes such clusters
    cluster = attach_any(root)                      # the chaos runner, on --cluster-dir

localcluster imports neither tidelog nor chaos (the architecture drawing): a cluster of
namespaced hosts is made by `tidelog`, and the chaos engine, which may not import `tidelog`,
reaches it through this registry instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Final

from localcluster.cluster_layout import CLUSTER_FILE, LayoutError
from localcluster.launcher import LocalCluster

HOSTS_KEY: Final = "hosts"  # cluster.json's entry naming the hosts' kind (tidelog.hosts.cluster writes it)

_ATTACH: dict[str, Callable[[Path], LocalCluster | None]] = {}


def register(kind: str, attach: Callable[[Path], LocalCluster | None]) -> None:
    _ATTACH[kind] = attach


def hosts_kind(root: Path) -> str | None:
    """The kind of hosts cluster.json of `root` records; None for loopback or without one."""
    try:
        document = json.loads((root / CLUSTER_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None  # none, or malformed: LocalCluster.attach says what is wrong with it
    hosts = document.get(HOSTS_KEY) if isinstance(document, dict) else None
    return str(hosts.get("kind")) if isinstance(hosts, dict) else None


def attach_any(root: Path) -> LocalCluster | None:
    """The cluster of `root`, loopback or of a registered kind of hosts; None without one;
    LayoutError naming the kind when nothing registered it."""
    kind = hosts_kind(root.resolve())
    if kind is None:
        return LocalCluster.attach(root)
    attach = _ATTACH.get(kind)
    if attach is None:
        raise LayoutError(f"{root} holds a cluster of {kind!r} hosts, which this process cannot reach "
                          f"(run it through the tidelog command)")
    return attach(root)
