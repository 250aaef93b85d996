"""common/extras.py: a command that needs an extra checks it before it starts, and names the
pip install that fixes it. A missing package is simulated in a subprocess by an import
blocker placed first on sys.meta_path (the package stays installed for every other test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.extras import EXTRAS, install_command, missing_extra_message, missing_modules

REPO = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 60.0  # a blocked command exits in well under a second; the margin is for a loaded machine

# Runs `tidelog <argv>` with the top-level packages named in argv[0] unimportable, as when their
# distribution is not installed: the finder refuses them before any other finder looks.
BLOCKED_RUN = """
import sys
blocked = set(sys.argv[1].split(",")) - {""}

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from tidelog.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_blocked(blocked: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED_RUN, ",".join(blocked), *argv], capture_output=True,
                          text=True, cwd=REPO, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)


# --- the pure parts ----------------------------------------------------------------------------


@pytest.mark.parametrize(("modules", "missing"), [
    (("json", "argparse"), ()),
    (("json", "tidelog_no_such_module"), ("tidelog_no_such_module",)),
    (("tidelog_no_such_module.sub",), ("tidelog_no_such_module.sub",)),  # its parent is missing
    ((), ()),
])
def test_missing_modules(modules: tuple[str, ...], missing: tuple[str, ...]) -> None:
    assert missing_modules(modules) == missing


def test_every_extra_is_installed_here() -> None:
    """The test venv has every extra (pyproject's test extra): no command here should refuse."""
    assert {extra: missing_extra_message(extra) for extra in EXTRAS} == {extra: None for extra in EXTRAS}


def test_install_command_from_a_checkout_and_from_an_install(tmp_path: Path) -> None:
    assert install_command("chaos", tmp_path) == "pip install 'tidelog[chaos]'"
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'tidelog'\n")
    assert install_command("spark", tmp_path) == f"pip install -e '{tmp_path}[spark]'"


def test_message_names_every_missing_module_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec: a None entry is "not importable"
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    message = missing_extra_message("chaos")
    assert message is not None and message.startswith(
        "needs confluent_kafka and matplotlib, which are not installed (the chaos extra): pip install ")
    assert message.endswith("[chaos]'")
    assert missing_extra_message("chaos", ("confluent_kafka",)) is not None
    assert missing_extra_message("spark", ("pyspark",)) is None
    with pytest.raises(KeyError, match="no extra 'graphs'"):
        missing_extra_message("graphs")


# --- the commands, each in a subprocess with a package blocked ----------------------------------


@pytest.mark.parametrize(("blocked", "argv", "missing", "extra"), [
    (("matplotlib",), ("chaos", "run", "leader-isolation-acks1"), "matplotlib", "chaos"),
    (("confluent_kafka",), ("chaos", "run", "leader-isolation-acks1"), "confluent_kafka", "chaos"),
    (("matplotlib",), ("chaos", "report", "no-such-dir"), "matplotlib", "chaos"),
    (("pyspark",), ("spark", "ingest", "--topic", "t", "--to", "out", "--bootstrap-server", "127.0.0.9:1"),
     "pyspark", "spark"),
    (("pyarrow", "confluent_kafka"), ("spark", "ingest", "--topic", "t", "--to", "out"),
     "pyarrow and confluent_kafka", "spark"),
])
def test_command_without_its_extra_exits_2_before_starting(
        tmp_path: Path, blocked: tuple[str, ...], argv: tuple[str, ...], missing: str, extra: str) -> None:
    report_dir = tmp_path / "report"
    extra_args = ("--report-dir", str(report_dir)) if argv[:2] == ("chaos", "run") else ()
    done = run_blocked(blocked, *argv, *extra_args, *(("--data-dir", str(tmp_path)) if argv[0] == "spark" else ()))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""  # nothing started: `chaos run` prints its schedule first thing when it starts
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    command = "tidelog " + " ".join(argv[:2])
    assert lines[0].startswith(f"{command}: needs {missing}, which ")
    assert lines[0].endswith(f"(the {extra} extra): {install_command(extra)}")
    assert not report_dir.exists()


@pytest.mark.parametrize(("argv", "error"), [
    (("chaos", "report", "no-such-dir"), "tidelog chaos report: [Errno 2]"),
    (("spark", "ingest", "--topic", "t", "--to", "out"), "tidelog spark ingest: no broker to talk to"),
])
def test_the_same_commands_with_the_extra_get_past_the_check(
        tmp_path: Path, argv: tuple[str, ...], error: str) -> None:
    """The control for the table above: without the blocker they fail later, for their own reason."""
    done = run_blocked((), *argv, *(("--data-dir", str(tmp_path)) if argv[0] == "spark" else ()))
    assert done.returncode == 2 and done.stderr.startswith(error), done.stderr
    assert "pip install" not in done.stderr
