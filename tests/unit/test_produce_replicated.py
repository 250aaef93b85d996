"""broker/handlers/produce.py with acks=all: the answer is a future the ISR's last fetch sets, with
the response built (`ReplicaManager.watch_replication`); no task or coroutine per produce waits
for it (issue 35). One deadline for the request; an ISR of the leader alone answers at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.handlers.context import ClientInfo
from broker.handlers.produce import NOT_REPLICATED, produce_now
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from broker.server import Later
from common.errors import ErrorCode
from common.log_config import LogConfig
from common.protocol import produce
from common.topic_partition import TopicPartition
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import Partition, Topic
from tests.log_helpers import NOW, batch
from tests.unit.test_request_handler import ADVERTISED, IMAGE, ME, produce_request, replay

PAIR = replay(IMAGE, Topic("pair", "PAIR"), *(Partition("PAIR", p, (1, 2), (1, 2), leader=1) for p in range(2)))
PAIR_0, PAIR_1 = TopicPartition("pair", 0), TopicPartition("pair", 1)
CLIENT = ClientInfo.of("canary", "127.0.0.1")


def leader(tmp_path: Path) -> tuple[RequestHandler, ReplicaManager, LogManager]:
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, PAIR, ME), PAIR)
    return RequestHandler(ME, replicas, lambda: PAIR, ADVERTISED, None), replicas, log_manager  # type: ignore[arg-type]


async def test_the_isr_s_last_fetch_sets_the_built_answer(tmp_path: Path) -> None:
    handler, replicas, log_manager = leader(tmp_path)
    try:
        answer = produce_now(handler.context, produce_request(-1, ("pair", 0, batch(2)), ("pair", 1, batch(3))),
                             8, CLIENT)
        assert isinstance(answer, Later)
        future = answer.answer
        assert isinstance(future, asyncio.Future) and not future.done()  # a future, no coroutine
        replicas.read(PAIR_0, 2, 1 << 20, replica_id=2)  # partition 0 replicated, 1 not yet
        assert not future.done()
        replicas.read(PAIR_1, 3, 1 << 20, replica_id=2)
        assert future.done()  # set inside the follower's fetch: no loop pass, no task
        response = future.result()
        assert isinstance(response, produce.ProduceResponse)
        assert [(p.partition_index, p.error_code, p.base_offset) for p in response.responses[0].partitions] == [
            (0, 0, 0), (1, 0, 0)]
        assert replicas.produce_purgatory.watched(PAIR_0) == replicas.produce_purgatory.watched(PAIR_1) == 0
    finally:
        log_manager.shutdown()


async def test_one_deadline_answers_what_the_isr_did_not_reach(tmp_path: Path) -> None:
    handler, replicas, log_manager = leader(tmp_path)
    try:
        answer = produce_now(handler.context, produce_request(
            -1, ("pair", 0, batch(1)), ("pair", 1, batch(1)), timeout_ms=50), 8, CLIENT)
        assert isinstance(answer, Later)
        replicas.read(PAIR_0, 1, 1 << 20, replica_id=2)
        response = await asyncio.wait_for(answer.answer, 5.0)
        assert [(p.error_code, p.error_message) for p in response.responses[0].partitions] == [
            (0, None), (int(ErrorCode.REQUEST_TIMED_OUT), NOT_REPLICATED)]
    finally:
        log_manager.shutdown()


async def test_an_isr_of_the_leader_alone_answers_at_once(tmp_path: Path) -> None:
    handler, _, log_manager = leader(tmp_path)
    try:
        response = produce_now(handler.context, produce_request(-1, ("orders", 0, batch(2))), 8, CLIENT)
        assert isinstance(response, produce.ProduceResponse)
        assert (response.responses[0].partitions[0].error_code, response.responses[0].partitions[0].base_offset) \
            == (0, 0)
    finally:
        log_manager.shutdown()
