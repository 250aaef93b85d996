"""broker/share/persister.py: a share partition leader reads its state from the group's coordinator
again while the coordinator moves or loads (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
NOT_COORDINATOR), as Kafka's PersisterStateManager does, instead of passing the code to the share
consumer at once (librdkafka's ShareConsumer raises it from poll() as unexpected). A failed write
goes back to the member at once (the leader rolls the acknowledgement back: issue 31)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.share import persister
from broker.share.persister import COORDINATOR_ATTEMPTS, ShareStore
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)


class Topic:
    topic_id = "AAAAAAAAAAAAAAAAAAAAAA"


class Image:
    def topic(self, name: str) -> Any:
        return Topic() if name == "orders" else None


def store(answers: list[Any], monkeypatch: pytest.MonkeyPatch, slept: list[float]) -> tuple[ShareStore, list[Any]]:
    """A store whose coordinator calls answer `answers` in turn (an ErrorCode: no answer)."""
    s = ShareStore(Image, endpoint=None, client_id="test")  # type: ignore[arg-type]
    asked: list[Any] = []

    async def call(image: Any, group_id: str, api: Any, request: Any) -> Any:
        asked.append(api)
        return answers[len(asked) - 1]

    async def sleep(delay: float) -> None:
        slept.append(delay)
    monkeypatch.setattr(s, "_call", call)
    monkeypatch.setattr(persister.asyncio, "sleep", sleep)
    return s, asked


def answer(api: ApiKey, code: ErrorCode) -> Any:
    m = messages.response_module(api, persister.STATE_VERSION)
    if api is ApiKey.WRITE_SHARE_GROUP_STATE:
        return m.WriteShareGroupStateResponse(results=(m.WriteStateResult(
            topic_id=Topic.topic_id, partitions=(m.PartitionResult(partition=0, error_code=int(code)),)),))
    return m.ReadShareGroupStateResponse(results=(m.ReadStateResult(topic_id=Topic.topic_id, partitions=(
        m.PartitionResult(partition=0, error_code=int(code), state_epoch=0, start_offset=-1, state_batches=()),)),))


READ = ApiKey.READ_SHARE_GROUP_STATE


def test_a_moving_coordinator_is_read_again_until_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    s, asked = store([ErrorCode.COORDINATOR_NOT_AVAILABLE, answer(READ, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                      answer(READ, ErrorCode.NOT_COORDINATOR), answer(READ, ErrorCode.NONE)], monkeypatch, slept)
    code, snapshot = asyncio.run(s.read("g", TP, leader_epoch=1))
    assert code is ErrorCode.NONE and snapshot is None and len(asked) == 4  # no state yet: start fresh
    assert slept == [0.05, 0.1, 0.2]


def test_the_code_is_passed_on_after_the_last_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    s, asked = store([ErrorCode.COORDINATOR_NOT_AVAILABLE] * COORDINATOR_ATTEMPTS, monkeypatch, slept)
    code, snapshot = asyncio.run(s.read("g", TP, leader_epoch=1))
    assert code is ErrorCode.COORDINATOR_NOT_AVAILABLE and snapshot is None
    assert len(asked) == COORDINATOR_ATTEMPTS and len(slept) == COORDINATOR_ATTEMPTS - 1


def test_other_read_errors_and_failed_writes_are_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    s, asked = store([answer(READ, ErrorCode.FENCED_STATE_EPOCH),
                      answer(ApiKey.WRITE_SHARE_GROUP_STATE, ErrorCode.COORDINATOR_NOT_AVAILABLE)], monkeypatch, slept)
    assert asyncio.run(s.read("g", TP, leader_epoch=1)) == (ErrorCode.FENCED_STATE_EPOCH, None)
    code = asyncio.run(s.write("g", TP, leader_epoch=1, state_epoch=0, start_offset=0, batches=()))
    assert code is ErrorCode.COORDINATOR_NOT_AVAILABLE and len(asked) == 2 and slept == []
