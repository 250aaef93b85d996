"""broker/replication/replica_fetcher.py over a real connection: each fetch answer is handled
(appended) and the next Fetch written in the connection's read callback, not by waking the
fetcher's task; what needs the task (a partition's error answer and its back-off, nothing left
to fetch) still gets it, the rounds go on after it, and the fetcher's shutdown leaves no task
and no connection behind."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from common.errors import ErrorCode
from common.protocol import fetch
from common.protocol.api_keys import ApiKey
from common.request_versions import FETCH_VERSION
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic
from tests.log_helpers import batch
from tests.unit.test_replica_fetcher import LEADER, ME, follower

HOST = "127.0.0.1"
TP = TopicPartition("t", 0)
ROUNDS = 6
ERROR_AT = 3  # the fetch answered NOT_LEADER_OR_FOLLOWER (the leader behind the metadata)


def image(port: int) -> MetadataImage:
    return apply(EMPTY_IMAGE, enumerate([
        BeginEpoch(1),
        *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", HOST, port),)) for b in (LEADER, ME)),
        *(BrokerRegistrationChange(b, i, fenced=False) for i, b in enumerate((LEADER, ME), start=1)),
        Topic("t", "T"),
        Partition("T", 0, (LEADER, ME), (LEADER, ME), leader=LEADER, leader_epoch=1),
    ]))


class Leader:
    """Answers Fetch k with one record at the fetch offset (an error at ERROR_AT), until ROUNDS;
    then holds the fetch. Notes each fetch's offset and loop time."""

    def __init__(self) -> None:
        self.fetches: list[tuple[int, float]] = []  # (fetch offset, loop time)
        self.done = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:  # until the follower closes
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = memoryview(await reader.readexactly(size))
                api_key, version, correlation_id, client_id = struct.unpack_from(">hhih", frame)
                assert api_key == ApiKey.FETCH and version == FETCH_VERSION
                request = fetch.decode_fetch_request(frame[10 + client_id:], version)
                named = [p.fetch_offset for t in request.topics for p in t.partitions]
                # the session's offset when the fetch names nothing (the errored partition's
                # entry did not change: its retry is not named)
                offset = self.fetches[-1][0] if not named else named[0]
                self.fetches.append((offset, loop.time()))
                k = len(self.fetches)
                if k > ROUNDS:
                    self.done.set()
                    continue
                answer = fetch.FetchPartitionResponse(
                    0, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, None) if k == ERROR_AT else \
                    fetch.FetchPartitionResponse(0, 0, offset, batch(1, base_offset=offset, partition_leader_epoch=1),
                                                 log_start_offset=0)
                body = b"".join(fetch.encode_fetch_response(  # type: ignore[arg-type]
                    fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", (answer,)),), 0, 77), version))
                writer.write(struct.pack(">ii", 4 + len(body), correlation_id) + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def test_answers_are_appended_in_the_read_callback_and_an_error_goes_through_the_task(tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = Leader()
        server = await asyncio.start_server(leader.serve, HOST, 0)
        metadata = image(server.sockets[0].getsockname()[1])
        try:
            async with follower(tmp_path, metadata) as (replicas, manager):
                appended_in: list[asyncio.Task[object] | None] = []
                append = replicas.append_as_follower

                def noted(*args: object) -> object:
                    appended_in.append(asyncio.current_task())
                    return append(*args)  # type: ignore[arg-type]
                replicas.append_as_follower = noted  # type: ignore[method-assign,assignment]
                replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, metadata, ME), metadata)
                fetcher = manager.fetchers[LEADER]
                async with asyncio.timeout(10):
                    await leader.done.wait()
                partition = replicas.get_partition(TP)
                assert partition is not None and partition.log.log_end_offset == ROUNDS - 1
                # one fetch per offset, the errored one asked again after its back-off
                assert [offset for offset, _ in leader.fetches] == [0, 1, 2, 2, 3, 4, 5]
                assert leader.fetches[ERROR_AT][1] - leader.fetches[ERROR_AT - 1][1] >= 0.015
                assert appended_in == [None] * (ROUNDS - 1)  # never in the fetcher's task
                task, conn = fetcher.task, fetcher._conn
                assert task is not None and not task.done() and conn is not None
                await manager.shutdown()
                assert task.done() and conn.closed
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
