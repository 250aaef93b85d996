"""Sends a leader's ISR and leader-recovery changes to the controller as AlterPartition.

    manager = AlterPartitionManager(client, broker_id, broker_epoch=lambda: epoch)
    manager.submit(AlterPartitionItem(...), on_result)   # False: one is in flight already
    task = asyncio.create_task(manager.run())

Kafka's DefaultAlterPartitionManager: items queue up per partition, at most one per
partition at a time, and go to the active controller in one batched RPC at a time. The
result of each item reaches its callback: `(error_code, partition_reply)`. Nothing is
applied here — the leader changes its ISR when the committed metadata log says so.

Not Kafka's: one RPC carries at most `MAX_ITEMS_PER_REQUEST` items, oldest first; the rest go
in the next one. The controller answers an RPC in one decision, and a restarted broker's
followers catching up made one of 33,000 partitions (every ISR expansion of a leader at
100,000 partitions): seconds on the controller's loop with no heartbeat answered. Java does
that in milliseconds; we bound it. The bound is 5x the controller's own partition moves
(quorum.controller_result.MAX_PARTITIONS_PER_DECISION) because only one RPC is in flight and
its round trip (queue, Raft commit, answer) took 1-3 s on a loaded 2-core box whatever its size:
at 1,000 items the 66,000 expansions of a restart at 100,000 partitions took ~100 s, while a
5,000-item decision holds the controller's loop ~0.2 s. Each answered RPC logs one line
(counts per error, a few partitions each); the per-partition lines are the caller's, at DEBUG
when many are pending (`pending`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from broker.controller_client import ControllerClient, ControllerUnavailableError
from common.topic_partition import TopicPartition
from common import rpc, rpc_messages
from common.errors import ErrorCode

log = logging.getLogger(__name__)

# An RPC that could not reach any controller answers each item with this (retriable).
CONTROLLER_UNAVAILABLE: Final = int(ErrorCode.REQUEST_TIMED_OUT)
RECOVERED: Final = 1
MAX_ITEMS_PER_REQUEST: Final = 5_000  # partitions in one AlterPartition RPC (one controller decision)
SHOWN_PER_ERROR: Final = 5  # partitions a batch's log line names for each error (the rest are counted)


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """One partition's proposed state (AlterPartitionRequest.PartitionData)."""

    tp: TopicPartition
    topic_id: str
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch or -1)
    leader_recovery_state: int = RECOVERED

    def describe(self) -> str:
        return (f"{self.tp} ISR {[b for b, _ in self.new_isr]} at leader epoch {self.leader_epoch}, "
                f"partition epoch {self.partition_epoch}")


OnResult = Callable[[int, rpc_messages.AlterPartitionPartitionReply | None], None]


class AlterPartitionManager:
    """Batches AlterPartition items to the controller; one RPC in flight."""

    def __init__(self, client: ControllerClient, broker_id: int, *,
                 broker_epoch: Callable[[], int]) -> None:
        self._client = client
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._queued: dict[TopicPartition, tuple[AlterPartitionItem, OnResult]] = {}
        self._in_flight: set[TopicPartition] = set()
        self._ready = asyncio.Event()

    def submit(self, item: AlterPartitionItem, on_result: OnResult) -> bool:
        """Queue `item`; False (and nothing queued) when one for that partition is pending."""
        if item.tp in self._queued or item.tp in self._in_flight:
            return False
        self._queued[item.tp] = (item, on_result)
        self._ready.set()
        return True

    def discard(self, tp: TopicPartition) -> None:
        """Drop `tp`'s queued item, not sent yet: its leader epoch ended here (Kafka's Partition
        forgets its pending state on a new leader epoch), so the controller would only answer
        FENCED_LEADER_EPOCH. Its callback is not called; one already in flight is answered."""
        self._queued.pop(tp, None)

    @property
    def pending(self) -> int:
        """Items queued or in flight."""
        return len(self._queued) + len(self._in_flight)

    def _next_batch(self) -> dict[TopicPartition, tuple[AlterPartitionItem, OnResult]]:
        """The oldest MAX_ITEMS_PER_REQUEST queued items (dicts keep insertion order)."""
        if len(self._queued) <= MAX_ITEMS_PER_REQUEST:
            batch, self._queued = self._queued, {}
            return batch
        batch = {}
        for tp in list(self._queued)[:MAX_ITEMS_PER_REQUEST]:  # bounded by the limit
            batch[tp] = self._queued.pop(tp)
        self._ready.set()  # the rest goes in the next RPC
        return batch

    async def run(self) -> None:
        """Send queued items until cancelled (each pass waits for a submit)."""
        while True:  # until cancelled
            await self._ready.wait()
            self._ready.clear()
            batch = self._next_batch()
            if not batch:  # every queued item was discarded
                continue
            self._in_flight.update(batch)
            try:
                await self._send(batch)
            except Exception:  # an answer we cannot read: the leaders propose again later
                log.exception("AlterPartition of %d partitions failed", len(batch))
                self._answer_all(batch, int(ErrorCode.UNKNOWN_SERVER_ERROR))
            finally:
                self._in_flight.difference_update(batch)

    async def _send(self, batch: dict[TopicPartition, tuple[AlterPartitionItem, OnResult]]) -> None:
        by_topic: dict[str, list[AlterPartitionItem]] = {}
        for item, _ in batch.values():
            by_topic.setdefault(item.topic_id, []).append(item)
        request = rpc_messages.AlterPartitionRequest(self.broker_id, self._broker_epoch(), tuple(
            rpc_messages.AlterPartitionTopic(topic_id, tuple(
                rpc_messages.AlterPartitionData(i.tp.partition, i.leader_epoch, i.partition_epoch,
                                       tuple(rpc_messages.IsrMemberData(b, e) for b, e in i.new_isr),
                                       i.leader_recovery_state)
                for i in items))
            for topic_id, items in by_topic.items()))
        try:
            status, reply = rpc.decode_reply(rpc_messages.AlterPartitionReply, await self._client.call(
                "alter-partition", rpc.encode(request)))
        except ControllerUnavailableError as e:
            log.warning("AlterPartition of %d partitions failed: %s", len(batch), e)
            self._answer_all(batch, CONTROLLER_UNAVAILABLE)
            return
        if reply is None:  # the whole request (e.g. a stale broker epoch)
            log.warning("AlterPartition refused: error %d: %s", status.error_code, status.error_message)
            self._answer_all(batch, status.error_code)
            return
        answered: dict[TopicPartition, int] = {}
        by_id = {item.topic_id: item.tp.topic for item, _ in batch.values()}
        for topic in reply.topics:
            name = by_id.get(topic.topic_id)
            for p in topic.partitions:
                tp = TopicPartition(name or "", p.partition_index)
                entry = batch.get(tp)
                if entry is None:
                    continue
                answered[tp] = p.error_code
                entry[1](p.error_code, p)
        unanswered = {tp: e for tp, e in batch.items() if tp not in answered}
        self._answer_all(unanswered, int(ErrorCode.UNKNOWN_SERVER_ERROR))
        answered.update(dict.fromkeys(unanswered, int(ErrorCode.UNKNOWN_SERVER_ERROR)))
        log.log(logging.WARNING if any(answered.values()) else logging.INFO, "%s",
                describe_answers(self.broker_id, answered, queued=len(self._queued)))

    @staticmethod
    def _answer_all(batch: dict[TopicPartition, tuple[AlterPartitionItem, OnResult]], code: int) -> None:
        for _, on_result in batch.values():
            on_result(code, None)


def describe_answers(broker_id: int, answered: dict[TopicPartition, int], *, queued: int) -> str:
    """One line for an answered AlterPartition RPC: how many partitions got each answer, and
    the first SHOWN_PER_ERROR of each error (a storm of one error reads as one line)."""
    by_code: dict[int, list[TopicPartition]] = {}
    for tp, code in answered.items():
        by_code.setdefault(code, []).append(tp)
    parts = [f"{len(by_code.pop(0, []))} committed"]
    for code, tps in sorted(by_code.items()):
        shown = ", ".join(str(tp) for tp in tps[:SHOWN_PER_ERROR])
        more = f" and {len(tps) - SHOWN_PER_ERROR} more" if len(tps) > SHOWN_PER_ERROR else ""
        parts.append(f"{len(tps)} {error_name(code)}: {shown}{more}")
    return (f"Broker {broker_id}: AlterPartition of {len(answered)} partition(s) answered: "
            f"{', '.join(parts)}; {queued} queued for the next request")


def error_name(code: int) -> str:
    """An error code as the log lines name it: `FENCED_LEADER_EPOCH (74)`."""
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"
