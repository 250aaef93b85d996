"""One controller node: the active controller's request handling over the real rules.

Every decision is a rule of `quorum/` run on the committed image (Kafka's one-at-a-time
decision queue): `register_broker`, `process_heartbeat`, `handle_alter_partition`,
`fence_broker` with `BrokerHeartbeatManager.next_expired`, `create_topic`. The records go to
the Raft model; the reply is sent only if they committed (the real shell answers after the
commit, or times out). A voter that is not the active controller answers NOT_CONTROLLER, as
the real forwarding/redirect path ends. Soft state (the broker sessions) belongs to one
active epoch and starts afresh when this node (re)becomes active, as
`quorum.controller_runtime.ControllerRuntime.sessions` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random

import logging
from collections.abc import Callable
from typing import Any

from chaos.sim import messages as m
from chaos.sim.network import Network
from chaos.sim.quorum import MetadataQuorum
from chaos.sim.seams import PlantedBugs, everyone_active, without_fencing_moves
from common.errors import ErrorCode
from metadata.image import MetadataImage
from metadata.records import Listener
from quorum.broker_control import fence_if_expired, process_heartbeat, register_broker
from quorum.controller_result import ControllerApiError, ControllerResult
from quorum.heartbeat_manager import BrokerHeartbeatManager
from quorum.replication_control import handle_alter_partition
from quorum.topic_control import create_topic

logger = logging.getLogger(__name__)

METADATA_BATCH = 200  # records per metadata fetch answer


def broker_node(broker_id: int) -> str:
    return f"b{broker_id}"


class SimController:
    """The decision half of `quorum/` for one voter; the quorum model holds the log."""

    def __init__(self, name: str, quorum: MetadataQuorum, network: Network, *, session_timeout_ms: int,
                 bugs: PlantedBugs) -> None:
        self.name = name
        self._quorum = quorum
        self._network = network
        self._session_timeout_ms = session_timeout_ms
        self._bugs = bugs
        self._sessions = BrokerHeartbeatManager(session_timeout_ms)
        self._sessions_epoch: int | None = None

    # -- decisions ------------------------------------------------------------------------

    def sessions(self, now_ms: int) -> BrokerHeartbeatManager:
        """This active epoch's sessions (ControllerRuntime.sessions: afresh on each activation)."""
        if self._quorum.epoch != self._sessions_epoch:
            self._sessions_epoch = self._quorum.epoch
            self._sessions = BrokerHeartbeatManager(self._session_timeout_ms)
            self._sessions.begin_sessions(self._quorum.image, now_ms)
        return self._sessions

    def decide(self, rule: Callable[[MetadataImage], ControllerResult[Any]]) -> tuple[ErrorCode, Any, int | None]:
        """(error, response, committed end offset or None) of one rule through the log."""
        if not self._quorum.is_active(self.name):
            return ErrorCode.NOT_CONTROLLER, None, None
        try:
            result = rule(self._quorum.image)
        except ControllerApiError as exc:
            return exc.code, None, None
        records = result.records
        if self._bugs.fenced_stays_in_isr:
            records = without_fencing_moves(records)
        end = self._quorum.append(self.name, records)
        if end is None:  # no majority: the write times out, nothing was appended
            return ErrorCode.REQUEST_TIMED_OUT, None, None
        return ErrorCode.NONE, result.response, end - len(records) + 1

    def create_topic(self, name: str, *, replication_factor: int, configs: dict[str, str], rng: Random) -> bool:
        error, _, _ = self.decide(lambda image: create_topic(
            image, name=name, partitions=1, replication_factor=replication_factor, configs=configs,
            topic_id=f"id-{name}", rng=rng))
        return error is ErrorCode.NONE

    def fence_expired(self, now_ms: int) -> None:
        """The fence-expired-brokers pass: at most one expired broker (Kafka's, and the runtime's)."""
        if not self._quorum.is_active(self.name):
            return
        sessions = self.sessions(now_ms)
        broker_id = sessions.next_expired(now_ms, self._quorum.image)
        if broker_id is not None:
            self.decide(lambda image: fence_if_expired(image, broker_id, heartbeats=sessions, now_ms=now_ms))

    # -- requests -------------------------------------------------------------------------

    def handle(self, src: str, message: object, now_ms: int) -> None:
        if isinstance(message, m.MetadataFetchRequest):
            records = tuple(self._quorum.committed_from(message.offset, METADATA_BATCH))
            self._network.send(self.name, src, m.MetadataFetchResponse(records, self._quorum.leader,
                                                                               self._quorum.image.offset))
        elif isinstance(message, m.HeartbeatRequest):
            self._heartbeat(src, message, now_ms)
        elif isinstance(message, m.RegisterRequest):
            self._register(src, message, now_ms)
        elif isinstance(message, m.AlterPartitionRequest):
            self._alter_partition(src, message)
        else:
            raise TypeError(f"controller {self.name} got {message!r}")

    def _register(self, src: str, req: m.RegisterRequest, now_ms: int) -> None:
        sessions = self.sessions(now_ms)
        error, _, first = self.decide(lambda image: register_broker(
            image, broker_id=req.broker_id, incarnation_id=req.incarnation_id,
            listeners=(Listener("REPLICATION", src, 9092),), rack=None, now_ms=now_ms, heartbeats=sessions))
        # The broker epoch is the offset of the RegisterBroker record, the batch's first.
        self._network.send(self.name, src, m.RegisterResponse(req.request_id, error, -1 if first is None else first))

    def _heartbeat(self, src: str, req: m.HeartbeatRequest, now_ms: int) -> None:
        sessions = self.sessions(now_ms)
        error, reply, _ = self.decide(lambda image: process_heartbeat(
            image, broker_id=req.broker_id, broker_epoch=req.broker_epoch,
            metadata_offset=req.metadata_offset, want_fence=req.want_fence, want_shutdown=req.want_shutdown,
            now_ms=now_ms, heartbeats=sessions))
        if reply is None:
            self._network.send(self.name, src, m.HeartbeatResponse(req.request_id, error))
            return
        self._network.send(self.name, src, m.HeartbeatResponse(
            req.request_id, error, reply.is_caught_up, reply.is_fenced, reply.should_shut_down))

    def _alter_partition(self, src: str, req: m.AlterPartitionRequest) -> None:
        topic_id, partition_id = req.partition

        def alter(image: MetadataImage) -> ControllerResult[Any]:
            seen = everyone_active(image) if self._bugs.skip_isr_eligibility else image
            return handle_alter_partition(
                seen, broker_id=req.broker_id, broker_epoch=req.broker_epoch, topic_id=topic_id,
                partition_id=partition_id, leader_epoch=req.leader_epoch, partition_epoch=req.partition_epoch,
                new_isr=req.new_isr, leader_recovery_state=req.leader_recovery_state)
        error, reply, _ = self.decide(alter)
        epoch = -1 if reply is None else reply.partition_epoch
        self._network.send(self.name, src, m.AlterPartitionResponse(req.request_id, req.partition, error, epoch))
