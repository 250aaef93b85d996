"""Limits and defaults in one place (issue 26; style.md rule 9; common/limits.py says what
belongs where).

The checks read every module of our packages (bench/ and tests/ are left out: each benchmark
and test sets its own run parameters) and look at module-level constants whose value is a
literal: numbers and common.units names combined with arithmetic (`16 * KIB`, `2**15 - 1`). A
constant that reads its value from elsewhere (`default_int(...)`, `INT_MAX`, an import) is not
a copy and is not looked at. Three rules:

1. No two modules define a limit with the same name and the same value: the second is a copy
   and must import the first from common.limits. A limit is a constant whose name has a limit
   word (MAX, TIMEOUT, BYTES, ...) or a duration unit (`_S`, `_MS`); protocol sentinels such as
   NO_LEADER are not limits.
2. No module defines a constant under a name common.limits defines: a copy that kept its name
   even after its value drifted. (Renaming a copy escapes rules 1 and 2; what catches
   a renamed copy is rule 3 for configs and review for the rest.)
3. No module restates a config default it names: a constant with the value of a key's default
   in the key table (common.config, common.topic_config) whose name spells the key
   (`REPLICA_LAG_TIME_MAX_MS` for replica.lag.time.max.ms), or calls itself a default with
   the key's words (`DEFAULT_OFFSETS_TOPIC_PARTITIONS` for offsets.topic.num.partitions), or
   whose line names the key in its comment is a copy; it must read
   `common.config.default_int(key)`. The comment counts because that is where a copy says
   where it comes from; a copy renamed to words of its own and stripped of that comment
   escapes (the value alone cannot tell a copy from a coincidence: 500 ms is both
   replica.fetch.wait.max.ms and a consumer's fetch.max.wait.ms).

ALLOWED_NAME_REUSE and ALLOWED_CONFIG_COPIES list the exceptions that remain (in modules other
engineers were editing, or named for a different fact); they may only shrink, and a test fails
when an entry no longer matches, so fixed entries leave the list. Rule 1 has no exception left.
"""

from __future__ import annotations

import ast
import operator
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import common.limits
import common.units
from common.config import BROKER_KEYS
from common.topic_config import TOPIC_CONFIGS, default_value

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "chaos", "common", "groups", "localcluster", "metadata", "quorum", "shutdown",
            "spark", "tidelog")
LIMITS_MODULE = "common/limits.py"
CONFIG_TABLES = frozenset({"common/config.py", "common/config_schema.py", "common/topic_config.py"})

LIMIT_WORDS = frozenset({"MAX", "MIN", "LIMIT", "TIMEOUT", "BACKOFF", "INTERVAL", "WAIT", "BYTES", "SIZE",
                         "SLACK", "RETRY", "POLL", "CHARS", "ITEMS", "DEPTH", "TRIES", "ATTEMPTS", "S",
                         "MS"})

# Names common.limits defines that modules being edited still define themselves.
ALLOWED_NAME_REUSE: frozenset[tuple[str, str]] = frozenset()
# Config defaults restated by modules being edited: (module, constant) -> the key to read.
ALLOWED_CONFIG_COPIES: dict[tuple[str, str], str] = {}

_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.LShift: operator.lshift,
}


class NotLiteral(Exception):
    """The value reads something: a call, an attribute, a name from another module."""


def _value(node: ast.expr, known: dict[str, float]) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in known:
        return known[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, known)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_value(node.left, known), _value(node.right, known))
    raise NotLiteral


UNIT_NAMES: dict[str, float] = {name: value for name, value in vars(common.units).items()
                                if name.isupper() and isinstance(value, (int, float))}


class Constant:
    def __init__(self, module: str, name: str, value: float, line: str, *, literal: bool) -> None:
        self.module, self.name, self.value, self.line, self.literal = module, name, value, line, literal

    def __repr__(self) -> str:
        return f"{self.module}: {self.name} = {self.value!r}"


def _module_constants(path: Path) -> Iterator[Constant]:
    module = path.relative_to(ROOT).as_posix()
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    known = dict(UNIT_NAMES)  # units count as literal: `16 * KIB` is a value written here
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, node = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, node = statement.target, statement.value
        else:
            continue
        if not isinstance(target, ast.Name) or not target.id.lstrip("_").isupper():
            continue
        try:
            value = _value(node, known)
        except (NotLiteral, ArithmeticError):
            yield Constant(module, target.id.lstrip("_"), float("nan"), "", literal=False)
            continue
        known[target.id] = value
        yield Constant(module, target.id.lstrip("_"), value, lines[statement.lineno - 1], literal=True)


def _all_constants() -> list[Constant]:
    found: list[Constant] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found.extend(_module_constants(path))
    return found


CONSTANTS = _all_constants()


def _is_limit(name: str) -> bool:
    return bool(LIMIT_WORDS & set(name.split("_")))


def _copies() -> dict[tuple[str, float], frozenset[str]]:
    where: defaultdict[tuple[str, float], set[str]] = defaultdict(set)
    for constant in CONSTANTS:
        if constant.literal and _is_limit(constant.name) and constant.module != LIMITS_MODULE:
            where[(constant.name, constant.value)].add(constant.module)
    return {key: frozenset(modules) for key, modules in where.items() if len(modules) > 1}


def test_no_limit_is_defined_twice() -> None:
    copies = _copies()
    assert not copies, ("the same limit (name and value) in several modules; define it once in "
                        f"common/limits.py and import it: {copies}")


def test_no_module_reuses_a_name_of_common_limits() -> None:
    names = {c.name for c in _module_constants(ROOT / LIMITS_MODULE) if c.name != "PURE"}
    reused = {(c.module, c.name) for c in CONSTANTS if c.name in names and c.module != LIMITS_MODULE}
    assert reused == ALLOWED_NAME_REUSE, (
        f"defined outside common/limits.py (import it instead): {sorted(reused - ALLOWED_NAME_REUSE)}; "
        f"no longer defined (shrink ALLOWED_NAME_REUSE): {sorted(ALLOWED_NAME_REUSE - reused)}")


def _int_defaults() -> dict[str, int]:
    defaults: dict[str, int] = {}
    for key in BROKER_KEYS:
        if isinstance(key.default, int) and not isinstance(key.default, bool):
            defaults[key.name] = key.default
    for definition in TOPIC_CONFIGS:
        try:
            value = default_value(definition.name)
        except KeyError:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            defaults.setdefault(definition.name, value)
    return defaults


UNIT_WORDS = frozenset({"MS", "S", "BYTES"})


def _says_default_of(name: str, key_words: set[str]) -> bool:
    """A `DEFAULT_` constant whose other words are the key's, in any order and with some left
    out (DEFAULT_OFFSETS_TOPIC_PARTITIONS for offsets.topic.num.partitions); at least two of
    them besides a unit, so that DEFAULT_TIMEOUT_MS does not name every *.timeout.ms key."""
    if not name.startswith("DEFAULT_"):
        return False
    words = set(name.split("_")[1:])
    return len(words - UNIT_WORDS) >= 2 and words <= key_words


def _config_copies() -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for key, default in _int_defaults().items():
        spelled = key.upper().replace(".", "_")
        key_words = set(spelled.split("_"))
        named_in_comment = re.compile(rf"#.*(?<![\w.]){re.escape(key)}(?![\w.])")
        for constant in CONSTANTS:
            if not constant.literal or constant.module in CONFIG_TABLES or constant.value != default:
                continue
            if spelled in constant.name or named_in_comment.search(constant.line) or (
                    _says_default_of(constant.name, key_words)):
                found[(constant.module, constant.name)] = key
    return found


def test_no_module_restates_a_config_default() -> None:
    copies = _config_copies()
    assert copies == ALLOWED_CONFIG_COPIES, (
        "a config default restated as a constant; read common.config.default_int(key) instead: "
        f"{ {k: v for k, v in copies.items() if k not in ALLOWED_CONFIG_COPIES} }; "
        f"fixed (shrink ALLOWED_CONFIG_COPIES): {sorted(set(ALLOWED_CONFIG_COPIES) - set(copies))}")


# The rules must be able to fail: each finds the copy it exists for in a module written here.
def test_the_rules_find_copies(tmp_path: Path) -> None:
    module = tmp_path / "copy.py"
    module.write_text("from common.units import KIB\n"
                      "READ_SIZE = 64 * KIB\n"
                      "SESSION_MS = 9000  # broker.session.timeout.ms\n"
                      "REPLICA_LAG_TIME_MAX_MS: int = 30_000\n"
                      "DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50\n"
                      "DEFAULT_TIMEOUT_MS = 30_000  # a tool's own default\n"
                      "FROM_A_READ = default_int('broker.session.timeout.ms')\n", encoding="utf-8")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = {c.name: c for c in _module_constants(module)}
    finally:
        ROOT = saved
    assert found["READ_SIZE"].value == common.limits.READ_SIZE and found["READ_SIZE"].literal
    assert not found["FROM_A_READ"].literal
    saved_constants = list(CONSTANTS)
    CONSTANTS.extend(found.values())
    try:
        copies = {module_and_name[1] for module_and_name in _config_copies() if module_and_name[0] == "copy.py"}
        assert copies == {"SESSION_MS", "REPLICA_LAG_TIME_MAX_MS", "DEFAULT_OFFSETS_TOPIC_PARTITIONS"}
    finally:
        CONSTANTS[:] = saved_constants


def test_rule_one_finds_a_copied_limit() -> None:
    line = "REQUEST_TIMEOUT = 30 * SECONDS"
    copies = [Constant(module, "REQUEST_TIMEOUT", 30.0, line, literal=True) for module in ("a.py", "b.py")]
    unrelated = Constant("c.py", "NO_LEADER", -1.0, "NO_LEADER = -1", literal=True)
    twin = Constant("d.py", "NO_LEADER", -1.0, "NO_LEADER = -1", literal=True)  # a sentinel, not a limit
    saved_constants = list(CONSTANTS)
    CONSTANTS.extend([*copies, unrelated, twin])
    try:
        assert _copies() == {("REQUEST_TIMEOUT", 30.0): frozenset({"a.py", "b.py"})}
    finally:
        CONSTANTS[:] = saved_constants


def test_an_admin_write_waits_for_what_the_controller_may_take() -> None:
    from quorum import admin_api  # the controller's own bounds of one forwarded, applied write

    assert common.limits.ADMIN_WRITE_TIMEOUT >= admin_api.FORWARD_TIMEOUT + admin_api.FORWARD_APPLY_WAIT
