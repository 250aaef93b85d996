"""KIP-966's eligible leader replicas, on by default, with real processes (issue 28).

RF=3, min.insync.replicas=2 (1 controller, brokers 2-4): acks=all writes, then one follower is
killed (ISR [leader, other], still at min ISR: no ELR), then the other (the ISR [leader] is below
min ISR: it joins the ELR, and the leader's high watermark stands still: an acks=1 write is not
readable), then the leader (the ISR is empty, the ELR holds both). The stale follower comes back
first: it is not elected, and a client describing the topic through it sees the ELR
(DescribeTopicPartitions, a raw kio request: confluent-kafka's describe_topics reads Metadata,
which has no ELR; and `tidelog topics describe`). The ELR member then comes back and is elected
cleanly (the controller says "Leader election from the ELR"); every acknowledged write is there.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from common.errors import ErrorCode
from common.kafka_client import KafkaClient
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from chaos.workload import read_all
from localcluster.launcher import LocalCluster
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_clients import (
    assert_delivered,
    leader_bootstrap,
    produce,
    values,
    wait_unfenced,
)
from tests.integration.replication_fixtures import (
    broker_log,
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from tidelog.cli_common import parse_bootstrap_servers

TOPIC = "elr"
CONTROLLER = 1
NO_LEADER = -1


def describe_partitions(cluster: LocalCluster, bootstrap: str) -> Any:
    m = messages.request_module(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    request = m.DescribeTopicPartitionsRequest(topics=(m.TopicRequest(name=TOPIC), m.TopicRequest(name="nope")))
    with KafkaClient(parse_bootstrap_servers(bootstrap)) as client:
        return client.call(None, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, request, messages.encode_request,
                           messages.response_decoder(ApiKey.DESCRIBE_TOPIC_PARTITIONS))


def topics_describe(cluster: LocalCluster) -> str:
    from tidelog.cli import main
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["topics", "describe", "--topic", TOPIC, "--admin-url", cluster.admin_url]) == 0
    return out.getvalue()


def test_the_elr_member_is_elected_cleanly_when_the_whole_isr_is_down(tmp_path: Path) -> None:
    with replicated_cluster(tmp_path / "cluster") as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        wait_full_isr(cluster, TOPIC, 1)
        first = partition_state(cluster, TOPIC, 0)
        leader = first["leader"]
        stale, elr_member = [r for r in first["replicas"] if r != leader]
        bootstrap = leader_bootstrap(cluster, leader)
        committed = values("all-three", 20)
        assert_delivered(produce(bootstrap, TOPIC, committed, acks="all"))

        nemesis.kill(stale)
        wait_for_state(cluster, TOPIC, 0, f"ISR without {stale}", lambda s: stale not in s["isr"])
        at_min_isr = values("at-min-isr", 20)  # the stale follower never gets these
        assert_delivered(produce(bootstrap, TOPIC, at_min_isr, acks="all"))
        assert partition_state(cluster, TOPIC, 0)["elr"] == []  # at min ISR: no ELR

        nemesis.kill(elr_member)
        below = wait_for_state(cluster, TOPIC, 0, f"{elr_member} in the ELR",
                               lambda s: s["isr"] == [leader] and s["elr"] == [elr_member])
        # acks=1 while below min ISR: appended, but the high watermark stands still (KIP-966), so no
        # consumer reads what the ELR member does not have
        assert_delivered(produce(bootstrap, TOPIC, values("leader-only", 5), acks="1"))
        read = read_all(bootstrap, TOPIC, 1)
        assert [v for _, _, v in read] == committed + at_min_isr

        nemesis.kill(leader)
        down = wait_for_state(cluster, TOPIC, 0, "the whole ISR down",
                              lambda s: s["leader"] == NO_LEADER and s["isr"] == [])
        assert sorted(down["elr"]) == sorted([leader, elr_member]), down
        assert down["leader_epoch"] > below["leader_epoch"], down  # leader -1 is a leader change

        nemesis.restart(stale)  # not in the ELR: with unclean election off it must not lead
        wait_unfenced(cluster, stale)
        # a client describing the topic sees the ELR (through the stale broker, the only one up)
        # (a restarted broker closes connections until it serves clients: ask until it answers)
        answer = wait_until(f"broker {stale} serving clients",
                            lambda: describe_partitions(cluster, leader_bootstrap(cluster, stale)))
        topic, unknown = answer.topics
        (p,) = topic.partitions
        assert (topic.name, p.leader_id, p.error_code) == (TOPIC, NO_LEADER, ErrorCode.LEADER_NOT_AVAILABLE), answer
        assert (list(p.isr_nodes), sorted(p.eligible_leader_replicas)) == ([], sorted([leader, elr_member])), answer
        assert sorted(p.offline_replicas) == sorted([leader, elr_member]) and p.last_known_elr == ()
        assert (unknown.name, unknown.error_code) == ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        lines = topics_describe(cluster).splitlines()
        assert lines[1].split()[:7] == ["PARTITION", "LEADER", "LEADER_EPOCH", "REPLICAS", "ISR", "ELR", "RECOVERY"]
        assert lines[2].split()[1] == "none" and set(lines[2].split()[5].split(",")) == {str(leader),
                                                                                      str(elr_member)}, lines
        assert partition_state(cluster, TOPIC, 0)["leader"] == NO_LEADER  # still: the stale one is not eligible

        nemesis.restart(elr_member)
        elected = wait_for_state(cluster, TOPIC, 0, f"{elr_member} leads",
                                 lambda s: s["leader"] == elr_member)
        assert elected["leader_recovery_state"] == "RECOVERED" and elected["isr"][0] == elr_member, elected
        controller_log = broker_log(cluster, CONTROLLER)
        assert f"Leader election from the ELR for {TOPIC}-0: broker {elr_member} leads" in controller_log
        assert f"Unclean leader election for {TOPIC}-0" not in controller_log

        wait_for_state(cluster, TOPIC, 0, f"{stale} back in the ISR", lambda s: stale in s["isr"])
        after = values("after", 10)
        assert_delivered(produce(leader_bootstrap(cluster, elr_member), TOPIC, after, acks="all"))
        nemesis.restart(leader)
        wait_full_isr(cluster, TOPIC, 1)
        read = read_all(cluster.bootstrap_servers, TOPIC, 1)
        assert [v for _, _, v in read] == committed + at_min_isr + after  # every acknowledged acks=all write
