"""The broker's lifecycle state on /metrics (Kafka's BrokerState gauge) and the console reading it back."""

from __future__ import annotations

import pytest

from broker.broker_metrics import broker_state_families
from common.prometheus import exposition
from console import views
from shutdown.broker_lifecycle import BrokerState


def test_running_is_kafkas_3_with_its_name() -> None:
    text = exposition(broker_state_families(BrokerState.RUNNING))
    assert "# TYPE tidelog_broker_state gauge" in text
    assert 'tidelog_broker_state{state="RUNNING"} 3.0' in text.splitlines()


@pytest.mark.parametrize(("state", "value", "shown"), [
    (BrokerState.NOT_RUNNING, 0, "NOT_RUNNING"),
    (BrokerState.STARTING, 1, "STARTING"),
    (BrokerState.RECOVERY, 2, "RECOVERY"),
    (BrokerState.RUNNING, 3, "RUNNING"),
    (BrokerState.PENDING_CONTROLLED_SHUTDOWN, 6, "CONTROLLED_SHUTDOWN"),
    (BrokerState.SHUTTING_DOWN, 7, "SHUTTING_DOWN"),
    (BrokerState.SHUTDOWN, 0, "NOT_RUNNING"),  # Kafka reads NOT_RUNNING once shut down
])
def test_every_state_has_kafkas_number_and_the_console_reads_it(state: BrokerState, value: int, shown: str) -> None:
    text = exposition(broker_state_families(state))
    assert f'tidelog_broker_state{{state="{state.value}"}} {float(value)}' in text.splitlines()
    assert views.broker_state(text) == shown
