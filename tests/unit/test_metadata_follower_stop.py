"""broker/metadata_follower_loop.py: how a broker stops when its metadata follower ended on its
own (issue 36): a defined, logged unclean stop, and one line naming the error."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from broker.follower_settings import FollowerSettings
from broker.metadata_follower import UnsupportedFeatureLevelError
from broker.metadata_follower_loop import MetadataFollower, fatal_error_summary, is_operator_matter
from shutdown.broker_lifecycle import BrokerState, LifecycleEvent


def follower(tmp_path: Path) -> MetadataFollower:
    settings = FollowerSettings(broker_id=4, incarnation_id="inc", listeners=(), log_dir=tmp_path)
    clock = iter(range(0, 10_000, 10))
    return MetadataFollower(settings, client=None, on_changes=lambda changes, image: None,  # type: ignore[arg-type]
                            clock=lambda: next(clock))


def run_to(f: MetadataFollower, state: BrokerState) -> None:
    lifecycle = f.lifecycle
    lifecycle.start(0)
    lifecycle.handle(LifecycleEvent.REGISTERED, 0)
    if state is BrokerState.STARTING:
        return
    lifecycle.handle(LifecycleEvent.CAUGHT_UP, 0)
    lifecycle.handle(LifecycleEvent.UNFENCED, 0)
    assert lifecycle.state is state


@pytest.mark.parametrize("state", [BrokerState.STARTING, BrokerState.RUNNING])
def test_a_follower_that_ended_stops_uncleanly_with_a_warning_not_an_error(tmp_path, caplog, state):
    f = follower(tmp_path)
    run_to(f, state)
    with caplog.at_level(logging.INFO, logger="broker.metadata_follower_loop"):
        f.stopped()
    assert f.lifecycle.state is BrokerState.SHUTDOWN
    messages = [r.getMessage() for r in caplog.records]
    assert not any("can't handle" in m for m in messages), messages
    assert f"Broker 4: stopped in state {state.name} without a controlled shutdown" in messages[0]
    assert messages[1] == f"Broker 4 (broker epoch -1): Transitioning from {state.name} to SHUTDOWN."


def test_a_clean_stop_says_nothing_more_than_the_transition(tmp_path, caplog):
    f = follower(tmp_path)
    f.request_shutdown()  # NOT_RUNNING -> SHUTTING_DOWN
    with caplog.at_level(logging.INFO, logger="broker.metadata_follower_loop"):
        f.stopped()
    assert [r.getMessage() for r in caplog.records] == ["Broker 4 (broker epoch -1): Transitioning from SHUTTING_DOWN to SHUTDOWN."]


def test_the_fatal_line_names_each_error_of_the_task_group_not_the_group():
    async def fail(exc: Exception) -> None:
        raise exc

    async def tasks() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(fail(OSError(24, "Too many open files")))
            group.create_task(fail(ValueError("bad record")))

    with pytest.raises(ExceptionGroup) as info:
        asyncio.run(tasks())
    line = fatal_error_summary(info.value)
    assert "ExceptionGroup" not in line and "\n" not in line
    assert "OSError: [Errno 24] Too many open files (at test_metadata_follower_stop:" in line
    assert "ValueError: bad record (at test_metadata_follower_stop:" in line
    assert fatal_error_summary(None) == "it returned without an error"


def test_the_broker_names_an_operators_matter_as_one_and_a_bug_as_a_bug():
    """broker/node.py opens its fatal line with "cannot run" only when every error that ended the
    follower is the operator's to fix (a feature level this build lacks); anything else beside it
    is a bug and keeps the "unexpected error" opening."""
    refused = UnsupportedFeatureLevelError("finalizes transaction.version 3 (this build supports 0-2)")
    assert is_operator_matter(refused)
    assert is_operator_matter(ExceptionGroup("follower", [refused]))
    assert not is_operator_matter(ExceptionGroup("follower", [refused, ValueError("bad record")]))
    assert not is_operator_matter(OSError(24, "Too many open files"))
    assert not is_operator_matter(None)


def test_a_node_that_answers_clients_late_asks_to_be_unfenced_only_once_it_does(tmp_path):
    """broker/node.py builds its follower with unfence_on_publish=False: publishing the first
    caught-up image does not end want_fence, ready_to_serve() (clients answered) does, as Kafka's
    BrokerServer enables request processing before setReadyToUnfence."""
    settings = FollowerSettings(broker_id=4, incarnation_id="inc", listeners=(), log_dir=tmp_path)
    late = MetadataFollower(settings, client=None, on_changes=lambda changes, image: None,  # type: ignore[arg-type]
                            unfence_on_publish=False)
    run_to(late, BrokerState.STARTING)
    late.lifecycle.handle(LifecycleEvent.CAUGHT_UP, 0)
    assert late.lifecycle.heartbeat_flags().want_fence
    late.ready_to_serve()
    assert not late.lifecycle.heartbeat_flags().want_fence
