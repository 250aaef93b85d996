"""Data loss in a read range: offsets the plan promised that the log no longer holds.

Spark's rule (failOnDataLoss): with true the query fails, with false a warning is logged
and the read carries on at what is still there. Both task readers (confluent-kafka and
raw Fetch) decide the same way here.
"""

from __future__ import annotations

import logging

log = logging.getLogger("tidelog.spark")


class DataLossError(RuntimeError):
    """Records in the requested range are gone from the log (and failOnDataLoss is true)."""


def report_data_loss(message: str, fail: bool) -> None:
    """Raise (failOnDataLoss=true) or warn, with Spark's advice either way."""
    if fail:
        raise DataLossError(f"{message}. Some data may have been lost because it is not available in Kafka "
                            "any more (aged out, deleted topic, truncated log). If you want your query to "
                            "carry on in such cases, set the source option failOnDataLoss to false.")
    log.warning("%s. Some data may have been lost; carrying on because failOnDataLoss is false.", message)
