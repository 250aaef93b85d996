"""Kafka's per-topic BrokerTopicMetrics that the web console's topic page needs: bytes of
records this broker returned to consumers per topic (Kafka's BytesOutPerSec with a topic tag).

Kafka counts them in KafkaApis' fetch response callback, once per partition of the response
(`BrokerTopicStats.updateBytesOut`), and since KIP-153 leaves follower fetches out of
BytesOutPerSec (they go to ReplicationBytesOutPerSec), so a topic's rate is consumer traffic
only. We do the same: one dict increment per partition of a consumer's fetch response, never
any per-record work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class BrokerTopicStats:
    """Per-topic byte counters for GET /metrics (single event loop: no locking)."""

    # topic -> record bytes returned to consumers; bounded by the topics this broker leads or follows
    bytes_out: dict[str, int] = field(default_factory=dict)


def count_fetch(stats: BrokerTopicStats, sizes: Iterable[tuple[str, int]], *, replica_id: int) -> None:
    """Add a fetch response's record bytes, (topic, bytes) per partition answered, to its
    topics, unless a follower (replica id >= 0) sent the fetch: replication is not a topic's
    consume rate (KIP-153)."""
    if replica_id >= 0:
        return
    out = stats.bytes_out
    for topic, size in sizes:  # one per partition of the response
        if size:
            out[topic] = out.get(topic, 0) + size
