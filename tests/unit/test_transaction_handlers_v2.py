"""Transactions v2 (KIP-890 part 2) through the real RequestHandler, ReplicaManager and log (no
processes): a leader's AddPartitionsToTxn v5 `verify_only=false` starts a TV2 client's
transaction, EndTxn v5 bumps the epoch and answers it, the markers carry the bumped epoch, a
retried EndTxn is done and a late one from the previous transaction is fenced."""

from __future__ import annotations

from typing import Any

from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tests.unit.test_request_handler import kio_call
from tests.unit.test_transaction_handlers import TID, cluster, describe, init, state_of

__all__ = ["cluster"]  # the fixture, shared with test_transaction_handlers

E = ErrorCode


async def leader_adds(handler: Any, pid: int, epoch: int, *parts: tuple[str, int]) -> set[int]:
    """A partition leader's AddPartitionsToTxn v5 for a TV2 client's Produce (verify_only=false)."""
    m = messages.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 5)
    r = await kio_call(handler, ApiKey.ADD_PARTITIONS_TO_TXN, 5, transactions=(m.AddPartitionsToTxnTransaction(
        transactional_id=TID, producer_id=pid, producer_epoch=epoch, verify_only=False,
        topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=(p,)) for t, p in parts)),))
    return {p.partition_error_code for t in r.results_by_transaction for tr in t.topic_results
            for p in tr.results_by_partition}


async def end_v5(handler: Any, pid: int, epoch: int, commit: bool = True) -> tuple[int, int, int]:
    r = await kio_call(handler, ApiKey.END_TXN, 5, transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                       committed=commit)
    return int(r.error_code), int(r.producer_id), int(r.producer_epoch)


async def test_end_txn_v5_bumps_the_epoch_and_fences_a_late_end(cluster: Any) -> None:
    new_handler, _, leaders = cluster
    handler = new_handler()
    try:
        error, pid, epoch = await init(handler, version=5)
        assert (error, epoch) == (0, 0)
        assert await leader_adds(handler, pid, 0, ("orders", 0), ("orders", 1)) == {0}
        (ongoing,) = await describe(handler, TID)
        assert (ongoing.transaction_state, ongoing.producer_epoch) == ("Ongoing", 0)
        assert await end_v5(handler, pid, 0) == (0, pid, 1)
        await state_of(handler, "CompleteCommit")
        epochs = {marker.producer_epoch for _, request in leaders.requests for marker in request.markers}
        assert epochs == {1}  # the markers carry the bumped epoch
        stored = handler.context.transactions.committed(0).get(TID)
        assert stored is not None and stored.client_transaction_version == 2
        assert await end_v5(handler, pid, 0) == (0, pid, 1)  # the retry: done
        # the next transaction, started by a leader at the bumped epoch
        assert await leader_adds(handler, pid, 1, ("orders", 0)) == {0}
        assert await end_v5(handler, pid, 0) == (E.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        (still,) = await describe(handler, TID)
        assert (still.transaction_state, still.producer_epoch) == ("Ongoing", 1)
        assert await leader_adds(handler, pid, 0, ("orders", 1)) == {E.PRODUCER_FENCED}  # an old epoch's write
        assert await end_v5(handler, pid, 1, commit=False) == (0, pid, 2)
        await state_of(handler, "CompleteAbort")
    finally:
        await handler.close()
