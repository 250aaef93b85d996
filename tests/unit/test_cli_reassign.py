"""tidelog/cli_reassign.py's pure half and quorum/reassignment_routes.py's body parsing, as tables."""

from __future__ import annotations

import pytest

from quorum.admin_api import AdminError
from quorum.reassignment_control import ReassignmentRequest
from quorum.reassignment_routes import parse_reassignments
from tidelog.cli_common import UsageError
from tidelog.cli_reassign import list_lines, parse_replicas, throttle_configs, verify_lines


@pytest.mark.parametrize("body,expected", [
    ({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [5, 6]}]},
     (ReassignmentRequest("t", 0, (5, 6)),)),
    ({"partitions": [{"topic": "t", "partition": 1, "replicas": None}]}, (ReassignmentRequest("t", 1, None),)),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [5], "log_dirs": ["any"]}]},
     (ReassignmentRequest("t", 0, (5,)),)),
])
def test_parse_reassignments(body, expected):
    assert parse_reassignments(body) == expected


@pytest.mark.parametrize("body,error,field", [
    ([], "INVALID_REQUEST", None),
    ({"version": 2, "partitions": []}, "INVALID_REQUEST", "version"),
    ({"partitions": {}}, "INVALID_REQUEST", "partitions"),
    ({"partitions": [{"topic": "t", "partition": 0}]}, "INVALID_REQUEST", "partitions[0].replicas"),
    ({"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}, "INVALID_REQUEST", "partitions[0].partition"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": "1,2"}]}, "INVALID_REQUEST", "partitions[0].replicas"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, "x"]}]}, "INVALID_REQUEST",
     "partitions[0].replicas[1]"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [-1]}]}, "INVALID_REPLICA_ASSIGNMENT",
     "partitions[0].replicas[0]"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}, "INVALID_REQUEST",
     "partitions[0].log_dirs"),
    ({"partitions": [{"topic": "a b", "partition": 0, "replicas": [1]}]}, "INVALID_TOPIC_EXCEPTION",
     "partitions[0].topic"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "x": 1}]}, "INVALID_REQUEST", "partitions[0].x"),
])
def test_parse_reassignments_names_the_bad_field(body, error, field):
    with pytest.raises(AdminError) as caught:
        parse_reassignments(body)
    assert (caught.value.error, caught.value.field, caught.value.status) == (error, field, 400)


def test_parse_replicas():
    assert parse_replicas("4,5,6") == [4, 5, 6]
    for bad in ("4,,5", "a", "-1"):
        with pytest.raises(UsageError):
            parse_replicas(bad)


def test_throttle_configs_name_current_replicas_as_leaders_and_added_ones_as_followers():
    plan = [{"topic": "t", "partition": 0, "replicas": [5, 6, 7]}, {"topic": "t", "partition": 1, "replicas": [4]}]
    current = {("t", 0): [4, 5, 6], ("t", 1): [4, 5]}
    assert throttle_configs(plan, current) == {"t": {
        "leader.replication.throttled.replicas": "0:4,0:5,0:6,1:4,1:5",
        "follower.replication.throttled.replicas": "0:7"}}


def test_verify_and_list_lines():
    plan = [{"topic": "t", "partition": 0, "replicas": [5, 6]}, {"topic": "t", "partition": 1, "replicas": [5]},
            {"topic": "t", "partition": 2, "replicas": [5]}]
    current = {("t", 0): [5, 6], ("t", 1): [5, 4], ("t", 2): [4]}
    assert verify_lines(plan, current, {("t", 1)}) == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is still in progress.",
        "There is no active reassignment of partition t-2, but replica set is [4] rather than [5]."]
    assert list_lines([]) == ["No partition reassignments found."]
    assert list_lines([{"topic": "t", "partition": 1, "replicas": [5, 4], "adding_replicas": [5],
                        "removing_replicas": [4]}]) == [
        "Current partition reassignments:", "t-1: replicas: 5,4. adding: 5. removing: 4."]
