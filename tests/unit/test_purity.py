"""The pure cores import nothing with I/O, even transitively (issue 11; style.md "Pure core").

Each pure module is imported in a fresh interpreter; the test fails if that import loads
an event loop, a socket, a thread, a subprocess, one of the I/O shells of our own packages,
or an I/O library. A fresh interpreter first imports the third-party libraries a pure core
may use (crc32c, cramjam, msgpack) and `logging` (a core may log; the shell configures
where lines go), so that their own import-time machinery (importlib.metadata pulls in
`socket`) does not count against the module under test. Statically, a pure module's own
source imports none of the clock/OS/randomness modules (style.md: "never import asyncio,
socket, time, uuid4 or the global random").
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Every module that holds a rule, a state machine, a record or a codec. A new pure module
# is added here; `test_every_module_of_a_pure_package_is_listed` catches a forgotten one.
PURE_PACKAGES = ("metadata", "shutdown", "common.protocol", "groups", "chaos.sim")
PURE_MODULES = (
    "common.errors", "common.units", "common.config", "common.config_schema", "common.topic_config", "common.rpc",
    "common.rpc_messages",
    "common.record_batch", "common.records", "common.compression", "common.log_config",
    "broker.log.log_validator",
    "broker.replication.high_watermark", "broker.replication.isr_policy",
    "broker.log.leader_epochs", "broker.log.compaction", "broker.log.record_scan",
    "broker.log.record_columns", "broker.log.offset_map", "broker.log.cleaner_chunk",
    "broker.log.cleaner_splice",
    "broker.replication.truncation", "broker.replication.partition", "broker.log.leader_epoch_cache",
    "broker.topic_partition", "broker.replication.leader_rules", "broker.metadata_follower",
    "broker.producer_state", "broker.fetch_session",
    "quorum.controller_result", "quorum.topic_control", "quorum.replica_assignment", "quorum.broker_control",
    "quorum.heartbeat_manager", "quorum.replication_control", "quorum.producer_ids",
    "quorum.quorum_view", "quorum.replica_failure",
)

# Loaded by a pure module's import: the test fails. Our shells are every module of our
# packages that is not itself pure.
FORBIDDEN_STDLIB = ("asyncio", "socket", "selectors", "threading", "subprocess",
                    "multiprocessing", "concurrent", "ssl", "http", "urllib.request")
FORBIDDEN_THIRD_PARTY = ("aiohttp", "pysyncobj", "confluent_kafka", "pyspark", "pyarrow")
OUR_PACKAGES = ("common", "metadata", "shutdown", "quorum", "broker", "tidelog", "spark",
                "chaos", "groups")
# kio's writers import asyncio for a type alias only (`Writable = asyncio.StreamWriter | IO[bytes]`):
# loading it before the probe keeps that out of what common/protocol's own imports load.
ALLOWED_BEFOREHAND = ("logging", "crc32c", "cramjam", "msgpack", "kio.index", "kio.serial")
# Imported by a pure module's own source: the test fails.
FORBIDDEN_IN_SOURCE = ("asyncio", "socket", "threading", "time", "random", "os",
                       "pathlib", "io", "shutil", "tempfile", "subprocess", "select")
# `uuid.UUID` is a value type; drawing a fresh one is not pure
FORBIDDEN_NAMES = ("uuid1", "uuid4", "sleep", "monotonic", "perf_counter")


def _modules_of(package: str) -> list[str]:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        return []
    base = Path(next(iter(spec.submodule_search_locations)))
    return sorted(f"{package}.{path.stem}" for path in base.glob("*.py") if path.stem != "__init__")


def pure_modules() -> list[str]:
    found = [m for package in PURE_PACKAGES for m in _modules_of(package)]
    return sorted({*found, *PURE_MODULES})


PURE = pure_modules()

_PROBE = """
import json, sys
for name in {allowed!r}:
    __import__(name)
before = set(sys.modules)
__import__({module!r})
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _loaded_by(module: str) -> list[str]:
    code = _PROBE.format(allowed=ALLOWED_BEFOREHAND, module=module)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, f"importing {module} failed:\n{result.stderr[-2000:]}"
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


def _is_forbidden(name: str, pure: set[str]) -> bool:
    top = name.split(".")[0]
    if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_STDLIB + FORBIDDEN_THIRD_PARTY):
        return True
    # a package's __init__ is loaded on the way to a pure module; its other modules must be pure
    return top in OUR_PACKAGES and name not in pure and name not in {
        p.rsplit(".", i)[0] for p in pure for i in range(1, p.count(".") + 1)} | set(OUR_PACKAGES)


@pytest.mark.parametrize("module", PURE)
def test_pure_module_loads_no_io(module: str) -> None:
    pure = set(PURE)
    bad = [name for name in _loaded_by(module) if _is_forbidden(name, pure)]
    assert not bad, f"importing the pure module {module} loads I/O modules: {bad}"


@pytest.mark.parametrize("module", PURE)
def test_pure_module_source_imports_no_clock_or_os(module: str) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    nodes = list(_walk_outside_type_checking(tree))
    imported = [alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module for node in nodes
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0]
    bad = sorted({name for name in imported if name.split(".")[0] in FORBIDDEN_IN_SOURCE})
    assert not bad, f"the pure module {module} imports {bad}"
    names = {node.attr for node in nodes if isinstance(node, ast.Attribute)}
    names |= {alias.name for node in nodes if isinstance(node, ast.ImportFrom) for alias in node.names}
    used = sorted(names & set(FORBIDDEN_NAMES))
    assert not used, f"the pure module {module} uses {used}"


def _walk_outside_type_checking(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under `if TYPE_CHECKING:` (annotations only, never run)."""
    found: list[ast.AST] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) \
                    and child.test.id == "TYPE_CHECKING":
                pending.extend(child.orelse)
                continue
            pending.append(child)
    return found


def test_every_module_of_a_pure_package_is_listed() -> None:
    assert "metadata.delta" in PURE and "shutdown.broker_lifecycle" in PURE
    assert "common.protocol.frame" in PURE


def test_the_probe_detects_io() -> None:
    # the check itself can fail: a shell module is caught
    assert any(_is_forbidden(name, set(PURE)) for name in _loaded_by("broker.log.segment"))
