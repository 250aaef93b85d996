"""The console test's module cluster (`Cluster(fast_start=cluster_fixtures.FORK_NODES)`) forks its
nodes from the test zygote, as the integration clusters do, under the same ini option
`tidelog_fast_start`; the hooks are cluster_fixtures' own (see tests/integration/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import cluster_fixtures

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    cluster_fixtures.configure(config)


def pytest_collection_finish(session: pytest.Session) -> None:
    cluster_fixtures.start_zygote_early(session, HERE)
