"""chaos.checkers.quorum_safety over hand-made histories: one active controller per epoch, the
brokers' applied metadata against the quorum's, acknowledged writes lost to power losses."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.quorum_safety import (
    REPLICATION_NOT_FSYNC,
    check_active_controllers,
    check_metadata_views,
    check_power_loss_writes,
    summarize_power_losses,
)

Event = dict[str, Any]


def became(t: float, epoch: int, node: int) -> Event:
    return {"t": t, "kind": "controller-epoch", "epoch": epoch, "node": node}


@pytest.mark.parametrize(("events", "count"), [
    ([became(1, 1, 1), became(5, 2, 2), became(9, 3, 1)], 0),
    ([became(1, 1, 1), became(5, 1, 2)], 1),                  # two controllers in epoch 1
    ([became(1, 1, 1), became(5, 1, 1)], 1),                  # the same one again: it forgot its term
    ([became(1, 1, 1), became(5, 1, 2), became(6, 2, 3), became(7, 2, 1)], 2),
    ([{"t": 1, "kind": "controller-epoch", "epoch": 1}], 0),  # an old history without the node
])
def test_one_active_controller_per_epoch(events: list[Event], count: int) -> None:
    assert check_active_controllers(events).count == count


QUORUM: Event = {"t": 9, "kind": "quorum-metadata", "topics": {"chaos": {"0": 4, "1": 2}, "new-1": {"0": 0}}}


@pytest.mark.parametrize(("brokers", "count"), [
    ([{"chaos": {"0": 4, "1": 2}, "new-1": {"0": 0}}], 0),    # caught up
    ([{"chaos": {"0": 3, "1": 2}}], 0),                       # behind: a prefix
    ([{"chaos": {"0": 5, "1": 2}}], 1),                       # an epoch the quorum never reached
    ([{"chaos": {"0": 4, "1": 2}, "new-2": {"0": 0}}], 1),    # a topic the quorum lost
    ([{"chaos": {"0": 5, "1": 3}, "new-2": {"0": 0}}, {"chaos": {"0": 4, "1": 2}}], 3),
])
def test_applied_metadata_is_a_prefix_of_the_quorums(brokers: list[dict[str, Any]], count: int) -> None:
    events = [{"t": 8, "kind": "broker-metadata", "node": 4 + i, "topics": t} for i, t in enumerate(brokers)]
    assert check_metadata_views([*events, QUORUM]).count == count


def test_metadata_not_compared_without_the_quorums_view() -> None:
    result = check_metadata_views([{"t": 8, "kind": "broker-metadata", "node": 4, "topics": {"x": {"0": 1}}}])
    assert result.count == 0 and "not compared" in result.summary


def ack(value: str, partition: int, offset: int, t: float) -> Event:
    return {"t": t, "kind": "ok", "value": value, "partition": partition, "offset": offset}


def power(fault: str, t: float, targets: list[int]) -> list[Event]:
    replicas = {"0": [4, 5, 6], "1": [5, 6, 7]}
    return [{"t": t, "kind": "power-replicas", "id": fault, "targets": targets, "replicas": replicas},
            {"t": t, "kind": "fault-start", "id": fault, "action": "power", "targets": targets}]


def final(partition: int, values: list[str]) -> list[Event]:
    return [{"t": 50, "kind": "final-read", "partition": partition, "offset": o, "value": v}
            for o, v in enumerate(values)]


def test_a_majority_power_loss_is_counted_and_matched() -> None:
    events = [ack("a", 0, 0, 1), ack("b", 0, 1, 2), ack("c", 0, 2, 3), *power("f1", 4, [4, 5]),
              ack("d", 0, 2, 6), *final(0, ["a", "b", "d"])]
    result = check_power_loss_writes(events)
    assert result.count == 0  # a majority may lose acknowledged writes: measured, not an anomaly
    assert result.data["lost_by_fault"] == {"f1": 1}
    assert REPLICATION_NOT_FSYNC in result.summary
    assert any("partition 0 lost 2 of 3 replicas (a majority): 1 acknowledged writes lost" in e
               for e in result.examples)


def test_a_minority_power_loss_must_lose_nothing() -> None:
    events = [ack("a", 0, 0, 1), ack("b", 0, 1, 2), *power("f1", 4, [4]), *final(0, ["a"])]
    result = check_power_loss_writes(events)
    assert result.count == 1 and result.data["lost_by_fault"] == {"f1": 1}


def test_a_later_majority_takes_the_blame_not_an_earlier_minority() -> None:
    events = [ack("a", 0, 0, 1), ack("b", 0, 1, 2), *power("f1", 4, [6]), *power("f2", 8, [4, 5]),
              *final(0, ["a"])]
    result = check_power_loss_writes(events)
    assert result.count == 0 and result.data["lost_by_fault"] == {"f1": 0, "f2": 1}


def test_a_loss_no_power_loss_explains_is_an_anomaly() -> None:
    events = [*power("f1", 4, [4, 5]), ack("a", 0, 0, 6), ack("b", 0, 1, 7), *final(0, ["a", "x", "y"])]
    assert check_power_loss_writes(events).count == 1


def test_no_broker_power_loss_checks_nothing() -> None:
    assert check_power_loss_writes([ack("a", 0, 0, 1)]).summary == "no broker lost power"


def test_without_fusermount_the_reason_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos.power

    monkeypatch.setattr(chaos.power.shutil, "which", lambda name: None)
    why = chaos.power.fuse_missing()
    assert why is not None and "not installed: apt-get install fuse3" in why  # the tests' skip pattern


def test_a_power_scenario_without_fuse_is_refused_before_it_starts(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    import chaos.power
    from chaos.cli import find_scenario, power_unavailable, run_run

    why = "power-loss faults need libfuse 3 and fusermount3, not installed: apt-get install fuse3"
    monkeypatch.setattr(chaos.power, "fuse_missing", lambda: why)
    assert power_unavailable(find_scenario("controller-kill")) is None  # other scenarios do not need it
    args = argparse.Namespace(scenario="power-controller", seed=None, duration=None, report_dir=None,
                              cluster_dir=None)
    assert run_run(args) == 2
    assert why in capsys.readouterr().err


def test_a_broker_stopped_on_records_it_cannot_apply_diverged() -> None:
    stopped = {"t": 8, "kind": "broker-metadata", "node": 5, "error": "connection refused",
               "diverged": "MetadataFollowerError: cannot apply the fetched records: offset 76: unknown topic id"}
    result = check_metadata_views([stopped, QUORUM])
    assert result.count == 1 and "offset 76" in result.examples[0]


def test_what_each_plug_took_is_summed() -> None:
    pulled = [{"t": 5, "kind": "power-loss", "id": "f1", "node": n, "power_loss": True, "files_rolled_back": 1,
               "bytes_dropped": 100 * n, "entries_undone": ["create /x"], "entries_undone_count": 1}
              for n in (2, 3)]
    result = summarize_power_losses(pulled)
    assert result.count == 0 and result.data == {"plugs": 2, "bytes_dropped": 500, "failed": 0}
    assert result.examples[0] == "f1 node 2: 1 files rolled back, 200 bytes dropped, 1 directory changes undone " \
                                 "(create /x, ...)"
