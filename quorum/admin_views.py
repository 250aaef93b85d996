"""The admin API's JSON views of the committed image and its Prometheus metrics text: pure
functions, an image (or a rule's result) in, a JSON-ready dict or text out. Not marked PURE:
the metrics text is prometheus_client's, whose import loads http.server. The aiohttp shell
(`quorum.controller_server`, `quorum.topic_routes`) serves them; requests are validated in
`quorum.admin_api`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.prometheus import exposition, gauge, unlabelled
from metadata.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from metadata.records import NO_LEADER, ConfigResourceType
from quorum.topic_control import TopicCreated
from shutdown.controller_states import current_broker_state

# --- JSON views of the committed image.


def broker_state(broker: BrokerRegistration) -> str:
    """Kafka's controller-side broker state names, as the heartbeat rules read them: fencing wins
    (a broker fenced at the end of its controlled shutdown keeps the in_controlled_shutdown flag)."""
    return current_broker_state(fenced=broker.fenced, in_controlled_shutdown=broker.in_controlled_shutdown).name


def broker_view(broker: BrokerRegistration, heartbeat_age_ms: int | None = None) -> dict[str, Any]:
    return {
        "broker_id": broker.broker_id, "broker_epoch": broker.broker_epoch,
        "incarnation_id": broker.incarnation_id, "rack": broker.rack, "state": broker_state(broker),
        "fenced": broker.fenced, "in_controlled_shutdown": broker.in_controlled_shutdown,
        "listeners": [{"name": lst.name, "host": lst.host, "port": lst.port} for lst in broker.listeners],
        "heartbeat_age_ms": heartbeat_age_ms,  # null unless this is the active controller
        "offline_replicas": len(broker.offline_replicas),  # replicas it could not open (this registration)
    }


def partition_view(p: PartitionRegistration, image: MetadataImage | None = None) -> dict[str, Any]:
    """One partition; with the image, `offline_replicas` names the replicas whose broker could
    not open them (OfflineReplicas: offline there until that broker registers again)."""
    return {
        "partition": p.partition_id, "leader": p.leader, "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch, "replicas": list(p.replicas), "isr": list(p.isr),
        "elr": list(p.elr), "leader_recovery_state": p.leader_recovery_state.name,
        "under_replicated": len(p.isr) < len(p.replicas), "offline": p.leader == NO_LEADER,
        "offline_replicas": [] if image is None else list(image.failed_replicas(p)),
    }


def topic_configs(image: MetadataImage, topic: TopicImage) -> dict[str, str]:
    return dict(sorted(image.config(ConfigResourceType.TOPIC, topic.name).items()))


def topic_view(image: MetadataImage, topic: TopicImage) -> dict[str, Any]:
    return {"name": topic.name, "topic_id": topic.topic_id, "configs": topic_configs(image, topic),
            "partitions": [partition_view(topic.partitions[p], image) for p in sorted(topic.partitions)]}


def validated_topic_view(created: TopicCreated) -> dict[str, Any]:
    """What a validate_only create would have made (nothing was appended)."""
    return {"name": created.name, "validate_only": True, "partitions": created.partitions,
            "replication_factor": created.replication_factor, "configs": dict(created.configs),
            "assignments": [{"partition": p, "replicas": list(r)} for p, r in enumerate(created.assignments)]}


def validated_partitions_view(name: str, count: int, added: Mapping[int, tuple[int, ...]]) -> dict[str, Any]:
    """What a validate_only CreatePartitions would have added (nothing was appended)."""
    return {"name": name, "validate_only": True, "count": count,
            "assignments": [{"partition": p, "replicas": list(added[p])} for p in sorted(added)]}


def topic_summary(topic: TopicImage) -> dict[str, Any]:
    offline = sum(1 for p in topic.partitions.values() if p.leader == NO_LEADER)
    under = sum(1 for p in topic.partitions.values() if len(p.isr) < len(p.replicas))
    return {"name": topic.name, "topic_id": topic.topic_id, "partitions": len(topic.partitions),
            "offline_partitions": offline, "under_replicated_partitions": under}


def election_view(results: Mapping[tuple[str, int], Any]) -> dict[str, Any]:
    """ElectLeaders' per-partition outcome: NONE when a new leader was elected."""
    return {"results": [{"topic": topic, "partition": partition, "error": getattr(code, "name", str(code))}
                        for (topic, partition), code in results.items()]}


def offline_partitions(image: MetadataImage) -> int:
    return sum(1 for t in image.topics.by_id.values() for p in t.partitions.values() if p.leader == NO_LEADER)


def under_replicated_partitions(image: MetadataImage) -> int:
    return sum(1 for t in image.topics.by_id.values() for p in t.partitions.values()
               if len(p.isr) < len(p.replicas))


# --- Prometheus text of the controller.


def metrics_text(image: MetadataImage, *, is_active: bool, term: int, commit_index: int,
                 heartbeat_ages_ms: Mapping[int, int]) -> str:
    """The controller's gauges, named after Kafka's controller metrics."""
    brokers = image.cluster.brokers.values()
    partitions = sum(len(t.partitions) for t in image.topics.by_id.values())
    p = "tidelog_controller_"
    gauges = (
        ("active_controller_count", "1 if this controller is the active controller, else 0.", int(is_active)),
        ("last_applied_record_offset", "Offset of the last metadata record applied to this controller's image.",
         image.offset),
        ("controller_epoch", "Epoch of the latest active controller.", image.controller_epoch),
        ("raft_term", "Current Raft term seen by this voter.", term),
        ("raft_commit_index", "Raft commit index of this voter.", commit_index),
        ("fenced_broker_count", "Registered brokers that are fenced.", sum(1 for b in brokers if b.fenced)),
        ("active_broker_count", "Registered brokers that are unfenced.", sum(1 for b in brokers if not b.fenced)),
        ("global_topic_count", "Topics.", len(image.topics.by_id)),
        ("global_partition_count", "Partitions.", partitions),
        ("offline_partitions_count", "Partitions without a leader.", offline_partitions(image)),
        ("under_replicated_partitions_count", "Partitions whose ISR is smaller than their replica set.",
         under_replicated_partitions(image)),
    )
    return exposition([
        *(gauge(p + name, help_text, unlabelled(value)) for name, help_text, value in gauges),
        gauge(p + "broker_heartbeat_age_seconds",
              "Time since each broker's last heartbeat (reported by the active controller only).",
              [({"broker_id": b}, ms / 1000) for b, ms in sorted(heartbeat_ages_ms.items())]),
    ])
