"""One real voter in this process (a real pysyncobj SyncObj on a loopback port): the journal +
dump restart path, the dump's plain format, a dump that cannot be loaded stopping the node,
and a stranger's pickle never being loaded (the cluster password)."""

from __future__ import annotations

import asyncio
import gzip
import os
import pickle
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from common.config_schema import Password
from metadata.records import BeginEpoch, NoOp, Topic
from quorum.active_controller import ActiveController
from quorum.log_state import OutcomeKind
from quorum.metadata_log import DUMP_FILE, JOURNAL_FILE, MetadataLog
from quorum.quorum_settings import QuorumSettings
from quorum.voters import Voter
from localcluster.launcher import free_ports
from common.waiting import wait_until_async

WAIT_S = 10.0


def settings(data_dir: Path, port: int) -> QuorumSettings:
    return QuorumSettings(1, {1: Voter(1, "127.0.0.1", port)}, data_dir, Password("s3cret"))


async def until(what: str, condition: Callable[[], Any]) -> Any:
    return await wait_until_async(what, condition, WAIT_S, poll_s=0.02)


class Voter1:
    """A MetadataLog with its ActiveController running, stopped on exit."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.log = MetadataLog(settings(data_dir, port))
        self.controller = ActiveController(self.log)
        self.task = asyncio.create_task(self.controller.run())

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.log.close()


@pytest.fixture
async def voters() -> AsyncIterator[list[Voter1]]:
    started: list[Voter1] = []
    try:
        yield started
    finally:
        for voter in started:  # even when the test failed half-way
            await voter.close()


async def test_restart_from_journal_and_dump(tmp_path: Path, voters: list[Voter1]) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    first = Voter1(tmp_path, port)
    voters.append(first)
    await until("an active controller", lambda: first.controller.is_active)
    epoch = first.controller.epoch
    assert epoch is not None
    assert (await first.controller.append([Topic("orders", "t-orders")], 2.0)).committed
    for _ in range(20):
        assert (await first.controller.append([NoOp()], 2.0)).committed
    first.log.forceLogCompaction()
    dumped_at = first.log.status().last_offset
    await until("a dump", lambda: first.log.status().dump_offset == dumped_at)
    for _ in range(5):  # after the dump: in the journal only
        assert (await first.controller.append([NoOp()], 2.0)).committed
    before = first.log.records_from(0, 1000)
    image = first.log.image()

    # The dump is plain msgpack (no pickle, no gzip) holding our state and pysyncobj's bookkeeping.
    raw = (tmp_path / DUMP_FILE).read_bytes()
    assert raw[:2] != gzip.compress(b"")[:2]
    dump = msgpack.unpackb(raw, raw=False)
    assert dump["format"] == "tidelog-quorum-dump" and isinstance(dump["state"], bytes)
    assert (tmp_path / JOURNAL_FILE).exists()

    voters.remove(first)
    await first.close()
    second = Voter1(tmp_path, port)
    voters.append(second)
    await until("the log reloaded", lambda: second.log.status().last_offset >= image.offset)
    assert second.log.records_from(0, 1000)[:len(before)] == before
    await until("an active controller again", lambda: second.controller.is_active)
    after = second.log.records_from(0, 1000)
    assert after[:len(before)] == before
    assert after[len(before):] == [(len(before), BeginEpoch(second.controller.epoch))]
    assert second.controller.epoch > epoch
    assert second.log.image().topics == image.topics
    fenced = await second.log.append([NoOp()], epoch, 2.0)
    assert fenced.kind is OutcomeKind.FENCED


async def test_a_dump_that_cannot_be_loaded_stops_the_voter(tmp_path: Path, voters: list[Voter1]) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    first = Voter1(tmp_path, port)
    voters.append(first)
    await until("an active controller", lambda: first.controller.is_active)
    first.log.forceLogCompaction()
    await until("a dump", lambda: first.log.status().dump_offset >= 0)
    voters.remove(first)
    await first.close()
    (tmp_path / DUMP_FILE).write_bytes(b"\x81\xa6format\xa4nope")

    second = Voter1(tmp_path, port)
    voters.append(second)
    reason = await until("a fatal error", second.log.fatal_error)
    assert "cannot load metadata log dump" in reason


class _MakesADirectory:
    """A pickle that creates a directory when loaded: what a stranger could send without a password."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return os.mkdir, (str(self.path),)


async def test_a_stranger_pickle_is_never_loaded(tmp_path: Path, voters: list[Voter1]) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    voter = Voter1(tmp_path / "data", port)
    voters.append(voter)
    await until("an active controller", lambda: voter.controller.is_active)
    marker = tmp_path / "pwned"
    payload = zlib.compress(pickle.dumps(_MakesADirectory(marker)))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(2):  # as the first message, and again in case the first was taken as a key
            writer.write(struct.pack("i", len(payload)) + payload)
        await writer.drain()
        async with asyncio.timeout(WAIT_S):
            assert await reader.read() == b""  # the voter hangs up on what it cannot decrypt
    finally:
        writer.close()
    assert not marker.exists()
    assert (await voter.controller.append([NoOp()], 2.0)).committed
