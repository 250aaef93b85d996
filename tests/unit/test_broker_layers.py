"""Inside `broker/`, the subpackages and root modules import each other only downwards, along
a table of layers, and form no import cycle (issue 26; `test_package_layers.py` does the same
for the top-level packages).

A *unit* is a subpackage of `broker/` (`broker.log`, `broker.replication`, ...) or a root
module (`broker.replica_manager`). Every unit has a layer in `LAYERS`; a unit imports units of
its own layer or of lower ones, never higher. A strongly-connected-components pass over the
units' imports finds every cycle, inside a layer too, and one over the modules finds cycles
inside a subpackage. A new root module or subpackage fails the test until it is given a layer.

Which imports count: every import that runs, also one inside a function (a lazy import is
still a dependency, as in `test_package_layers.py`). Imports under `if TYPE_CHECKING:` do not
count: they never run, so they order no imports and couple no initialisation; they are how a
lower module names, in an annotation, the higher object that hands itself in (the replica
fetchers annotate their owner, `broker.replica_manager.ReplicaManager`, which imports them).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKER = ROOT / "broker"

# Bottom to top. `broker` is the package's own __init__.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    # values, settings and the sans-IO rules of one concern each
    ("rules", frozenset({
        "broker", "producer_state", "fetch_session", "metadata_follower",
        "follower_settings", "broker_settings", "applied_offset", "dynamic_config", "startup_heap", "heap_policy",
        "process_exit", "loop_stalls",
        "client_security", "request_faults",
    })),
    # one service each, knowing no hosted partition: timers, the purgatory, the controller's
    # client and what is forwarded through it, the coordinator runtime; the read side of a Kafka
    # connection (frame_receiver: the listener's and the replica fetchers' broker connections)
    ("services", frozenset({
        "timers", "purgatory", "refusal_log", "controller_client", "leader_elections",
        "partition_reassignments", "producer_ids", "topic_admin", "coordinator",
        "topic_metrics", "frame_receiver",
    })),
    # the partition log on disk and what reads it whole
    ("storage", frozenset({"log", "metadata_checkpoint", "slice_sender"})),
    # hosted partitions: replication's rules and fetchers, the replica manager and its parts
    ("replicas", frozenset({
        "replication", "hosted_topic_configs", "replica_reads", "replica_appends",
        "replica_deletes", "replica_roles", "replica_manager", "fetch_sessions", "txn_verification",
        "replica_selector", "broker_connections",
    })),
    # the Kafka listener (its security: TLS, SASL) and the metadata log follower's loop
    ("server", frozenset({"server", "listener_security", "broker_metrics",
                          "metadata_follower_loop"})),
    # coordinators over internal topics, on the coordinator runtime
    ("coordinators", frozenset({"group_coordinator", "transaction_coordinator", "share"})),  # share: KIP-932
    # the request handlers by concern, over the layers below, and the faults a test injects
    # into them (broker.request_faults' table applied at dispatch)
    ("handlers", frozenset({"handlers", "request_fault_hook"})),
    # what starts it all: the dispatch table, the broker process, the dump-log tool
    ("entry", frozenset({"request_handler", "node", "dump_log"})),
)
LAYER_OF: dict[str, int] = {f"broker.{unit}" if unit != "broker" else "broker": index
                            for index, (_, units) in enumerate(LAYERS) for unit in units}

# Known cycles and upward imports, each listed with what removes it. Only shrinks:
# `test_every_allowed_exception_still_exists` fails once one is gone, so it is taken off here.
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST) -> Iterator[str]:
    """Every module an import that runs may load (`from a import b` may be module a.b)."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) \
                    and child.test.id == "TYPE_CHECKING":
                pending.extend(child.orelse)
                continue
            if isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                yield child.module
                yield from (f"{child.module}.{alias.name}" for alias in child.names)
            pending.append(child)


def module_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in sorted(BROKER.rglob("*.py")) if "__pycache__" not in p.parts}
    return {name: {m for m in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")))
                   if m in paths and m != name}
            for name, path in paths.items()}


def unit_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and (BROKER / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def unit_graph(modules: Mapping[str, Set[str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, imported in modules.items():
        graph.setdefault(unit_of(module), set()).update(
            unit_of(m) for m in imported if unit_of(m) != unit_of(module))
    return graph


def cycles(graph: Mapping[str, Set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


MODULES = module_graph()
UNITS = unit_graph(MODULES)


def upward_imports() -> set[tuple[str, str]]:
    return {(unit, target) for unit, targets in UNITS.items() for target in targets
            if unit in LAYER_OF and target in LAYER_OF and LAYER_OF[target] > LAYER_OF[unit]}


def test_every_unit_has_a_layer() -> None:
    assert sorted(set(UNITS) - set(LAYER_OF)) == [], "give each new broker module or subpackage a layer"
    assert sorted(set(LAYER_OF) - set(UNITS)) == [], "a layer names a unit that no longer exists"


def test_units_import_only_downwards() -> None:
    bad = sorted(upward_imports() - ALLOWED_UPWARD)
    assert bad == [], f"imports against the layers (importer, imported): {bad}"


def test_no_cycle_between_subpackages_or_root_modules() -> None:
    new = sorted(sorted(c) for c in cycles(UNITS) - ALLOWED_CYCLES)
    assert new == [], f"import cycles between broker units: {new}"


def test_no_cycle_between_modules() -> None:
    # inside a subpackage too; a cycle between units shows here only if its modules form one
    assert sorted(sorted(c) for c in cycles(MODULES)) == []


def test_every_allowed_exception_still_exists() -> None:
    # the lists only shrink: a fixed cycle or import is taken off them
    assert ALLOWED_CYCLES <= cycles(UNITS)
    assert ALLOWED_UPWARD <= upward_imports()


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, {frozenset({"a", "b"})}),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, {frozenset({"a", "b", "c"})}),
    ({"a": {"b"}, "b": set()}, set()),
])
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: set[frozenset[str]]) -> None:
    assert cycles(graph) == expected


def test_the_scan_sees_imports() -> None:
    # the check can fail: known edges are found, TYPE_CHECKING ones are not
    assert "broker.log" in UNITS["broker.replica_manager"]
    assert "broker.replication" in UNITS["broker.replica_manager"]
    assert "broker.replica_manager" not in UNITS["broker.replication"]  # annotation only
