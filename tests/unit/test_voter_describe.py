"""DescribeQuorum names each controller's directory id (KIP-853): the description's map form
carries it, the broker's answer turns it into Kafka's Uuid, the CLI prints it."""

from __future__ import annotations

import uuid

from broker.handlers.describe_quorum import NO_DIRECTORY_ID, _directory
from metadata.quorum_description import QuorumDescription, ReplicaState
from quorum.quorum_describe import OffsetIndex, describe
from quorum.voter_set import ZERO_DIRECTORY_ID, directory_id_from_bytes
from tidelog.cli_quorum import replication_rows, status_lines

DIR_5 = directory_id_from_bytes(bytes(range(16)))


def test_describe_names_the_controllers_directory_ids() -> None:
    quorum = describe(leader_id=1, term=3, high_watermark=10, last_applied_index=4, followers={5: None},
                      offsets=OffsetIndex(), observers=[(4, 1000, 9), (6, 1000, 9)], now_ms=2000,
                      directory_ids={1: ZERO_DIRECTORY_ID, 5: DIR_5, 6: DIR_5})
    assert [(r.replica_id, r.directory_id) for r in quorum.voters] == [(1, ZERO_DIRECTORY_ID), (5, DIR_5)]
    assert [(r.replica_id, r.directory_id) for r in quorum.observers] == [(4, None), (6, DIR_5)]  # 4: a broker
    assert QuorumDescription.from_map(quorum.to_map()) == quorum
    assert status_lines(quorum, "c")[6] == f'CurrentVoters:          [{{"id": 1}}, {{"id": 5, "directoryId": "{DIR_5}"}}]'
    rows = replication_rows(quorum, human_readable=False, now_ms=2000)
    assert [(row[0], row[1]) for row in rows] == [("1", ZERO_DIRECTORY_ID), ("5", DIR_5), ("4", ZERO_DIRECTORY_ID),
                                                  ("6", DIR_5)]


def test_a_description_without_directory_ids_still_reads() -> None:
    m = QuorumDescription(1, 1, 0, (ReplicaState(1, 0),), ()).to_map()
    assert "directory_id" not in m["voters"][0]
    assert QuorumDescription.from_map(m).voters[0].directory_id is None


def test_the_broker_answers_kafkas_uuid() -> None:
    assert _directory(DIR_5) == uuid.UUID(bytes=bytes(range(16)))
    assert _directory(None) == NO_DIRECTORY_ID == _directory(ZERO_DIRECTORY_ID)
    assert _directory("not base64!") == NO_DIRECTORY_ID
