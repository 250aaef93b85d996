"""A broker stopped in any lifecycle state after it registered asks for a controlled shutdown
(shutdown/broker_lifecycle.py), in particular between the controller's unfence decision and the
broker seeing it: its MetadataFollower against the active controller's real heartbeat rule
(quorum.broker_control.process_heartbeat) over one committed log, the stop request arriving
while the controller's answer to the Nth heartbeat is on its way.

Before the fix a broker stopped in STARTING or RECOVERY went straight to SHUTTING_DOWN: when that
answer was the unfence, the controller kept it active (its leaderships in place, every other
broker's controlled shutdown waiting for its offset) until its session expired
(bench/partition_scale.py, broker 7: 7 of 9.1 s of another broker's controlled shutdown)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.follower_settings import FollowerSettings
from broker.metadata_follower_loop import MetadataFollower
from common import rpc
from common.rpc_messages import BrokerHeartbeatReply, BrokerRegistrationReply, MetadataFetchReply
from metadata.codec import Listener
from metadata.records import BeginEpoch, RegisterBroker, encode_records
from quorum.broker_control import process_heartbeat
from quorum.heartbeat_manager import BrokerHeartbeatManager
from quorum.log_state import MetadataLogState
from shutdown.broker_lifecycle import BrokerState

BROKER = 7
EPOCH = 1
WAIT_S = 10.0  # bound on one run (it takes well under a second)


class ActiveController:
    """A ControllerClient double: the active controller's heartbeat path over one committed log,
    every decision's records committed at once. At the `stop_at`th heartbeat it has decided on,
    before its answer reaches the broker, the broker is asked to stop (SIGTERM)."""

    target = "controller-1"

    def __init__(self, stop_at: int) -> None:
        self.log = MetadataLogState()
        listeners = (Listener("PLAINTEXT", "127.0.0.7", 9092),)
        for record in (BeginEpoch(EPOCH), RegisterBroker(BROKER, "inc", listeners, fenced=True)):
            assert self.log.apply_chunk(encode_records([record]), EPOCH).committed
        self.heartbeats = BrokerHeartbeatManager()
        self.stop_at = stop_at
        self.decided = 0
        self.follower: MetadataFollower | None = None
        self.stopped_in: BrokerState | None = None  # the broker's lifecycle state when asked to stop
        self.stopped_unfenced = False  # the answer then on its way unfenced it

    async def register(self, body: dict[str, Any]) -> dict[str, Any]:
        return rpc.encode_reply(BrokerRegistrationReply(self.log.image.cluster.brokers[BROKER].broker_epoch))

    async def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.follower is not None
        beat = rpc.decode_heartbeat_request(body)
        was_fenced = self.log.image.cluster.brokers[BROKER].fenced
        result = process_heartbeat(self.log.image, broker_id=beat.broker_id, broker_epoch=beat.broker_epoch,
                                   metadata_offset=beat.current_metadata_offset, want_fence=beat.want_fence,
                                   want_shutdown=beat.want_shut_down, now_ms=0, heartbeats=self.heartbeats)
        if result.records:
            assert self.log.apply_chunk(encode_records(result.records), EPOCH).committed
        self.decided += 1
        if self.decided == self.stop_at:
            self.stopped_in = self.follower.lifecycle.state
            self.stopped_unfenced = was_fenced and not result.response.is_fenced
            self.follower.request_shutdown()
        await asyncio.sleep(0)  # the answer takes a loop turn
        reply = result.response
        return rpc.encode_reply(BrokerHeartbeatReply(reply.is_caught_up, reply.is_fenced, reply.should_shut_down))

    async def fetch_metadata(self, offset: int, max_wait_ms: int, *, broker_id: int = -1,
                             max_records: int | None = None) -> dict[str, Any]:
        pairs = tuple(self.log.record_maps_from(offset, max_records or 1000))
        if not pairs:  # caught up: a short long-poll
            await asyncio.sleep(max_wait_ms / 1000)
        return rpc.encode_reply(MetadataFetchReply(pairs, self.log.last_offset, self.log.log_start_offset))


async def stop_at(heartbeat: int, tmp_path: Path) -> ActiveController:
    controller = ActiveController(heartbeat)
    settings = FollowerSettings(broker_id=BROKER, incarnation_id="inc", listeners=(), log_dir=tmp_path,
                                heartbeat_interval_ms=500, fetch_max_wait_ms=10)  # the early beats pace it
    follower = MetadataFollower(settings, controller, lambda changes, image: None)  # type: ignore[arg-type]
    controller.follower = follower
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(follower.shutdown_ready.wait(), WAIT_S)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return controller


# The broker's state when asked to stop, and whether the answer then on its way unfences it.
# Heartbeat 1 goes out at registration (fenced, not caught up); 2 reports the caught-up offset
# and is ready to unfence, so the controller unfences it while it is STARTING; its answer moves
# the lifecycle one step, to RECOVERY, though the controller has it unfenced already (3); 4 RUNNING.
@pytest.mark.parametrize(("heartbeat", "state", "unfenced"), [
    (1, BrokerState.STARTING, False),
    (2, BrokerState.STARTING, True),
    (3, BrokerState.RECOVERY, False),
    (4, BrokerState.RUNNING, False),
])
def test_a_broker_stopped_after_registering_is_never_left_active(tmp_path: Path, heartbeat: int,
                                                                 state: BrokerState, unfenced: bool) -> None:
    controller = asyncio.run(stop_at(heartbeat, tmp_path))
    assert (controller.stopped_in, controller.stopped_unfenced) == (state, unfenced)
    registration = controller.log.image.cluster.brokers[BROKER]
    assert not registration.is_active, f"stopped in {state.name}: the controller still counts broker {BROKER} active"
    assert registration.fenced  # SHUTDOWN_NOW: it led nothing
    assert controller.follower is not None and not controller.follower.lifecycle.controlled_shutdown_timed_out
