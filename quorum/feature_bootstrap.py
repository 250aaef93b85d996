"""The activation records: finalized features written right after an active controller's BeginEpoch.

    controller = ActiveController(FeatureBootstrapLog(log))

Kafka's QuorumController appends ActivationRecordsGenerator's records (the bootstrap metadata
of a new cluster, or metadata.version 3.0-IV1 for an old log) as it claims leadership. Here the
wrapper appends them once its BeginEpoch committed and before `ActiveController` calls itself
active: every earlier entry is applied by then (so the image tells a new cluster from an old
one exactly), and no decision (a broker registration) can run in between, because nothing is
queued before the controller is active. If they do not commit, the outcome returned is theirs,
and the controller begins its epoch again (a retried BeginEpoch of the same epoch is allowed),
finalizing then; once a metadata.version is in the log there is nothing to add.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from metadata.image import MetadataImage
from metadata.records import AbortTransaction, BeginEpoch, FeatureLevel, Record
from quorum.active_controller import QuorumLog
from quorum.feature_control import DEFAULT_MIN_INSYNC_REPLICAS, activation_records, is_new_cluster
from quorum.log_state import AppendOutcome

logger = logging.getLogger(__name__)


def _is_begin_epoch_chunk(records: Sequence[Record]) -> bool:
    """Only BeginEpoch, after an AbortTransaction or alone: what ActiveController._begin_epoch appends."""
    kinds = tuple(type(r) for r in records)
    return kinds in ((BeginEpoch,), (AbortTransaction, BeginEpoch))


class FeatureBootstrapLog:
    """A QuorumLog that appends the activation records after a committed BeginEpoch, when the log needs them."""

    def __init__(self, log: QuorumLog, *, min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS) -> None:
        self._log = log
        self._min_insync_replicas = min_insync_replicas  # this controller's static config

    def leadership(self) -> tuple[bool, int]:
        return self._log.leadership()

    def leader_address(self) -> str | None:
        return self._log.leader_address()

    def fatal_error(self) -> str | None:
        return self._log.fatal_error()

    def image(self) -> MetadataImage:
        return self._log.image()

    def in_transaction(self) -> bool:
        return self._log.in_transaction()

    def add_state_listener(self, listener: Callable[[], None]) -> None:
        self._log.add_state_listener(listener)

    def remove_state_listener(self, listener: Callable[[], None]) -> None:
        self._log.remove_state_listener(listener)

    async def append_chunks(self, chunks: Sequence[bytes], epoch: int, timeout_s: float) -> list[AppendOutcome]:
        return await self._log.append_chunks(chunks, epoch, timeout_s)  # never a BeginEpoch: nothing to add

    async def append(self, records: Sequence[Record], epoch: int, timeout_s: float, *,
                     atomic: bool = True) -> AppendOutcome:
        outcome = await self._log.append(records, epoch, timeout_s, atomic=atomic)
        if not (outcome.committed and _is_begin_epoch_chunk(records)):
            return outcome
        image = self._log.image()  # every entry up to our BeginEpoch is applied now
        extra = activation_records(image, min_insync_replicas=self._min_insync_replicas)
        if not extra:
            return outcome
        levels = ", ".join(f"{r.name}={r.level}" for r in extra if isinstance(r, FeatureLevel))
        configs = len(extra) - sum(isinstance(r, FeatureLevel) for r in extra)
        why = ("a new cluster" if is_new_cluster(image)
               else f"a metadata log without metadata.version, at offset {image.offset}")
        finalized = await self._log.append(extra, epoch, timeout_s, atomic=True)
        if not finalized.committed:  # the controller begins its epoch again, and we with it
            logger.warning("Could not finalize features after BeginEpoch(%d) (%s): %s %s", epoch, why,
                           finalized.kind.value, finalized.reason)
            return finalized
        logger.info("Finalized features after BeginEpoch(%d) (%s) at offsets %s-%s: %s%s", epoch, why,
                    finalized.first_offset, finalized.last_offset, levels,
                    f", and {configs} cluster config record(s) ELR needs" if configs else "")
        return replace(finalized, first_offset=outcome.first_offset)
