"""A deposed leader that restarts must not lead again from its stale metadata checkpoint.

Kafka's promise: a broker acts on partition leadership only from metadata it has caught up
with (KRaft's MetadataLoader publishes nothing until it reaches the metadata log's high
watermark), so a restarted broker never serves, appends or moves a high watermark as the
leader of an epoch that has ended while it was down.

The broker's metadata follower therefore publishes nothing from its checkpoint alone: its
first publish waits until it has caught up with the controller's committed offset.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from broker.metadata_checkpoint import read_offset_file
from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_fixtures import (
    broker_log,
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster

TOPIC = "zombie"
RESTART_MARKER = "tidelog launcher: starting"
_NUDGES = itertools.count()


def checkpoint_covers(cluster: LocalCluster, broker_id: int, offset: int) -> bool:
    """Nudge the metadata log (a config write every poll: brokers checkpoint only after
    applying new records, at most once a second) until the broker's checkpoint reaches `offset`."""
    status, body = http(f"{cluster.admin_url}/v1/topics/{TOPIC}/configs", "PATCH",
                        {"configs": {"retention.ms": str(3_600_000 + next(_NUDGES))}})
    assert status == 200, body
    checkpointed = read_offset_file(cluster.node(broker_id).spec.directory / "data")
    return checkpointed is not None and checkpointed >= offset


def test_restarted_deposed_leader_never_leads_its_old_epoch(tmp_path: Path) -> None:
    with replicated_cluster(tmp_path / "cluster") as (cluster, nemesis):
        created = create_topic(cluster, TOPIC, partitions=1, replication_factor=2)
        wait_full_isr(cluster, TOPIC, 1)
        old = partition_state(cluster, TOPIC, 0)
        leader = old["leader"]
        # The old leader's checkpoint must name it leader, as any broker's will after a while.
        wait_until(f"broker {leader} checkpoints the metadata that makes it leader",
                   lambda: checkpoint_covers(cluster, leader, created["metadata_offset"]), poll_s=0.6)

        nemesis.kill(leader)
        new = wait_for_state(cluster, TOPIC, 0, "a new leader (clean: the follower is in the ISR)",
                             lambda s: s["leader"] not in (leader, -1))
        nemesis.restart(leader)
        following = rf"Follower {TOPIC}-0 of leader {new['leader']} with leader epoch {new['leader_epoch']}"
        text = wait_until(f"broker {leader} follows broker {new['leader']} again",
                          lambda: (t := broker_log(cluster, leader).rsplit(RESTART_MARKER, 1)[1])
                          and re.search(following, t) and t)
        wait_full_isr(cluster, TOPIC, 1)
        since_restart = text[:re.search(following, text).start()]  # type: ignore[union-attr]
        stale = re.findall(rf"Leader {TOPIC}-0 with leader epoch \d+ .*", since_restart)
        assert stale == [], (f"restarted broker {leader} led {TOPIC}-0 from stale metadata before "
                             f"following epoch {new['leader_epoch']}: {stale}")
