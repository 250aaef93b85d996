"""The `cleaner-offset-checkpoint` of a log directory: per partition, the offset below which
its log is clean (Kafka's file and format; written atomically like the other checkpoints).

A missing or damaged file only costs work: every compacted log is then dirty from its
log start offset, and the next cleaning maps it again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from broker.log.checkpoint_file import CorruptCheckpointError
from broker.log.log_manager import CLEANER_OFFSET_CHECKPOINT, offset_checkpoint
from common.topic_partition import TopicPartition

log = logging.getLogger(__name__)


def read_cleaner_offsets(log_dir: Path) -> dict[TopicPartition, int]:
    """The checkpointed first dirty offsets of `log_dir`'s partitions ({} when absent)."""
    try:
        return dict(offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT).read())
    except CorruptCheckpointError as e:
        log.error("%s; every compacted log in %s is treated as dirty from its start", e, log_dir)
        return {}


def write_cleaner_offsets(log_dir: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Replace `log_dir`'s checkpoint with `offsets`."""
    offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT).write(sorted(offsets.items()))
