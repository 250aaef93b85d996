"""What each broker's applied metadata says, beside the quorum's, for chaos.checkers.quorum_safety.

After the final heal, every broker is asked for its metadata alone (a Kafka Metadata request
to that broker, answered from the image it applied) and then the quorum (the admin API: its
committed log). The quorum is read last, so a broker's view can only be older, never newer:
a broker holding a topic the quorum lacks, or a partition at a leader epoch above the
quorum's, applied a committed record the quorum has since lost. A broker that stopped because
the records it fetched do not apply on top of its image (its metadata follower's fatal error,
from its node.log) says the same in its own words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from chaos.engine.targets import ClusterView
from chaos.history import History
from common.broker_connection import BrokerUnavailable
from common.kafka_client import KafkaClient

FOLLOWER_STOPPED: Final = "the metadata follower stopped on an unexpected error"
CANNOT_APPLY: Final = "MetadataFollowerError: cannot apply the fetched records"


def follower_stopped(log_path: Path) -> str | None:
    """The broker's own account when its metadata follower stopped on records it could not apply
    on top of what it had applied (broker.node's fatal line): its image is no prefix of the log."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [line for line in lines if FOLLOWER_STOPPED in line and CANNOT_APPLY in line]
    return CANNOT_APPLY + found[-1].split(CANNOT_APPLY, 1)[1] if found else None


def record_metadata_views(view: ClusterView, history: History, topics: list[str]) -> None:
    """One `broker-metadata` event per broker (its topics and their partitions' leader epochs),
    then one `quorum-metadata` event; a broker that does not answer is recorded as such."""
    for node in sorted(view.cluster.brokers, key=lambda n: n.spec.node_id):
        try:
            with KafkaClient([(node.spec.host, node.spec.kafka_port)], client_id="tidelog-chaos") as client:
                info = client.metadata(None)
        except (BrokerUnavailable, OSError) as exc:
            history.record("broker-metadata", node=node.spec.node_id, error=str(exc),
                           diverged=follower_stopped(node.spec.log_path))
            continue
        history.record("broker-metadata", node=node.spec.node_id, topics={
            name: {str(p): part.leader_epoch for p, part in sorted(topic.partitions.items())}
            for name, topic in sorted(info.topics.items()) if not name.startswith("__")})
    try:
        names = sorted(t["name"] if isinstance(t, dict) else t for t in view.get("/v1/topics"))
        quorum = {name: {str(p["partition"]): p["leader_epoch"] for p in view.partitions(name)}
                  for name in names if not name.startswith("__")}
    except (OSError, ValueError, KeyError) as exc:
        history.record("quorum-metadata", error=str(exc))
        return
    history.record("quorum-metadata", topics=quorum, checked=sorted(topics))
