"""`__transaction_state` is created on the first FindCoordinator of a transactional id with
Kafka's configs, its replication factor capped to the live brokers with a WARNING that names
transaction.state.log.replication.factor, and min.insync.replicas capped with it only when the
cap went below transaction.state.log.min.isr (else every write would be NOT_ENOUGH_REPLICAS)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from broker.transaction_coordinator.coordinator import TxnSettings
from broker.transaction_coordinator.state_topic import transaction_state_topic
from common.errors import ErrorCode
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, RegisterBroker
from tests.unit.test_request_handler import FakeAdmin, replay

KAFKA_CONFIGS = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                 "unclean.leader.election.enable": "false", "segment.bytes": str(100 * 1024 * 1024)}


def cluster(live: int) -> MetadataImage:
    """Brokers 1-3 registered, the first `live` of them unfenced."""
    return replay(EMPTY_IMAGE, BeginEpoch(1),
                  *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)) for b in (1, 2, 3)),
                  *(BrokerRegistrationChange(b, b, fenced=False) for b in range(1, live + 1)))


@pytest.mark.parametrize(("live", "replication", "min_isr", "warned"), [
    (3, 3, "2", False),  # Kafka's defaults: RF 3, min.isr 2
    (2, 2, "2", True),   # capped, still at min.isr
    (1, 1, "1", True),   # capped below min.isr: min.insync.replicas follows
])
async def test_created_on_first_use_with_kafkas_configs(live: int, replication: int, min_isr: str, warned: bool,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    admin = FakeAdmin()
    coordinator = SimpleNamespace(settings=TxnSettings(), ensure_started=lambda: None)
    topic = transaction_state_topic(coordinator, admin, lambda image, broker: ("127.0.0.1", 9092))
    with caplog.at_level(logging.WARNING, logger="broker.coordinator.location"):
        for tid in ("tx-1", "tx-2"):  # one creation in flight at a time
            assert topic.find_coordinator(tid, cluster(live)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        for _ in range(100):  # bounded: the creation task runs on this loop
            if admin.calls:
                break
            await asyncio.sleep(0)
        await topic.close()
    assert admin.calls == [("create", "__transaction_state", 50, replication,
                            {**KAFKA_CONFIGS, "min.insync.replicas": min_isr})]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if not warned:
        assert warnings == []
        return
    (warning,) = warnings
    assert warning.startswith(f"Creating __transaction_state with replication factor {replication}")
    assert f"transaction.state.log.replication.factor=3 but only {live} broker(s) are alive" in warning
