"""broker/log/producer_snapshot.py: Kafka's producer snapshot format, and a partition reopening
from its latest snapshot to the same producer state (open transactions included) as a replay of
its whole log."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest

from broker.log.flusher import SegmentFlusher
from broker.log.partition_log import PartitionLog
from broker.log.producer_snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    latest_snapshot,
    snapshot_offsets,
    snapshot_path,
)
from broker.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from broker.replica_appends import rebuild_producer_state, truncate_follower, truncate_follower_fully
from common.log_config import LogConfig
from tests.log_helpers import NOW, open_log
from tests.unit.test_txn_partition import P1, P2, make_partition, marker, produce, txn_batch

ENTRIES = [
    ProducerStateEntry(7, 3, (BatchMetadata(10, 14, 100, 104, NOW),), last_timestamp=NOW, last_offset=104,
                       current_txn_first_offset=90, coordinator_epoch=2),
    ProducerStateEntry(9, 0, (), last_timestamp=NOW + 1, last_offset=120),  # only a marker left
]


def test_round_trip_in_kafkas_layout() -> None:
    data = encode_snapshot(ENTRIES)
    assert data[:2] == b"\x00\x01" and len(data) == 2 + 4 + 4 + 2 * 46
    assert decode_snapshot(data) == ENTRIES


@pytest.mark.parametrize("damage", [
    lambda d: d[:-1],                          # torn
    lambda d: b"\x00\x02" + d[2:],             # another version
    lambda d: d[:-1] + bytes([d[-1] ^ 1]),     # a flipped bit: the CRC
    lambda d: b"",
])
def test_damage_is_refused(damage) -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(damage(encode_snapshot(ENTRIES)))


def state_of(manager: ProducerStateManager) -> dict[int, tuple[int, int, int, int]]:
    return {pid: (e.producer_epoch, e.last_seq, e.current_txn_first_offset, e.coordinator_epoch)
            for pid, e in manager.entries.items()}


def test_reopening_from_snapshots_gives_the_replayed_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = LogConfig(segment_bytes=400)                      # a roll every few batches
    partition = make_partition(open_log(tmp_path, config))
    rebuild_producer_state(partition)                          # sets the close-time snapshot source
    produce(partition, txn_batch(P1, 0))
    for seq in range(0, 16, 2):
        produce(partition, txn_batch(P2, seq))
    marker(partition, P1, committed=False, coordinator_epoch=4)
    produce(partition, txn_batch(P1, 2))                      # P1's next transaction, open
    directory = partition.log.directory
    assert len(snapshot_offsets(directory)) == 2              # rolled more: the latest two kept
    replayed = state_of(partition.producer_state)
    ongoing = dict(partition.producer_state.ongoing)
    leo = partition.log.log_end_offset
    partition.log.close()
    assert snapshot_offsets(directory)[-1] == leo             # a clean close snapshots the log end
    reopened = make_partition(PartitionLog(directory, config, now_ms=NOW, had_clean_shutdown=True,
                                           recovery_point=leo, high_watermark=leo))
    starts: list[int] = []
    batches = PartitionLog.batches
    monkeypatch.setattr(PartitionLog, "batches", lambda self, start=0: (starts.append(start), batches(self, start))[1])
    rebuild_producer_state(reopened)
    assert starts == [leo]                                     # nothing replayed
    monkeypatch.undo()
    assert state_of(reopened.producer_state) == replayed
    assert dict(reopened.producer_state.ongoing) == ongoing
    # cut the log below the latest snapshots: they go, and the state is replayed without them
    truncate_follower(reopened, 5, "test", now_ms=NOW)
    assert all(offset <= 5 for offset in snapshot_offsets(directory))
    full = ProducerStateManager()
    full.rebuild(h for _, _, h in reopened.log.batches())
    assert state_of(reopened.producer_state) == state_of(full)
    reopened.log.close()


def test_a_roll_prunes_old_snapshots_on_the_removal_thread(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """On a `discard` mount an unlink waits for the disk (303 prunes in 20 s on one broker's event
    loop, up to 18 ms each): with a flusher, a roll's pruning runs on its removal thread."""
    removed: list[tuple[str, str]] = []
    real_unlink = os.unlink

    def unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if os.fspath(path).endswith(".snapshot"):
            removed.append((os.path.basename(path), threading.current_thread().name))
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", unlink)
    flusher = SegmentFlusher()
    partition = make_partition(open_log(tmp_path, LogConfig(segment_bytes=400), flusher=flusher))
    rebuild_producer_state(partition)
    for seq in range(0, 64, 2):  # four rolls
        produce(partition, txn_batch(P2, seq))
    flusher.shutdown()  # waits for the removals in flight
    assert len(snapshot_offsets(partition.log.directory)) == 2   # the latest two kept, as before
    assert len(removed) >= 2 and {thread for _, thread in removed} == {"log-delete"}
    partition.log.close()


def test_a_damaged_snapshot_is_skipped(tmp_path: Path) -> None:
    directory = tmp_path / "topic-0"
    directory.mkdir()
    snapshot_path(directory, 3).write_bytes(encode_snapshot(ENTRIES))
    snapshot_path(directory, 5).write_bytes(b"junk")
    snapshot_path(directory, 9).write_bytes(encode_snapshot(ENTRIES))   # past the log end
    assert latest_snapshot(directory, at_most=6) == (3, ENTRIES)
    assert snapshot_offsets(directory) == [3]


def test_a_dropped_partition_is_freed_by_reference_counting(tmp_path: Path) -> None:
    """No reference cycle through the log's snapshot source: a removed partition goes as its
    last reference does, not at a full collection (never, once the heap keeper froze it)."""
    partition = make_partition(open_log(tmp_path, LogConfig()))
    rebuild_producer_state(partition)
    produce(partition, txn_batch(P1, 0))
    partition.log.close()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        del partition
        assert gc.collect() == 0  # nothing was left for the cyclic collector
    finally:
        if was_enabled:
            gc.enable()


def test_the_snapshot_source_follows_a_new_producer_state(tmp_path: Path) -> None:
    partition = make_partition(open_log(tmp_path, LogConfig()))
    rebuild_producer_state(partition)
    produce(partition, txn_batch(P1, 0))
    assert partition.log.snapshot_source is not None
    assert decode_snapshot(partition.log.snapshot_source())[0].producer_id == P1
    truncate_follower_fully(partition, 5, "(test)", now_ms=NOW)
    assert decode_snapshot(partition.log.snapshot_source()) == []  # the emptied state's, not the old one's
