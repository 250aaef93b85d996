"""Tests for common/log_setup.py: line format, node tag on every logger, idempotence, level."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from common.log_setup import LEVEL_ENV, resolve_level, setup_logging

LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) \[(?P<node>[^\]]+)\] "
    r"(?P<logger>\S+): (?P<message>.*)"
)


@pytest.fixture(autouse=True)
def restore_root_logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Logging is process-wide: put the root logger back as each test found it."""
    monkeypatch.delenv(LEVEL_ENV, raising=False)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[re.Match[str]]:
    matches = [LINE.fullmatch(line) for line in stream.getvalue().splitlines()]
    assert all(matches), stream.getvalue()
    return matches  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("node_id", "role", "tag"),
    [
        (1, "broker", "broker-1"),
        (3000, "controller", "controller-3000"),
        (None, "tidelog", "tidelog"),  # before the config (and so node.id) is read
    ],
)
def test_every_line_carries_role_and_node(node_id: int | None, role: str, tag: str) -> None:
    stream = io.StringIO()
    setup_logging(node_id, role, stream=stream)
    logging.getLogger("broker.log.partition_log").info("Rolled new segment at offset %d", 42)
    logging.getLogger("aiohttp.access").warning("third-party line")  # not one of ours
    first, second = lines(stream)
    assert first.groupdict() == {
        "level": "INFO", "node": tag, "logger": "broker.log.partition_log",
        "message": "Rolled new segment at offset 42",
    }
    assert (second["level"], second["node"], second["logger"]) == ("WARNING", tag, "aiohttp.access")


def test_second_call_replaces_instead_of_duplicating() -> None:
    first, second = io.StringIO(), io.StringIO()
    before = len(logging.getLogger().handlers)
    setup_logging(None, "broker", stream=first)
    setup_logging(2, "broker", stream=second)  # e.g. once node.id is read from the config
    assert len(logging.getLogger().handlers) == before + 1
    logging.getLogger("x").info("once")
    assert first.getvalue() == ""
    assert [m["node"] for m in lines(second)] == ["broker-2"]


def test_level_argument_filters() -> None:
    stream = io.StringIO()
    setup_logging(1, "broker", level="warn", stream=stream)
    logging.getLogger("x").info("dropped")
    logging.getLogger("x").error("kept")
    assert [m["message"] for m in lines(stream)] == ["kept"]


LEVELS = [
    (None, None, logging.INFO),
    (None, "DEBUG", logging.DEBUG),
    (None, "trace", logging.DEBUG),
    ("ERROR", "DEBUG", logging.ERROR),  # an explicit argument wins over the environment
    (" warning ", None, logging.WARNING),
    ("FATAL", None, logging.CRITICAL),
]


@pytest.mark.parametrize(("argument", "env", "expected"), LEVELS)
def test_resolve_level(
    monkeypatch: pytest.MonkeyPatch, argument: str | None, env: str | None, expected: int
) -> None:
    if env is not None:
        monkeypatch.setenv(LEVEL_ENV, env)
    assert resolve_level(argument) == expected


def test_env_level_applies_to_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEVEL_ENV, "DEBUG")
    stream = io.StringIO()
    setup_logging(1, "controller", stream=stream)
    logging.getLogger("quorum").debug("visible")
    assert [m["level"] for m in lines(stream)] == ["DEBUG"]


@pytest.mark.parametrize(
    ("argument", "env", "named"), [("LOUD", None, "level"), (None, "LOUD", LEVEL_ENV)]
)
def test_unknown_level_is_named(
    monkeypatch: pytest.MonkeyPatch, argument: str | None, env: str | None, named: str
) -> None:
    if env is not None:
        monkeypatch.setenv(LEVEL_ENV, env)
    with pytest.raises(ValueError, match=f"unknown log level 'LOUD' \\(from {named}\\)"):
        resolve_level(argument)
