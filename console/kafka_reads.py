"""The console's reads from the brokers, in Kafka's protocol: blocking calls the routes run in a
worker thread (`asyncio.to_thread`), each on its own short-lived `KafkaClient`.

    offsets = log_offsets(brokers, image_topic)          # partition -> (log start, log end)
    sizes = log_sizes(brokers, "orders")                 # partition -> bytes on its leader's disk
    configs = topic_configs(brokers, "orders")           # DescribeConfigs with each config's source
    page = browse(brokers, image_topic, Browse(...))     # a bounded Fetch, records as the page shows them
    starts, ends = share_offsets(brokers, "workers")     # a share group's start offsets and their log ends

What the metadata image says (leaders, brokers) is the controller's; what the logs hold only the
brokers know, so these ask them as any Kafka client would. Every call is bounded by
READ_TIMEOUT; a broker that does not answer leaves its partitions' numbers null, never an error
for the whole page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from common.broker_connection import BrokerUnavailable
from common.errors import CorruptRecordError, ErrorCode
from common.kafka_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, KafkaClient, error_name
from common.protocol import describe_configs as dc
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.record_batch import iter_batches
from common.records import decode_records
from common.units import SECONDS
from console.views import MAX_BROWSE_BYTES, Browse, shown
from metadata.image import TopicImage
from quorum.admin_api import AdminError

READ_TIMEOUT: Final = 5 * SECONDS  # one request to one broker
CLIENT_ID: Final = "tidelog-console"
DESCRIBE_CONFIGS_VERSION: Final = 4
DESCRIBE_LOG_DIRS_VERSION: Final = 4
SOURCES: Final = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                  4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}  # Kafka's ConfigSource ids
COMPRESSION: Final = ("none", "gzip", "snappy", "lz4", "zstd")

Brokers = Mapping[int, tuple[str, int]]  # unfenced broker id -> Kafka listener address


def _client(brokers: Brokers) -> KafkaClient:
    if not brokers:
        raise AdminError("BROKER_NOT_AVAILABLE", "no unfenced broker to ask", None, status=503)
    client = KafkaClient(list(brokers.values()), client_id=CLIENT_ID, request_timeout=READ_TIMEOUT)
    client.brokers = dict(brokers)  # the image's view: no Metadata round trip needed
    return client


def _by_leader(topic: TopicImage, ids: Sequence[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for pid in ids:
        p = topic.partitions.get(pid)
        if p is not None and p.leader >= 0:
            out.setdefault(p.leader, []).append(pid)
    return out


def log_offsets(brokers: Brokers, topic: TopicImage, ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
    """partition -> (log start offset, high watermark) of partitions `ids`, from each leader's ListOffsets."""
    out: dict[int, tuple[int | None, int | None]] = {}
    with _client(brokers) as client:
        for leader, partitions in _by_leader(topic, ids).items():  # bounded by the brokers
            if leader not in brokers:
                continue
            try:
                first = client.list_offsets(leader, topic.name, {p: EARLIEST_TIMESTAMP for p in partitions})
                last = client.list_offsets(leader, topic.name, {p: LATEST_TIMESTAMP for p in partitions})
            except BrokerUnavailable:
                continue
            for p in partitions:
                a, b = first.get(p), last.get(p)
                out[p] = (a.offset if a is not None and a.error_code == 0 else None,
                          b.offset if b is not None and b.error_code == 0 else None)
    return out


def log_sizes(brokers: Brokers, topic: TopicImage, ids: Sequence[int]) -> dict[int, int]:
    """partition -> bytes of its leader's replica, for partitions `ids` (DescribeLogDirs, as kafka-log-dirs.sh)."""
    m = messages.request_module(ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION)
    out: dict[int, int] = {}
    with _client(brokers) as client:
        for leader, partitions in _by_leader(topic, ids).items():
            if leader not in brokers:
                continue
            request = m.DescribeLogDirsRequest(topics=(m.DescribableLogDirTopic(topic=topic.name,
                                                                                partitions=tuple(partitions)),))
            try:
                answer = client.call(leader, ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, request,
                                     messages.encode_request, messages.response_decoder(ApiKey.DESCRIBE_LOG_DIRS))
            except BrokerUnavailable:
                continue
            for d in answer.results:
                for t in d.topics:
                    if t.name == topic.name:
                        out.update({p.partition_index: p.partition_size for p in t.partitions
                                    if p.partition_index in partitions and not p.is_future_key})
    return out


def topic_configs(brokers: Brokers, name: str) -> list[dict[str, Any]]:
    """Every config of the topic with its value and source, as kafka-configs.sh --describe --all."""
    request = dc.request(DESCRIBE_CONFIGS_VERSION, (dc.RESOURCE_TYPE_TOPIC, name, None), include_synonyms=True)
    with _client(brokers) as client:
        try:
            answer = client.call(next(iter(brokers)), ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, request,
                                 dc.encode_describe_configs_request, dc.decode_describe_configs_response)
        except BrokerUnavailable as exc:
            raise AdminError("BROKER_NOT_AVAILABLE", f"DescribeConfigs failed: {exc}", None, status=503) from None
    [result] = answer.results
    if result.error_code:
        raise AdminError(error_name(result.error_code), result.error_message or "DescribeConfigs failed", None)
    return [{"name": c.name, "value": None if c.is_sensitive else c.value, "sensitive": c.is_sensitive,
             "source": SOURCES.get(c.config_source, "UNKNOWN")} for c in result.configs]


def share_offsets(brokers: Brokers, group_id: str) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """A share group's partitions: their start offsets (SPSO) and log end offsets, asked as
    `tidelog groups describe` asks them (its DescribeShareGroupOffsets at the coordinator, and
    ListOffsets at the leaders)."""
    from tidelog.cli_groups import _share_offsets  # noqa: PLC2701 (the CLI's reading, not a copy of it)
    from tidelog.cli_common import ClusterError
    from tidelog.group_admin import GroupAdmin

    with _client(brokers) as client:
        admin = GroupAdmin(client)
        try:
            starts = _share_offsets(admin, group_id)
            ends = admin.log_end_offsets(sorted({t for t, _ in starts}))
        except BrokerUnavailable as exc:
            raise AdminError("BROKER_NOT_AVAILABLE", f"DescribeShareGroupOffsets failed: {exc}", None,
                             status=503) from None
        except ClusterError as exc:
            raise AdminError(exc.error, exc.message, None,
                             status=404 if exc.error == "GROUP_ID_NOT_FOUND" else 503) from None
    return starts, ends


def browse(brokers: Brokers, topic: TopicImage, want: Browse) -> dict[str, Any]:
    """Up to `want.limit` records of one partition from its leader, at most MAX_BROWSE_BYTES fetched:
    from `offset`, from the first at or after `timestamp`, or the last `limit` before the high
    watermark. An offset past the end answers OFFSET_OUT_OF_RANGE and changes nothing."""
    registration = topic.partitions.get(want.partition)
    if registration is None:
        raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic.name!r} has no partition {want.partition} "
                         f"(it has {len(topic.partitions)})", "partition", status=404)
    leader = registration.leader
    if leader not in brokers:
        raise AdminError("LEADER_NOT_AVAILABLE", f"partition {want.partition} has no live leader", "partition",
                         status=503)
    with _client(brokers) as client:
        try:
            bounds = {ts: client.list_offsets(leader, topic.name, {want.partition: ts}).get(want.partition)
                      for ts in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)}
            start, end = (b.offset if b is not None and b.error_code == 0 else None for b in bounds.values())
            if start is None or end is None:
                raise AdminError("LEADER_NOT_AVAILABLE", "the leader did not answer ListOffsets", None, status=503)
            position = _position(client, leader, topic.name, want, start, end)
            fetched = client.fetch(leader, topic.name, {want.partition: position}, max_wait_ms=0,
                                   max_bytes=MAX_BROWSE_BYTES).get(want.partition)
        except BrokerUnavailable as exc:
            raise AdminError("BROKER_NOT_AVAILABLE", f"broker {leader}: {exc}", None, status=503) from None
    if fetched is None or fetched.error_code:
        code = ErrorCode.UNKNOWN_SERVER_ERROR if fetched is None else fetched.error_code
        raise AdminError(error_name(code), f"Fetch from broker {leader} failed", None, status=503)
    raw = fetched.records
    data = bytes(raw) if isinstance(raw, (bytes, memoryview)) else b""  # a placeholder: nothing fetched
    return {"topic": topic.name, "partition": want.partition, "leader": leader, "log_start_offset": start,
            "high_watermark": fetched.high_watermark, "from_offset": position,
            "records": _records(data, position, want)}


def _position(client: KafkaClient, leader: int, topic: str, want: Browse, start: int, end: int) -> int:
    if want.timestamp is not None:
        found = client.list_offsets(leader, topic, {want.partition: want.timestamp}).get(want.partition)
        if found is None or found.error_code or found.offset < 0:
            raise AdminError("OFFSET_OUT_OF_RANGE", f"no record at or after timestamp {want.timestamp} "
                             f"(partition {want.partition} ends at offset {end})", "timestamp")
        return int(found.offset)
    if want.offset is None:
        return max(start, end - want.limit)
    if want.offset >= end and not (want.offset == end == start):
        raise AdminError("OFFSET_OUT_OF_RANGE", f"offset {want.offset} is past the end of partition "
                         f"{want.partition} (log end offset {end}; records {start}..{end - 1})", "offset")
    if want.offset < start:
        raise AdminError("OFFSET_OUT_OF_RANGE", f"offset {want.offset} is below the log start offset {start} "
                         f"of partition {want.partition}", "offset")
    return want.offset


def _records(data: bytes, position: int, want: Browse) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        for pos, header in iter_batches(data, verify=True, allow_partial_tail=True):  # bounded by the bytes
            if header.is_control or header.next_offset <= position:
                continue
            batch = {"base_offset": header.base_offset, "records": header.record_count,
                     "bytes": header.size, "compression": COMPRESSION[header.attributes & 0x7]
                     if header.attributes & 0x7 < len(COMPRESSION) else "unknown",
                     "transactional": header.is_transactional, "producer_id": header.producer_id,
                     "leader_epoch": header.partition_leader_epoch}
            for record in decode_records(data, pos, header):
                if record.offset < position:
                    continue
                out.append({"offset": record.offset, "timestamp": record.timestamp,
                            "key": shown(record.key, want.fmt), "value": shown(record.value, want.fmt),
                            "headers": [{"key": h.key, "value": shown(h.value, want.fmt)} for h in record.headers],
                            "batch": batch})
                if len(out) >= want.limit:
                    return out
    except CorruptRecordError as exc:
        raise AdminError("CORRUPT_MESSAGE", f"a fetched batch does not check: {exc}", None, status=500) from None
    return out
