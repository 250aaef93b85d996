"""The pure cores import nothing with I/O, even transitively (issue 11; style.md "Pure core").

A pure module says so in its code: a module-level `PURE = True` (and a one-line comment of
what it promises: no sockets, threads, clocks or files). In a package's `__init__.py` the
marker makes every module of that package pure. The test finds the markers by parsing every
module of our packages, so there is no hand list to drift (issue 26).

Each pure module is imported in a fresh interpreter; the test fails if that import loads
an event loop, a socket, a thread, a subprocess, one of the I/O shells of our own packages
(every module not itself marked pure), or an I/O library. A fresh interpreter first imports
the third-party libraries a pure core may use (crc32c, cramjam, msgpack, kio) and `logging`
(a core may log; the shell configures where lines go), so that their own import-time
machinery (importlib.metadata pulls in `socket`) does not count against the module under
test. One probe interpreter does that once and forks a child per module, which imports the
module from exactly that state (an interpreter per module paid those imports, ~0.5 s of CPU,
for each of the ~175 modules: half the unit tests' time). Statically, a pure module's own
source imports none of the clock/OS/randomness modules (style.md: "never import asyncio,
socket, time, uuid4 or the global random"); imports under `if TYPE_CHECKING:` are annotations
only and never run.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

MARKER = "PURE"
OUR_PACKAGES = ("common", "metadata", "shutdown", "quorum", "broker", "tidelog", "spark",
                "chaos", "groups", "transactions", "localcluster", "security", "console")


def _marker_value(path: Path) -> object:
    """The value of the module-level `PURE = ...`, or None when the module has none."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == MARKER for t in targets):
            value = node.value
            return value.value if isinstance(value, ast.Constant) else ast.dump(value) if value else None
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in OUR_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


SOURCES = _sources()
MARKERS = {name: value for name, path in SOURCES.items()
           if (value := _marker_value(path)) is not None}


def pure_modules() -> list[str]:
    """Every module marked pure, or inside a package whose `__init__` is marked."""
    packages = {name for name, path in SOURCES.items()
                if path.name == "__init__.py" and MARKERS.get(name) is True}
    return sorted(name for name in SOURCES if MARKERS.get(name) is True
                  or any(name.startswith(package + ".") for package in packages))


PURE = pure_modules()

# Loaded by a pure module's import: the test fails. Our shells are every module of our
# packages that is not itself pure.
FORBIDDEN_STDLIB = ("asyncio", "socket", "selectors", "threading", "subprocess",
                    "multiprocessing", "concurrent", "ssl", "http", "urllib.request")
FORBIDDEN_THIRD_PARTY = ("aiohttp", "pysyncobj", "confluent_kafka", "pyspark", "pyarrow")
# kio's writers import asyncio for a type alias only (`Writable = asyncio.StreamWriter | IO[bytes]`):
# loading it before the probe keeps that out of what common/protocol's own imports load.
ALLOWED_BEFOREHAND = ("logging", "crc32c", "cramjam", "msgpack", "kio.index", "kio.serial")
# Imported by a pure module's own source: the test fails.
FORBIDDEN_IN_SOURCE = ("asyncio", "socket", "threading", "time", "random", "os",
                       "pathlib", "io", "shutil", "tempfile", "subprocess", "select")
# `uuid.UUID` is a value type; drawing a fresh one is not pure
FORBIDDEN_NAMES = ("uuid1", "uuid4", "sleep", "monotonic", "perf_counter")


# One child per module (argv), each forked from the state a fresh interpreter has after the
# allowed imports; a child writes what its import loaded, or its traceback, to a pipe.
_PROBE = """
import json, os, sys
for name in {allowed!r}:
    __import__(name)
answers = {{}}
for module in sys.argv[1:]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        before = set(sys.modules)
        try:
            __import__(module)
            answer = {{"loaded": sorted(set(sys.modules) - before)}}
        except BaseException:
            import traceback
            answer = {{"error": traceback.format_exc()}}
        with os.fdopen(write_end, "w") as out:
            out.write(json.dumps(answer))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer_in:
        text = answer_in.read()
    os.waitpid(pid, 0)
    answers[module] = json.loads(text) if text else {{"error": "the child importing it died"}}
print(json.dumps(answers))
"""
PROBED = (*PURE, "broker.log.segment")  # every pure module, and the shell test_the_probe_detects_io uses


@functools.cache
def _probe() -> dict[str, dict[str, Any]]:
    code = _PROBE.format(allowed=ALLOWED_BEFOREHAND)
    result = subprocess.run([sys.executable, "-c", code, *PROBED], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, f"the import probe failed:\n{result.stderr[-2000:]}"
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def _loaded_by(module: str) -> list[str]:
    answer = _probe()[module]
    assert "error" not in answer, f"importing {module} failed:\n{answer['error'][-2000:]}"
    return list(answer["loaded"])


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


def test_markers_say_true() -> None:
    # `PURE = False` or a computed value would be a marker the scan cannot read as a promise
    assert {name: value for name, value in MARKERS.items() if value is not True} == {}


def test_the_scan_finds_the_markers() -> None:
    # a module marked itself, and a module of a package marked in its __init__
    assert {"broker.log.log_validator", "quorum.replica_failure", "common.errors"} <= set(PURE)
    assert {"metadata.delta", "shutdown.broker_lifecycle", "common.protocol.frame"} <= set(PURE)
    assert "broker.log.segment" not in PURE and "common" not in PURE


def test_the_probe_detects_io() -> None:
    # the check itself can fail: a shell module is caught
    assert any(_is_forbidden(name, set(PURE)) for name in _loaded_by("broker.log.segment"))
