"""DescribeQuorum (Kafka API 55) on a real cluster of 3 controllers and broker 4 (issue 28): a raw
kio request through the broker, the admin API's GET /v1/quorum (from a follower controller: it
is forwarded to the active one) and `tidelog quorum describe` tell the same quorum.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from common.kafka_client import KafkaClient
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from localcluster.launcher import LocalCluster
from metadata.quorum_description import METADATA_TOPIC
from tests.integration.cluster_fixtures import running_cluster, wait_until
from tidelog.cli_common import parse_bootstrap_servers

BROKER_ID = 4
VERSIONS = (0, 1, 2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("describe-quorum") / "cluster") as started:
        yield started


def admin_get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def describe_through_broker(cluster: LocalCluster, version: int, topic: str = METADATA_TOPIC,
                            partition: int = 0) -> Any:
    assert cluster.bootstrap_servers is not None
    m = messages.request_module(ApiKey.DESCRIBE_QUORUM, version)
    request = m.DescribeQuorumRequest(topics=(m.TopicData(topic_name=topic, partitions=(
        m.PartitionData(partition_index=partition),)),))
    with KafkaClient(parse_bootstrap_servers(cluster.bootstrap_servers)) as client:
        return client.call(None, ApiKey.DESCRIBE_QUORUM, version, request, messages.encode_request,
                           messages.response_decoder(ApiKey.DESCRIBE_QUORUM))


def follower_url(cluster: LocalCluster) -> str:
    active = admin_get(f"{cluster.admin_url}/v1/cluster")["active_controller"]
    node = next(n for n in cluster.controllers if n.spec.node_id != active)
    return f"http://{node.spec.admin_address}"


def everyone_caught_up(cluster: LocalCluster) -> dict[str, Any] | None:
    quorum = admin_get(f"{cluster.admin_url}/v1/quorum")
    replicas = quorum["voters"] + quorum["observers"]
    if len(quorum["voters"]) == 3 and [o["replica_id"] for o in quorum["observers"]] == [BROKER_ID] and all(
            r["log_end_offset"] == quorum["high_watermark"] and r["last_caught_up_timestamp"] > 0 for r in replicas):
        return dict(quorum)
    return None


@pytest.mark.parametrize("version", VERSIONS)
def test_the_broker_the_admin_api_and_the_cli_agree(cluster: LocalCluster, version: int,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from tidelog.cli import main

    wait_until("every voter and broker 4 caught up", lambda: everyone_caught_up(cluster))
    before_ms = int(time.time() * 1000)
    from_admin = admin_get(f"{follower_url(cluster)}/v1/quorum")  # forwarded to the active controller
    response = describe_through_broker(cluster, version)
    assert response.error_code == 0
    [topic] = response.topics
    [partition] = topic.partitions
    assert (topic.topic_name, partition.partition_index, partition.error_code) == (METADATA_TOPIC, 0, 0)
    assert (partition.leader_id, partition.leader_epoch) == (from_admin["leader_id"], from_admin["leader_epoch"])
    assert partition.leader_id in {1, 2, 3} and partition.leader_epoch >= 1
    # the high watermark only grows (brokers' heartbeats write nothing; a fencing might)
    assert partition.high_watermark >= from_admin["high_watermark"] > 0
    assert sorted(v.replica_id for v in partition.current_voters) == [1, 2, 3]
    assert [o.replica_id for o in partition.observers] == [BROKER_ID]
    for voter in partition.current_voters:
        assert 0 < voter.log_end_offset <= partition.high_watermark
        if version >= 1:  # the timestamps came with v1
            if voter.replica_id == partition.leader_id:
                assert voter.last_fetch_timestamp == -1  # Kafka reports none for the leader
                assert voter.last_caught_up_timestamp >= before_ms
            else:
                assert before_ms - 10_000 < voter.last_fetch_timestamp
                assert voter.last_caught_up_timestamp > 0

    code = main(["quorum", "describe", "--status", "--admin-url", follower_url(cluster)])
    status = capsys.readouterr().out
    assert code == 0, status
    lines = dict(line.split(":", 1) for line in status.splitlines())
    assert lines["LeaderId"].strip() == str(partition.leader_id)
    assert lines["LeaderEpoch"].strip() == str(partition.leader_epoch)
    assert lines["CurrentVoters"].strip() == '[{"id": 1}, {"id": 2}, {"id": 3}]'
    assert lines["CurrentObservers"].strip() == f'[{{"id": {BROKER_ID}}}]'
    assert int(lines["HighWatermark"]) >= from_admin["high_watermark"]

    code = main(["quorum", "describe", "--replication", "--admin-url", cluster.admin_url])
    table = capsys.readouterr().out.splitlines()
    assert code == 0, table
    assert table[0].split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                "LastCaughtUpTimestamp", "Status"]
    rows = [line.split() for line in table[1:]]
    assert [(int(r[0]), r[-1]) for r in rows][:1] == [(partition.leader_id, "Leader")]
    assert sorted(r[-1] for r in rows) == ["Follower", "Follower", "Leader", "Observer"]


def test_another_partition_is_unknown(cluster: LocalCluster) -> None:
    response = describe_through_broker(cluster, 2, topic="orders", partition=3)
    [topic] = response.topics
    [partition] = topic.partitions
    assert (topic.topic_name, partition.partition_index, partition.error_code) == ("orders", 3, 3)


def test_the_cli_needs_one_view(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    from tidelog.cli import main

    assert main(["quorum", "describe", "--admin-url", cluster.admin_url]) == 2
    assert "exactly one of --status or --replication" in capsys.readouterr().err
