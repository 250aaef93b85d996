"""quorum.quorum_describe (the leader's bookkeeping and DescribeQuorum's answer),
metadata.quorum_description (its wire map) and tidelog.cli_quorum's lines (issue 28)."""

from __future__ import annotations

from typing import Any

import pytest

from metadata.quorum_description import QuorumDescription, ReplicaState
from quorum.quorum_describe import FollowerProgress, OffsetIndex, Progress, describe
from tidelog.cli_quorum import REPLICATION_HEADERS, replication_rows, status_lines, table_lines

NOW = 1_700_000_000_000


def test_progress_counts_successes_and_every_answer_as_a_fetch() -> None:
    p = FollowerProgress()
    p.on_response("n2", term=3, match_index=10, leader_last_index=12, now_ms=NOW)
    assert p.of("n2", 3) == Progress(3, 10, NOW, -1)  # behind the leader's log: not caught up
    p.on_response("n2", term=3, match_index=12, leader_last_index=12, now_ms=NOW + 5)
    p.on_response("n2", term=3, match_index=None, leader_last_index=15, now_ms=NOW + 9)  # a refusal
    assert p.of("n2", 3) == Progress(3, 12, NOW + 9, NOW + 5)
    assert p.of("n2", 4) is None  # another term's leader knows nothing of it yet
    p.on_response("n2", term=4, match_index=3, leader_last_index=20, now_ms=NOW + 20)
    assert p.of("n2", 4) == Progress(4, 3, NOW + 20, -1)


def test_the_offset_index_maps_raft_indexes_to_log_end_offsets() -> None:
    index = OffsetIndex(max_entries=4)
    assert index.end_offset(5) == -1
    for raft_index, end in [(2, 10), (3, 25), (6, 40)]:  # 4 and 5: no-ops without records
        index.record(raft_index, end)
    assert [index.end_offset(i) for i in (1, 2, 3, 5, 6, 9)] == [-1, 10, 25, 25, 40, 40]
    for raft_index, end in [(7, 41), (8, 42)]:  # over the bound: the older half goes
        index.record(raft_index, end)
    assert index.end_offset(2) == -1 and index.end_offset(7) == 41
    index.record(3, 99)  # a dump reloaded behind what was recorded: start again
    assert (index.end_offset(3), index.end_offset(8)) == (99, 99)


def test_describe_maps_voters_and_observers() -> None:
    offsets = OffsetIndex()
    offsets.record(7, 30)
    offsets.record(9, 42)
    quorum = describe(leader_id=1, term=5, high_watermark=42, last_applied_index=9, followers={
        2: Progress(5, 9, NOW - 10, NOW - 10),   # caught up
        3: Progress(5, 8, NOW - 20, NOW - 900),  # one entry behind
        4: None,                                 # never heard from in this term
    }, offsets=offsets, observers=[(7, NOW - 50, 41), (6, NOW - 70, 30), (8, NOW - 5, -1)], now_ms=NOW)
    assert quorum == QuorumDescription(1, 5, 42, (
        ReplicaState(1, 42, -1, NOW), ReplicaState(2, 42, NOW - 10, NOW - 10),
        ReplicaState(3, 30, NOW - 20, NOW - 900), ReplicaState(4, -1)), (
        ReplicaState(6, 31, NOW - 70, -1), ReplicaState(7, 42, NOW - 50, NOW - 50), ReplicaState(8, -1, NOW - 5, -1)))
    assert QuorumDescription.from_map(quorum.to_map()) == quorum


@pytest.mark.parametrize("bad", [
    {}, {"leader_id": 1, "leader_epoch": 1, "high_watermark": 1, "voters": "x", "observers": []},
    {"leader_id": True, "leader_epoch": 1, "high_watermark": 1, "voters": [], "observers": []},
    {"leader_id": 1, "leader_epoch": 1, "high_watermark": 1, "voters": [{"replica_id": 1}], "observers": []},
])
def test_a_bad_map_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        QuorumDescription.from_map(bad)


QUORUM = QuorumDescription(2, 7, 100, (
    ReplicaState(1, 90, NOW - 30, NOW - 4000), ReplicaState(2, 100, -1, NOW), ReplicaState(3, 100, NOW - 5, NOW - 5)),
    (ReplicaState(4, 100, NOW - 100, NOW - 100),))


def test_status_lines_are_kafkas() -> None:
    assert status_lines(QUORUM, "abc") == [
        "ClusterId:              abc",
        "LeaderId:               2",
        "LeaderEpoch:            7",
        "HighWatermark:          100",
        "MaxFollowerLag:         10",
        "MaxFollowerLagTimeMs:   4000",
        'CurrentVoters:          [{"id": 1}, {"id": 2}, {"id": 3}]',
        'CurrentObservers:       [{"id": 4}]',
    ]


def test_replication_rows_leader_first_then_followers_then_observers() -> None:
    rows = replication_rows(QUORUM, human_readable=True, now_ms=NOW)
    assert [(r[0], r[2], r[3], r[4], r[5], r[6]) for r in rows] == [
        ("2", "100", "0", "-1", "0 ms ago", "Leader"),
        ("1", "90", "10", "30 ms ago", "4000 ms ago", "Follower"),
        ("3", "100", "0", "5 ms ago", "5 ms ago", "Follower"),
        ("4", "100", "0", "100 ms ago", "100 ms ago", "Observer"),
    ]
    assert {r[1] for r in rows} == {"AAAAAAAAAAAAAAAAAAAAAA"}  # Kafka's Uuid.ZERO_UUID
    lines = table_lines(REPLICATION_HEADERS, replication_rows(QUORUM, human_readable=False, now_ms=NOW))
    assert lines[0].split("\t")[0] == "NodeId" and lines[1].split() == [
        "2", "AAAAAAAAAAAAAAAAAAAAAA", "100", "0", "-1", str(NOW), "Leader"]
    assert len({line.index("\t") for line in lines}) == 1  # padded columns
