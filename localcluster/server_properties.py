"""The server.properties of each node of a local cluster: what `tidelog up` writes on a node's
first start, and the keys `--broker-config` / `--controller-config` set in new or existing files.

    files = properties_files(specs, secrets, extra, broker_config, controller_config)  # node id -> text

A file is never overwritten except for the keys those options name (an operator's other edits
stay); a file they touch is validated as its node will parse it before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from common.config import parse_config
from common.config_schema import ConfigError
from common.properties import parse_properties, properties_line, set_entries
from security.rpc_auth import SECRET_FILE_KEY
from localcluster.rpc_keys import rpc_key_file
from localcluster.cluster_layout import (
    BROKER,
    BROKER_DATA_DIR,
    COMBINED,
    COMBINED_METADATA_DIR,
    ClusterSecrets,
    LayoutError,
    NodeSpec,
    runs_broker,
    runs_controller,
)


def node_properties(node: NodeSpec, nodes: Sequence[NodeSpec], secrets: ClusterSecrets,
                    extra: Mapping[str, str] | None = None, rpc_secret_file: Path | None = None) -> str:
    """server.properties of one node; `extra` keys (tests: short timeouts) come last and win.
    `rpc_secret_file`: the data dir's RPC secret, which controllers read; a broker reads its own
    key derived from it (issue 29, `rpc_key_file`)."""
    controllers = [n for n in nodes if runs_controller(n.role)]
    if rpc_secret_file is not None:
        extra = {SECRET_FILE_KEY: str(rpc_key_file(node, rpc_secret_file)), **(extra or {})}
    if node.role == BROKER:
        return _broker_properties(node, controllers, secrets, extra)
    entries = {
        "node.id": str(node.node_id),
        "process.roles": "broker,controller" if node.role == COMBINED else node.role,
        "controller.quorum.voters": ",".join(f"{n.node_id}@{n.quorum_address}" for n in controllers),
        "controller.listener": node.admin_address,
        "controller.api.voters": ",".join(f"{n.node_id}@{n.admin_address}" for n in controllers),
        "controller.cluster.password": secrets.password,
        "cluster.id": secrets.cluster_id,
        "metadata.log.dir": str(node.directory / COMBINED_METADATA_DIR if node.role == COMBINED
                                else node.directory),
    }
    if node.role == COMBINED:
        entries.update(_broker_entries(node))
    entries.update(_console_entries(node, nodes))
    for key, value in (extra or {}).items():  # last, even for a key already set: they win
        entries.pop(key, None)
        entries[key] = value
    lines = ["# Written by `tidelog up` on this node's first start; edit freely, it is never",
             "# overwritten. It holds the quorum password: keep it private (mode 0600)."]
    lines += [properties_line(key, value) for key, value in entries.items()]
    return "\n".join(lines) + "\n"


def _broker_properties(node: NodeSpec, controllers: Sequence[NodeSpec], secrets: ClusterSecrets,
                       extra: Mapping[str, str] | None) -> str:
    entries = {
        "node.id": str(node.node_id),
        "process.roles": node.role,
        "controller.api.voters": ",".join(f"{n.node_id}@{n.admin_address}" for n in controllers),
        "cluster.id": secrets.cluster_id,
        **_broker_entries(node),
        **(extra or {}),
    }
    lines = ["# Written by `tidelog up` on this node's first start; edit freely, it is never overwritten."]
    lines += [properties_line(key, value) for key, value in entries.items()]
    return "\n".join(lines) + "\n"


def properties_files(nodes: Sequence[NodeSpec], secrets: ClusterSecrets, extra: Mapping[str, str] | None,
                     broker_config: Mapping[str, str], controller_config: Mapping[str, str],
                     rpc_secret_file: Path | None = None,
                     per_node: Mapping[int, Mapping[str, str]] | None = None) -> dict[int, str]:
    """The server.properties texts to write, by node id: every new node's file, and every existing
    one that `broker_config` / `controller_config` change (an operator's other edits kept). A file
    those options touch is parsed as its node will parse it; LayoutError names the node, the
    option and the key. (`extra` is a test's business: a bad key there fails at the node's start.)"""
    files: dict[int, str] = {}
    for node in nodes:
        overrides = _role_overrides(node, broker_config, controller_config)
        path = node.properties_path
        if not path.exists():
            # per_node: `tidelog up --security`'s listeners and TLS/SASL entries of each broker
            text = node_properties(node, nodes, secrets,
                                   {**(extra or {}), **(per_node or {}).get(node.node_id, {}), **overrides},
                                   rpc_secret_file)
        elif rpc_secret_file is not None and SECRET_FILE_KEY not in parse_properties(
                path.read_text(encoding="utf-8"), str(path)):  # made before issue 29: every node signs now
            text = set_entries(path.read_text(encoding="utf-8"),
                               {**overrides, SECRET_FILE_KEY: str(rpc_key_file(node, rpc_secret_file))},
                               str(path), "Set by `tidelog up`: broker<->controller RPCs are authenticated.")
        elif overrides:
            text = set_entries(path.read_text(encoding="utf-8"), overrides, str(path),
                               "Set by `tidelog up --broker-config/--controller-config`; kept on restart.")
        else:
            continue  # an operator's edits win
        files[node.node_id] = text
        if not overrides:
            continue
        try:
            parse_config(parse_properties(text, str(path)))
        except ConfigError as exc:
            options = " / ".join(option for option, entries, applies in (
                ("--broker-config", broker_config, runs_broker(node.role)),
                ("--controller-config", controller_config, runs_controller(node.role))) if entries and applies)
            raise LayoutError(f"{node.label}: {options}: {exc}") from None
    return files


def _role_overrides(node: NodeSpec, broker_config: Mapping[str, str],
                    controller_config: Mapping[str, str]) -> dict[str, str]:
    """The overrides a node takes: a combined node runs both roles, so it takes both sets, which
    must then agree."""
    overrides = dict(broker_config) if runs_broker(node.role) else {}
    if runs_controller(node.role):
        clashes = sorted(k for k, v in controller_config.items() if overrides.get(k, v) != v)
        if clashes:
            raise LayoutError(f"{node.label} runs both roles, and --broker-config and --controller-config "
                              f"give different values for {', '.join(clashes)}")
        overrides.update(controller_config)
    return overrides


def _console_entries(node: NodeSpec, nodes: Sequence[NodeSpec]) -> dict[str, str]:
    """The web console's keys of a controller (issue 32): where the brokers' /metrics listen (one
    port, each broker on its own address) and the chaos reports beside the data dir, where
    `make chaos` writes them (./chaos-reports next to ./tidelog-data)."""
    entries = {"console.chaos.reports.dir": str(node.directory.resolve().parent.parent / "chaos-reports")}
    metrics = [n.metrics_port for n in nodes if runs_broker(n.role) and n.metrics_port]
    if metrics:
        entries["console.broker.metrics.port"] = str(metrics[0])
    return entries


def _broker_entries(node: NodeSpec) -> dict[str, str]:
    """The keys of a node's broker half: its Kafka listener, log dirs and metrics endpoint."""
    listener = f"PLAINTEXT://{node.bootstrap_address}"
    return {"listeners": listener, "advertised.listeners": listener,
            "log.dirs": str(node.directory / BROKER_DATA_DIR),
            "metrics.listener": f"{node.host}:{node.metrics_port}",
            # Kafka's shipped development config: a new group's first rebalance does not wait
            # for more members (production default 3000 ms).
            "group.initial.rebalance.delay.ms": "0"}
