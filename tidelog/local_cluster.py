"""`tidelog up`: lay out and start a local cluster under one directory.

Today only the storage layer exists: `up` writes each node's server.properties, opens
every broker's log directories (running crash recovery where a previous run stopped
uncleanly), and reports that the quorum and the Kafka listener do not exist yet. The
process launcher arrives with the quorum and broker issues and will reuse these configs.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from broker.log.log_config import from_broker_config
from broker.log.log_manager import LogManager
from tidelog.config import load_properties, log_dirs, parse_config
from tidelog.log_setup import setup_logging


@dataclass(frozen=True, slots=True)
class NodeLayout:
    node_id: int
    role: str
    directory: Path

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"


def plan(root: Path, controllers: int, brokers: int) -> list[NodeLayout]:
    """Node ids 1..C are controllers, C+1..C+B brokers, each in `root/<role>-<id>`."""
    nodes = [NodeLayout(i, "controller", root / f"controller-{i}")
             for i in range(1, controllers + 1)]
    nodes += [NodeLayout(i, "broker", root / f"broker-{i}")
              for i in range(controllers + 1, controllers + brokers + 1)]
    return nodes


def write_properties(node: NodeLayout) -> None:
    """Write the node's server.properties unless one exists (an operator may have edited it)."""
    if node.properties_path.exists():
        return
    node.directory.mkdir(parents=True, exist_ok=True)
    lines = [f"node.id={node.node_id}", f"process.roles={node.role}",
             f"log.dirs={node.directory / 'data'}"]
    node.properties_path.write_text("\n".join(lines) + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tidelog up`."""
    parser.add_argument("--dir", type=Path, default=Path(".tidelog"),
                        help="cluster directory (default: ./.tidelog)")
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)


def run(args: argparse.Namespace) -> int:
    """Prepare every node and open the brokers' storage; say what is not built yet."""
    setup_logging(None, "up")
    nodes = plan(args.dir.resolve(), args.controllers, args.brokers)
    for node in nodes:
        write_properties(node)
    now_ms = int(time.time() * 1000)
    for node in nodes:
        if node.role != "broker":
            continue
        config = parse_config(load_properties(node.properties_path))
        manager = LogManager(log_dirs(config), from_broker_config(config), now_ms=now_ms)
        count = len(manager.logs)
        manager.shutdown()
        print(f"broker {node.node_id}: storage ready in {', '.join(log_dirs(config))} "
              f"({count} partition logs)")
    print(f"tidelog up: node configs in {args.dir}/. Not started: the controller quorum and "
          "the brokers' Kafka listeners are not built yet, so there is no bootstrap server.")
    return 0
