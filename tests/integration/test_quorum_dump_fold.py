"""One real voter (pysyncobj on a loopback port): a dump writes the log as it is, the fold that
follows is encoded between ticks and installed without replay, the next dump holds the folded
snapshot, and a restart from it reaches the same image (quorum.metadata_log, quorum.fold_encoder)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack

from common.config_schema import Password
from common.waiting import wait_until_async
from localcluster.launcher import free_ports
from metadata.records import NoOp
from metadata.snapshot import decode_snapshot
from quorum.active_controller import ActiveController
from quorum.log_state import MetadataLogState
from quorum.metadata_log import DUMP_FILE, MetadataLog
from quorum.quorum_settings import QuorumSettings
from quorum.voters import Voter
from tests.integration import test_quorum_single_node

WAIT_S = 10.0
RETAINED = 6  # records a fold keeps: fold points every 3 records


class Voter1(test_quorum_single_node.Voter1):
    """A voter keeping RETAINED records at a fold, with its ActiveController running."""

    def __init__(self, data_dir: Path, port: int, fold_trigger_records: int = 10**9) -> None:
        self.log = MetadataLog(QuorumSettings(1, {1: Voter(1, "127.0.0.1", port)}, data_dir, Password("s3cret"),
                                              retained_records=RETAINED, fold_trigger_records=fold_trigger_records))
        self.controller = ActiveController(self.log)
        self.task = asyncio.create_task(self.controller.run())


voters = test_quorum_single_node.voters  # the fixture that closes every voter a test started


def dumped_state(path: Path) -> MetadataLogState:
    return MetadataLogState.decode_dump(msgpack.unpackb(path.read_bytes(), raw=False)["state"])


async def test_a_dump_then_its_fold_then_a_restart(tmp_path: Path, voters: list[Voter1]) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    first = Voter1(tmp_path, port)
    voters.append(first)
    await wait_until_async("an active controller", lambda: first.controller.is_active, WAIT_S)
    for _ in range(30):  # one chunk each
        assert (await first.controller.append([NoOp()], 2.0)).committed
    dumped_at = first.log.status().last_offset
    first.log.forceLogCompaction()

    # The dump is the log as it was (nothing folded inside pysyncobj's serializer) ...
    await wait_until_async("a dump", lambda: first.log.status().dump_offset == dumped_at, WAIT_S)
    on_disk = dumped_state(tmp_path / DUMP_FILE)
    assert on_disk.log_start_offset == 0 and on_disk.last_offset == dumped_at
    # ... and the fold after it, at least RETAINED records behind the dump, is installed between ticks.
    await wait_until_async("the fold", lambda: first.log.status().log_start_offset > 0, WAIT_S)
    status = first.log.status()
    assert dumped_at - RETAINED - 3 < status.log_start_offset - 1 <= dumped_at - RETAINED
    offset, snapshot = first.log.base_snapshot()
    assert offset == status.log_start_offset - 1 and decode_snapshot(snapshot).offset == offset
    assert [at for at, _ in first.log.records_from(offset + 1, 1000)] == list(range(offset + 1, dumped_at + 1))

    # The next dump holds the folded snapshot; a restart from it reaches the same image.
    assert (await first.controller.append([NoOp()], 2.0)).committed
    image = first.log.image()
    first.log.forceLogCompaction()
    await wait_until_async("a second dump", lambda: first.log.status().dump_offset == image.offset, WAIT_S)
    on_disk = dumped_state(tmp_path / DUMP_FILE)
    assert on_disk.log_start_offset == status.log_start_offset and on_disk.base_snapshot == snapshot
    assert on_disk.image == image
    voters.remove(first)
    await first.close()
    second = Voter1(tmp_path, port)
    voters.append(second)
    await wait_until_async("the log reloaded", lambda: second.log.status().last_offset >= image.offset, WAIT_S)
    assert second.log.status().log_start_offset == status.log_start_offset
    assert second.log.base_snapshot() == (offset, snapshot)
    await wait_until_async("an active controller again", lambda: second.controller.is_active, WAIT_S)
    assert second.log.image().topics == image.topics and second.log.image().offset > image.offset


async def test_enough_records_after_the_base_fold_without_a_dump(tmp_path: Path, voters: list[Voter1]) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    voter = Voter1(tmp_path, port, fold_trigger_records=20)
    voters.append(voter)
    await wait_until_async("an active controller", lambda: voter.controller.is_active, WAIT_S)
    for _ in range(10):  # one chunk each: fewer records than the trigger
        assert (await voter.controller.append([NoOp()], 2.0)).committed
    assert voter.log.status().log_start_offset == 0
    for _ in range(15):
        assert (await voter.controller.append([NoOp()], 2.0)).committed
    await wait_until_async("a fold", lambda: voter.log.status().log_start_offset > 0, WAIT_S)
    status = voter.log.status()
    assert status.dump_offset == -1 and status.last_offset - (status.log_start_offset - 1) >= RETAINED
    offset, snapshot = voter.log.base_snapshot()
    assert decode_snapshot(snapshot).offset == offset == status.log_start_offset - 1
