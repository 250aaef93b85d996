"""The integration tests' clusters fork their nodes from tidelog.testing.zygote (cluster_fixtures.
spawn_node), as the plugin's clusters do, under the same ini option `tidelog_fast_start`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import cluster_fixtures
from tidelog.testing.zygote import Zygote

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    cluster_fixtures.FORK_NODES = bool(config.getini("tidelog_fast_start"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run with integration tests starts the zygote now: its imports (a few seconds of CPU) overlap
    the collection's end and the first test's setup instead of delaying the first cluster."""
    if cluster_fixtures.FORK_NODES and any(HERE in Path(item.path).parents for item in session.items):
        Zygote.shared()
