"""The PySpark data source for tidelog topics: `spark.read.format("tidelog")` after `register(spark)`.

The pure parts (`options`, `offsets`) import without PySpark; `register` and
`TidelogDataSource` load it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark.data_source import TidelogDataSource

__all__ = ["TidelogDataSource", "register"]


def register(session: SparkSession) -> None:
    """Make `format("tidelog")` available in `session` (same as `session.dataSource.register(...)`)."""
    from spark.data_source import TidelogDataSource

    session.dataSource.register(TidelogDataSource)


def __getattr__(name: str) -> Any:
    if name == "TidelogDataSource":
        from spark.data_source import TidelogDataSource

        return TidelogDataSource
    raise AttributeError(f"module 'spark' has no attribute {name!r}")
