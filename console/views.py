"""The console's pure views: an image, records or text in, a JSON-ready dict out.

    rows = topic_rows(image, default_min_isr=1)          # one row per topic, with its health counts
    topic_page(rows, query="orders", page=0, size=50)    # the searched page plus the cluster-wide counts
    history(records, image)                              # state transitions of the metadata log
    shown(b'{"a": 1}', "json")                           # a key or value as text, pretty JSON or hex

Query strings are checked here (`parse_topic_query`, `parse_browse`); bad input raises the admin
API's `AdminError`, so a page shows the same `{"error", "message", "field"}` as the API.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from common.units import KIB, MIB
from metadata.image import MetadataImage, TopicImage
from metadata.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BeginEpoch,
    BrokerRegistrationChange,
    ConfigResourceType,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnregisterBroker,
)
from quorum.admin_api import AdminError, check_int

PURE = True  # a pure core: no sockets, threads, clocks or files

DEFAULT_PAGE_SIZE: Final = 50  # topics per page
MAX_PAGE_SIZE: Final = 500
MAX_QUERY_CHARS: Final = 249  # Kafka's longest topic name
DEFAULT_PARTITION_PAGE: Final = 100  # partitions one topic page shows (and asks the brokers about)
MAX_PARTITION_PAGE: Final = 1000
DEFAULT_BROWSE_RECORDS: Final = 20
MAX_BROWSE_RECORDS: Final = 500  # records one browse answers
MAX_BROWSE_BYTES: Final = 1 * MIB  # bytes one browse fetches: never a whole partition
MAX_SHOWN_BYTES: Final = 16 * KIB  # of one key, value or header shown; the rest is cut and said so
MAX_HISTORY_EVENTS: Final = 200  # transitions the history strip shows (the newest)
FORMATS: Final = ("text", "json", "hex")
MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    offline: int
    under_replicated: int
    under_min_isr: int

    def view(self) -> dict[str, Any]:
        return {"name": self.name, "topic_id": self.topic_id, "partitions": self.partitions,
                "replication_factor": self.replication_factor, "offline_partitions": self.offline,
                "under_replicated_partitions": self.under_replicated, "under_min_isr_partitions": self.under_min_isr}


def min_isr(image: MetadataImage, topic: str, default: int) -> int:
    """A topic's min.insync.replicas: its own, else the cluster-level dynamic default, else `default`."""
    for value in (image.config(ConfigResourceType.TOPIC, topic).get(MIN_INSYNC_REPLICAS),
                  image.config(ConfigResourceType.BROKER, "").get(MIN_INSYNC_REPLICAS)):
        if value is not None and value.isdigit():
            return int(value)
    return default


def topic_row(image: MetadataImage, topic: TopicImage, default_min_isr: int) -> TopicRow:
    needed = min_isr(image, topic.name, default_min_isr)
    offline = under = below = 0
    for p in topic.partitions.values():  # bounded by the topic's partitions
        offline += p.leader == NO_LEADER
        under += len(p.isr) < len(p.replicas)
        below += len(p.isr) < needed
    first = topic.partitions.get(0)
    return TopicRow(topic.name, topic.topic_id, len(topic.partitions), 0 if first is None else len(first.replicas),
                    offline, under, below)


def topic_rows(image: MetadataImage, default_min_isr: int) -> tuple[TopicRow, ...]:
    """Every topic's row, sorted by name (the shell caches it per image)."""
    by_name = image.topics.by_name
    return tuple(topic_row(image, by_name[name], default_min_isr) for name in sorted(by_name))


def parse_topic_query(query: Mapping[str, str]) -> tuple[str, int, int]:
    """(search text, page, page size) of GET /console/api/topics?q=&page=&size=."""
    unknown = sorted(set(query) - {"q", "page", "size"})
    if unknown:
        raise AdminError("INVALID_REQUEST", f"unknown parameter {unknown[0]!r} (expected q, page, size)", unknown[0])
    text = query.get("q", "")
    if len(text) > MAX_QUERY_CHARS:
        raise AdminError("INVALID_REQUEST", f"q is longer than {MAX_QUERY_CHARS} characters", "q")
    return (text.strip(), _int_param(query, "page", 0, 0, 10**6),
            _int_param(query, "size", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE))


def topic_page(rows: Sequence[TopicRow], *, query: str, page: int, size: int) -> dict[str, Any]:
    """One page of the topics whose name contains `query` (case-insensitive), and the counts of
    the whole cluster up front: a problem on page 40 is still seen on page 1."""
    needle = query.lower()
    matched = [r for r in rows if needle in r.name.lower()] if needle else list(rows)
    pages = max(1, math.ceil(len(matched) / size))
    return {
        "query": query, "page": page, "size": size, "pages": pages, "matched": len(matched),
        "totals": {"topics": len(rows), "partitions": sum(r.partitions for r in rows),
                   "offline_partitions": sum(r.offline for r in rows),
                   "under_replicated_partitions": sum(r.under_replicated for r in rows),
                   "under_min_isr_partitions": sum(r.under_min_isr for r in rows)},
        "topics": [r.view() for r in matched[page * size:(page + 1) * size]],
    }


def parse_partition_page(query: Mapping[str, str], partitions: int) -> tuple[int, int, list[int]]:
    """(page, size, partition ids) of GET /console/api/topics/{name}?page=&size=: a topic of 10,000
    partitions is shown, and its logs asked about, a page at a time."""
    unknown = sorted(set(query) - {"page", "size"})
    if unknown:
        raise AdminError("INVALID_REQUEST", f"unknown parameter {unknown[0]!r} (expected page, size)", unknown[0])
    page = _int_param(query, "page", 0, 0, 10**6)
    size = _int_param(query, "size", DEFAULT_PARTITION_PAGE, 1, MAX_PARTITION_PAGE)
    return page, size, list(range(page * size, min(partitions, (page + 1) * size)))


def partitions_view(topic: TopicImage, offsets: Mapping[int, tuple[int | None, int | None]],
                    sizes: Mapping[int, int], ids: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """Each partition's registration with its log start/end offsets and size (None: unknown);
    `ids`: only those partitions (default: all)."""
    out = []
    for pid in sorted(topic.partitions) if ids is None else [i for i in ids if i in topic.partitions]:
        p = topic.partitions[pid]
        start, end = offsets.get(pid, (None, None))
        out.append({"partition": pid, "leader": p.leader, "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch, "replicas": list(p.replicas), "isr": list(p.isr),
                    "elr": list(p.elr), "leader_recovery_state": p.leader_recovery_state.name,
                    "adding_replicas": list(p.adding_replicas), "removing_replicas": list(p.removing_replicas),
                    "log_start_offset": start, "log_end_offset": end, "size_bytes": sizes.get(pid)})
    return out


def lifecycle_state(view: Mapping[str, Any], session_timeout_ms: int, reported: str | None = None) -> str:
    """A broker's lifecycle state: `reported`, the broker's own (broker_state, from its /metrics),
    when it answered; else as the controller can tell it (Kafka's BrokerState names): RUNNING when
    unfenced, CONTROLLED_SHUTDOWN, RECOVERY when fenced but heartbeating within its session
    (registered, catching up on metadata and logs before it is unfenced), else FENCED. Only the
    broker itself knows STARTING (not yet caught up with the metadata log)."""
    if reported is not None:
        return reported
    if view["in_controlled_shutdown"]:
        return "CONTROLLED_SHUTDOWN"
    if not view["fenced"]:
        return "RUNNING"
    age = view.get("heartbeat_age_ms")
    return "RECOVERY" if age is not None and age < session_timeout_ms else "FENCED"


# --- The history strip: state transitions in the metadata log.


def history(records: Iterable[tuple[int, Any]], image: MetadataImage) -> list[dict[str, Any]]:
    """The newest MAX_HISTORY_EVENTS transitions among `records` (offset, record): brokers registered,
    fenced, unfenced, in controlled shutdown or gone; leader changes; topics made or removed; new
    controller epochs. Topic names are the image's (a removed topic shows its id)."""
    names = {t.topic_id: t.name for t in image.topics.by_id.values()}
    out: list[dict[str, Any]] = []
    for offset, record in records:
        event = _transition(record, names)
        if event is not None:
            kind, text = event
            if isinstance(record, Topic):
                names[record.topic_id] = record.name
            out.append({"offset": offset, "kind": kind, "text": text})
    return out[-MAX_HISTORY_EVENTS:]


def _transition(record: Any, names: Mapping[str, str]) -> tuple[str, str] | None:
    if isinstance(record, RegisterBroker):
        return "register", f"broker {record.broker_id} registered{' (fenced)' if record.fenced else ''}"
    if isinstance(record, UnregisterBroker):
        return "unregister", f"broker {record.broker_id} unregistered (epoch {record.broker_epoch})"
    if isinstance(record, BrokerRegistrationChange):
        if record.fenced is not None:
            word = "fenced" if record.fenced else "unfenced"
            return word, f"broker {record.broker_id} {word} (epoch {record.broker_epoch})"
        if record.in_controlled_shutdown:
            return "shutdown", f"broker {record.broker_id} in controlled shutdown"
        return None
    if isinstance(record, PartitionChange) and record.leader != NO_LEADER_CHANGE:
        where = f"{names.get(record.topic_id, record.topic_id)}-{record.partition_id}"
        if record.leader == NO_LEADER:
            return "offline", f"{where} has no leader"
        return "leader", f"{where} leader -> {record.leader}"
    if isinstance(record, Topic):
        return "topic", f"topic {record.name} created"
    if isinstance(record, RemoveTopic):
        return "topic", f"topic {names.get(record.topic_id, record.topic_id)} deleted"
    if isinstance(record, BeginEpoch):
        return "epoch", f"controller epoch {record.epoch} began"
    return None


# --- Records as the page shows them.


def shown(data: bytes | None, fmt: str) -> dict[str, Any]:
    """A key, value or header value in `fmt`: text (UTF-8, bad bytes replaced), json (pretty when it
    parses, else text with `json_error`), or hex; cut at MAX_SHOWN_BYTES (`truncated`)."""
    if data is None:
        return {"null": True, "size": 0}
    cut = data[:MAX_SHOWN_BYTES]
    out: dict[str, Any] = {"size": len(data), "truncated": len(data) > MAX_SHOWN_BYTES}
    if fmt == "hex":
        out["text"] = cut.hex(" ")
        return out
    text = cut.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            out["text"] = json.dumps(json.loads(data), indent=2, ensure_ascii=False)[:MAX_SHOWN_BYTES]
            return out
        except (ValueError, UnicodeDecodeError) as exc:
            out["json_error"] = str(exc)
    out["text"] = text
    return out


@dataclass(frozen=True, slots=True)
class Browse:
    """GET /console/api/topics/{name}/records: where to start and how many (a bounded read)."""

    partition: int
    offset: int | None  # None with timestamp None: the last `limit` records
    timestamp: int | None
    limit: int
    fmt: str


def parse_browse(query: Mapping[str, str]) -> Browse:
    allowed = {"partition", "offset", "timestamp", "limit", "format"}
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise AdminError("INVALID_REQUEST", f"unknown parameter {unknown[0]!r} (expected "
                         f"{', '.join(sorted(allowed))})", unknown[0])
    if "offset" in query and "timestamp" in query:
        raise AdminError("INVALID_REQUEST", "give offset or timestamp, not both", "offset")
    fmt = query.get("format", "text")
    if fmt not in FORMATS:
        raise AdminError("INVALID_REQUEST", f"format must be one of {', '.join(FORMATS)}, got {fmt[:40]!r}", "format")
    return Browse(partition=_int_param(query, "partition", 0, 0, 2**31 - 1),
                  offset=_int_param(query, "offset", None, 0, 2**63 - 1),
                  timestamp=_int_param(query, "timestamp", None, 0, 2**63 - 1),
                  limit=_int_param(query, "limit", DEFAULT_BROWSE_RECORDS, 1, MAX_BROWSE_RECORDS), fmt=fmt)


def _int_param(query: Mapping[str, str], name: str, default: Any, low: int, high: int) -> Any:
    text = query.get(name)
    if text is None or text == "":
        return default
    if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 20:
        raise AdminError("INVALID_REQUEST", f"{name} must be an integer, got {text[:40]!r}", name)
    return check_int(int(text), name, low, high)


# --- A share group's partitions.


def share_partitions(starts: Mapping[tuple[str, int], int],
                     ends: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """Each share partition's start offset (SPSO: every record before it is acknowledged or
    archived), its log end offset and the records past the SPSO (`tidelog groups describe`'s
    LAG); a start of -1 (no state yet) or an unknown end has no lag."""
    out = []
    for (topic, partition), start in sorted(starts.items()):
        end = ends.get((topic, partition))
        out.append({"topic": topic, "partition": partition, "start_offset": None if start < 0 else start,
                    "log_end_offset": end, "lag": None if start < 0 or end is None else max(end - start, 0)})
    return out


# --- Broker byte rates from their /metrics text.

BYTES_IN: Final = "tidelog_broker_bytes_in_total"
BYTES_OUT: Final = "tidelog_broker_bytes_out_total"
TOPIC_BYTES_OUT: Final = "tidelog_broker_topic_bytes_out_total"  # consumers' fetches only (KIP-153)
BROKER_STATE: Final = "tidelog_broker_state"  # Kafka's BrokerState gauge: the broker's own lifecycle state
# Kafka's BrokerState numbers -> the names the cluster page shows (PENDING_CONTROLLED_SHUTDOWN is
# the controller's CONTROLLED_SHUTDOWN: one name for one state, whoever tells it)
BROKER_STATE_NAMES: Final[Mapping[int, str]] = {
    0: "NOT_RUNNING", 1: "STARTING", 2: "RECOVERY", 3: "RUNNING", 6: "CONTROLLED_SHUTDOWN", 7: "SHUTTING_DOWN"}


def metric_values(text: str, names: Iterable[str]) -> dict[str, float]:
    """The unlabelled samples of `names` in Prometheus text (others ignored)."""
    wanted = set(names)
    out: dict[str, float] = {}
    for line in text.splitlines():  # bounded by the text the shell read (itself bounded)
        name, _, value = line.partition(" ")
        if name in wanted:
            try:
                out[name] = float(value.split()[0])
            except (ValueError, IndexError):
                continue
    return out


def topic_sample(text: str, name: str, topic: str) -> float | None:
    """The sample of `name`{topic="..."} in Prometheus text; None when the broker has none (it
    served no consumer of that topic since it started, or is not a tidelog broker)."""
    # a topic name is [a-zA-Z0-9._-] only (Kafka's Topic.validate): nothing the exposition escapes
    prefix = f'{name}{{topic="{topic}"}} '
    for line in text.splitlines():  # bounded by the text the shell read (itself bounded)
        if line.startswith(prefix):
            try:
                return float(line[len(prefix):].split()[0])
            except (ValueError, IndexError):
                return None
    return None


def rates(before: tuple[float, Mapping[str, float]] | None,
          after: tuple[float, Mapping[str, float]]) -> dict[str, float | None]:
    """Per-second rates of BYTES_IN / BYTES_OUT between two (seconds, values) samples; None
    without an earlier sample, after a restart (a counter went down) or for a zero interval."""
    out: dict[str, float | None] = {"bytes_in_per_s": None, "bytes_out_per_s": None}
    if before is None or after[0] <= before[0]:
        return out
    seconds = after[0] - before[0]
    for name, key in ((BYTES_IN, "bytes_in_per_s"), (BYTES_OUT, "bytes_out_per_s")):
        a, b = before[1].get(name), after[1].get(name)
        if a is not None and b is not None and b >= a:
            out[key] = round((b - a) / seconds, 1)
    return out


def broker_state(text: str) -> str | None:
    """The broker's own lifecycle state from its /metrics text (BROKER_STATE's number, named as the
    cluster page names it); None when the text has none or a number Kafka does not define."""
    prefix = BROKER_STATE + "{"
    for line in text.splitlines():  # bounded by the text the shell read (itself bounded)
        if line.startswith(prefix):
            try:
                return BROKER_STATE_NAMES.get(int(float(line.rpartition("} ")[2].split()[0])))
            except (ValueError, IndexError):
                return None
    return None
