"""The tidelog.testing tests' own clusters (fault, link and power-loss ones) fork their nodes from
the test zygote when ini `tidelog_fast_start` says so (cluster_fixtures.FORK_NODES), as the plugin's
clusters do; test_zygote and the plugin tests choose for themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import cluster_fixtures

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    cluster_fixtures.configure(config)


def pytest_collection_finish(session: pytest.Session) -> None:
    cluster_fixtures.start_zygote_early(session, HERE)
