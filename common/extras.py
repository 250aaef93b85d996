"""The optional dependencies ("extras") a command needs, checked before the command starts.

`pip install tidelog` gives the broker, the controllers and the client commands; the chaos
engine and the Spark jobs need packages only their extra installs. A command that needs one
checks it first, so a missing package is a one-line error naming the `pip install` that
fixes it (exit 2, before anything runs), not a traceback after a whole chaos scenario:

    run = needs_extra("tidelog chaos run", "chaos", run_run)
    # tidelog chaos run: needs matplotlib, which is not installed (the chaos extra):
    #     pip install 'tidelog[chaos]'     (all on one line)

The check finds each module without importing it (`importlib.util.find_spec`): PySpark and
matplotlib take a second to import, and a command that does run imports them itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

USAGE_EXIT: Final = 2  # argparse's code: the command cannot run as asked

# extra -> the modules (import names) our code imports from it, as pyproject.toml's
# [project.optional-dependencies] lists their distributions.
EXTRAS: Final[Mapping[str, tuple[str, ...]]] = {
    # chaos.engine's producers and consumers; chaos.report.plots' timelines
    "chaos": ("confluent_kafka", "matplotlib"),
    # the data source (pyspark.sql.datasource), its Arrow batches, its offset look-ups
    "spark": ("pyspark", "pyarrow", "confluent_kafka"),
}
SOURCE_ROOT: Final = Path(__file__).resolve().parents[1]

Runner = Callable[[argparse.Namespace], int]


def missing_modules(modules: Sequence[str]) -> tuple[str, ...]:
    """The modules of `modules` that cannot be imported here (found by their spec, not imported)."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder refused it; ValueError: a module with no spec
            found = False
        if not found:
            missing.append(name)
    return tuple(missing)


def install_command(extra: str, source_root: Path = SOURCE_ROOT) -> str:
    """The pip install that adds `extra`: from this checkout when tidelog runs from one."""
    if (source_root / "pyproject.toml").is_file():  # `make up`'s editable install, or PYTHONPATH
        return f"pip install -e '{source_root}[{extra}]'"
    return f"pip install 'tidelog[{extra}]'"


def missing_extra_message(extra: str, modules: Sequence[str] | None = None) -> str | None:
    """One line naming what is missing of `extra` (or of `modules`, a part of it) and the
    pip install that fixes it; None when everything is there."""
    if extra not in EXTRAS:
        raise KeyError(f"no extra {extra!r}; the extras are {', '.join(sorted(EXTRAS))}")
    missing = missing_modules(EXTRAS[extra] if modules is None else modules)
    if not missing:
        return None
    names = " and ".join(missing)
    verb = "is" if len(missing) == 1 else "are"
    return f"needs {names}, which {verb} not installed (the {extra} extra): {install_command(extra)}"


def needs_extra(command: str, extra: str, run: Runner, modules: Sequence[str] | None = None) -> Runner:
    """`run`, preceded by the check of `extra` (or of `modules` of it): exit 2 with one line on
    stderr, before `run` starts anything, when a module is missing."""
    def checked(args: argparse.Namespace) -> int:
        message = missing_extra_message(extra, modules)
        if message is not None:
            print(f"{command}: {message}", file=sys.stderr)
            return USAGE_EXIT
        return run(args)
    checked.__doc__ = run.__doc__
    return checked
