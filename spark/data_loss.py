"""Data loss in a read range: offsets the plan promised that the log no longer holds.

Spark's rule (failOnDataLoss): with true the query fails, with false a warning is logged
and the read carries on at what is still there. Both task readers (confluent-kafka and
raw Fetch) decide the same way here.
"""

from __future__ import annotations

import logging

from spark.offsets import OffsetRange

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


def no_progress(offset_range: OffsetRange, position: int, high: int, poll_timeout_ms: int, fail: bool,
                why: str = "") -> None:
    """kafkaConsumer.pollTimeoutMs passed with no record at `position`: a log that now ends
    (`high`) below it and short of the range is data loss; otherwise a TimeoutError (Spark
    retries the task)."""
    name = f"{offset_range.topic}-{offset_range.partition}"
    if position >= high and high < offset_range.end:  # below `high` the records exist: not a loss
        report_data_loss(f"offsets {position} to {offset_range.end - 1} of {name} are gone (the log "
                         f"now ends at {high})", fail)
        return
    raise TimeoutError(f"no records of {name} from offset {position} (up to {offset_range.end}) within "
                       f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms}{why}")


def resume_point(offset_range: OffsetRange, position: int, low: int, high: int, fail: bool) -> tuple[int, bool]:
    """Where a read answered "offset `position` out of range" goes on, given the log's `low`
    and `high` watermarks now: (next position, finished). Below `low` the records are gone
    (data loss) and the read skips to what is left; below `high` they exist and a leader
    answered from a stale view (it just took over): read `position` again; at or past `high`
    the log was truncated below the range (data loss) and the read is finished."""
    name = f"{offset_range.topic}-{offset_range.partition}"
    if position < low:
        report_data_loss(f"offsets {position} to {min(low, offset_range.end) - 1} of {name} are gone "
                         f"(the log now starts at {low})", fail)
        return (offset_range.end, True) if low >= offset_range.end else (low, False)
    if position < high:
        return position, False
    report_data_loss(f"offsets {position} to {offset_range.end - 1} of {name} are gone (the log now ends at "
                     f"{high})", fail)
    return offset_range.end, True
