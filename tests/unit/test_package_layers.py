"""The top-level packages import each other only along the README's architecture drawing,
so there is no import cycle between them (issue 11). Every import counts, also one inside a
function: a lazy import is still a dependency.

`app` is what users start: the command dispatcher (`tidelog.cli`, `tidelog.__main__`) and the
pytest plugin (`tidelog.testing`). It may reach every package, including `chaos`. Both `chaos`
and `tidelog` start local clusters through `localcluster`, which imports neither: so `chaos`
needs nothing of `tidelog`, and the `tidelog` Python package (whose command and plugin run
chaos) and `chaos` form no cycle either (issue 26).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# package -> the packages it may import (README, "Architecture").
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "metadata": {"common"},
    "shutdown": {"common"},
    "groups": {"common"},
    "transactions": {"common", "groups"},
    # the pure rules of ACLs, SCRAM and request signing, and TLS contexts; ACLs and SCRAM
    # credentials are metadata records
    "security": {"common", "metadata"},
    "quorum": {"common", "metadata", "shutdown", "groups", "security"},
    "broker": {"common", "metadata", "shutdown", "groups", "transactions", "security"},
    "spark": {"common", "security"},
    "localcluster": {"common", "security"},
    # the web console reads the controller's image and admin state; quorum never imports it (the
    # controller's HTTP server takes it as an extension installed at start)
    # (and tidelog's group admin, which `tidelog groups describe` reads a share group with)
    "console": {"common", "metadata", "quorum", "security", "tidelog"},
    "tidelog": {"common", "metadata", "shutdown", "groups", "transactions", "quorum", "broker", "spark",
                "localcluster", "security"},
    # chaos.sim runs the controller's and the replicas' own rules (quorum, broker) in memory;
    # `chaos run --serve` serves the console's live view
    "chaos": {"common", "metadata", "shutdown", "groups", "transactions", "localcluster", "quorum", "broker",
              "security", "console"},
    "app": {"common", "metadata", "shutdown", "groups", "transactions", "quorum", "broker", "spark", "tidelog",
            "localcluster", "chaos", "security", "console"},
}
PACKAGES = tuple(p for p in ALLOWED if p != "app")
APP_MODULES = ("tidelog/cli.py", "tidelog/__main__.py", "tidelog/testing/")


def _owner(path: Path) -> str:
    relative = path.relative_to(ROOT).as_posix()
    if any(relative == m or (m.endswith("/") and relative.startswith(m)) for m in APP_MODULES):
        return "app"
    return relative.split("/")[0]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in ALLOWED}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")) if (ROOT / package).is_dir() else []:
            owner = _owner(path)
            graph[owner] |= _imports(path) - {owner}
    return graph


GRAPH = edges()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_follow_the_drawing(package: str) -> None:
    extra = sorted(GRAPH[package] - ALLOWED[package] - {package})
    assert not extra, f"{package} imports {extra}, which the architecture drawing does not allow"


def test_the_drawing_has_no_cycle() -> None:
    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in ALLOWED[start]:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert [p for p in ALLOWED if reaches(p, p, set())] == []


def test_the_tidelog_package_and_chaos_form_no_cycle() -> None:
    # app modules live inside the `tidelog` Python package: chaos importing any of tidelog
    # would be a cycle between the two packages as Python sees them
    assert "tidelog" not in GRAPH["chaos"] and "chaos" in GRAPH["app"]


def test_the_scan_sees_imports() -> None:
    # the check can fail: known edges are found
    assert {"common", "metadata"} <= GRAPH["quorum"] and "broker" in GRAPH["app"]


def test_every_top_level_package_is_installed() -> None:
    """A package missing from pyproject's find list works from the checkout and fails from the
    installed `tidelog` command (the transactions package once did): every top-level package
    but the tests is listed."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    listed = {pattern.rstrip("*") for pattern in
              tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]}
    packages = {p.parent.name for p in root.glob("*/__init__.py")} - {"tests"}
    assert packages - listed == set(), "add these to [tool.setuptools.packages.find] include"
