"""The admin API's pure half: the API's limits, settings and request validation (its JSON
views of the image and its metrics text are `quorum.admin_views`).

Nothing here does I/O or reads a clock: a request body (already decoded JSON) goes in, a
frozen request or an `AdminError` comes out; an image goes in, a JSON-ready dict comes
out; a parsed config goes in, `ApiSettings` come out. The aiohttp shell (`quorum.controller_server`, `quorum.broker_rpc`) reads bodies,
routes writes to the active controller and holds the limits defined here.

An `AdminError` answers with `{"error": CODE_NAME, "message": ..., "field": ...}`; the
code names are Kafka's (`INVALID_REPLICATION_FACTOR`, `UNKNOWN_TOPIC_OR_PARTITION`, ...) so
an operator reads the same words the Kafka admin tools print.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from common import rpc, rpc_messages
from common.config_schema import Config, ConfigError, Password
from common.limits import MAX_RECORDS_PER_USER_OP
from common.rpc import (
    DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS,
    DEFAULT_BROKER_SESSION_TIMEOUT_MS,
)
from common.units import KIB, MIB, SECONDS
from metadata.image import (
    MetadataImage,
    TopicImage,
)
from metadata.partition_change import Election
from quorum.controller_result import ControllerApiError
from quorum.topic_control import validate_topic_name
from quorum.voters import KEY as VOTERS_KEY
from quorum.voters import parse_voters
from security.rpc_auth import SECRET_FILE_KEY, is_loopback
from security.controller_tls import ControllerTls

if TYPE_CHECKING:
    from quorum.quorum_settings import QuorumSettings

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# --- Limits of the controller's HTTP API (admin API and broker RPCs), all in one place.
MAX_ADMIN_BODY_BYTES: Final = 1 * MIB  # a JSON request body; larger -> 413 before reading it
# The broker RPCs' limits live with their messages in common.rpc; these name the ones used here.
MAX_RPC_BODY_BYTES: Final = rpc.MAX_RPC_BODY_BYTES
LONG_POLL_MAX_WAIT_MS: Final = rpc.LONG_POLL_MAX_WAIT_MS
MAX_FETCH_RECORDS: Final = rpc_messages.MAX_FETCH_RECORDS
# The most partitions one create, create-partitions, election or reassignment request may name:
# common.limits.MAX_RECORDS_PER_USER_OP, Kafka's bound of one admin operation.
# The most bytes a forwarded write may answer (a topic view): common.limits.MAX_ADMIN_ANSWER_BYTES.
MAX_CONFIGS_PER_REQUEST: Final = 1000
MAX_CONFIG_VALUE_CHARS: Final = 8 * KIB  # one Config record must fit a 16 KiB metadata log chunk
WRITE_TIMEOUT: Final = 5 * SECONDS  # one decision: queue, replication, commit
ACTIVE_WAIT: Final = 3 * SECONDS  # how long a write waits for an active controller to be known
# An admin write that timed out in a busy active controller's decision queue (nothing appended)
# is queued again until this much time has passed (quorum.request_routing): behind a few
# 10,000-partition creates a healthy controller's queue holds more than one WRITE_TIMEOUT.
QUEUE_RETRY_WAIT: Final = 10 * SECONDS
# The append of the largest user operation, a MAX_RECORDS_PER_USER_OP-partition create: ~112
# 16 KiB chunks x quorum.metadata_log.CHUNK_COMMIT_BUDGET (0.25 s), which is what the active
# controller allows it (tests/unit/test_request_routing.py checks the two agree).
USER_OP_APPEND_BUDGET: Final = 30 * SECONDS
FORWARD_TIMEOUT: Final = (ACTIVE_WAIT + QUEUE_RETRY_WAIT + WRITE_TIMEOUT + USER_OP_APPEND_BUDGET
                          + 2 * SECONDS)  # one forwarded write, end to end
# A relayed write is answered once this controller has applied it too, so the client's next
# read here sees its own write; past this, the answer goes out anyway (the write is committed).
FORWARD_APPLY_WAIT: Final = WRITE_TIMEOUT
# A read on a controller that has not caught up with the quorum since it started (it has not
# yet applied what the leader had committed when they first spoke) waits this long, then is
# answered 503 instead of from a stale image; below the launcher's 2 s readiness probe.
READ_CATCH_UP_WAIT: Final = 1.5 * SECONDS
FORWARD_CONNECTIONS_MAX: Final = 32  # open connections to the active controller
MAX_IN_FLIGHT_REQUESTS: Final = 1024  # requests being served at once; more answer 429 at once
ACTIVE_POLL: Final = 0.05 * SECONDS
MAX_LONG_POLLS: Final = 256  # concurrent waiting MetadataFetches; more answer at once
FENCE_TIMEOUT: Final = 2 * SECONDS  # one fencing decision
SHUTDOWN_GRACE: Final = 2 * SECONDS  # in-flight HTTP requests at stop
MAX_CONFIG_NAME_CHARS: Final = 255

# The HTTP status of each error code the API answers with; anything else is a 400.
STATUS_BY_ERROR: Final = MappingProxyType({
    "UNKNOWN_TOPIC_OR_PARTITION": 404, "UNKNOWN_TOPIC_ID": 404, "BROKER_ID_NOT_REGISTERED": 404,
    "TOPIC_ALREADY_EXISTS": 409, "CLUSTER_AUTHORIZATION_FAILED": 403, "NOT_CONTROLLER": 503,
    "REQUEST_TIMED_OUT": 504, "THROTTLING_QUOTA_EXCEEDED": 429, "UNKNOWN_SERVER_ERROR": 500,
    "COORDINATOR_LOAD_IN_PROGRESS": 503,
})
ELECTION_TYPES: Final = MappingProxyType({"preferred": Election.PREFERRED, "unclean": Election.UNCLEAN})


class AdminError(Exception):
    """A request the API refuses; `status` is the HTTP status, `error` a Kafka error name."""

    def __init__(self, error: str, message: str, field: str | None = None, *,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.error, self.message, self.field = error, message, field
        self.status = status if status is not None else STATUS_BY_ERROR.get(error, 400)

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "message": self.message, "field": self.field}


def invalid(message: str, field: str | None, error: str = "INVALID_REQUEST") -> AdminError:
    return AdminError(error, message, field)


# --- Settings: the config keys the HTTP API reads, checked once at startup.

LISTENER_KEY: Final = "controller.listener"
API_VOTERS_KEY: Final = "controller.api.voters"
_HOST_PORT: Final = re.compile(r"(?P<host>[A-Za-z0-9._-]+):(?P<port>[0-9]{1,5})")


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """What the HTTP server needs from the config; `from_config` checks every key it reads."""

    node_id: int
    host: str
    port: int
    api_voters: Mapping[int, str]  # node id -> host:port of its HTTP API
    quorum_ids: Mapping[str, int]  # quorum address (pysyncobj node id) -> node id
    cluster_id: str
    token: str | None = None
    # issue 29: beyond loopback every admin request (reads too) needs `token`, which must be set
    reads_need_token: bool = False
    rpc_secret_file: str | None = None  # controller.rpc.secret.file: None, /rpc/ unauthenticated
    tls: ControllerTls | None = None  # listener.name.controller.ssl.*: None, plain http (issue 29)
    session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS
    default_partitions: int = 1
    default_replication_factor: int = 1
    # auto.leader.rebalance.enable / leader.imbalance.check.interval.seconds (0: off)
    leader_imbalance_check_interval_s: int = 300
    # this controller's static min.insync.replicas: what enabling ELR writes as the cluster-level
    # dynamic default when none is set (Kafka's ConfigurationControlManager.maybeGenerateElrSafetyRecords)
    min_insync_replicas: int = 1
    # the web console (issue 32): the brokers' /metrics port (0: unknown) and its chaos reports dir
    console_metrics_port: int = 0
    console_reports_dir: str | None = None

    @classmethod
    def from_config(cls, config: Config, quorum: QuorumSettings) -> ApiSettings | None:
        """None when `controller.listener` is unset (no HTTP API); ConfigError naming a bad key."""
        listener = config[LISTENER_KEY]
        if listener is None:
            return None
        assert isinstance(listener, str)
        match = _HOST_PORT.fullmatch(listener)
        if match is None or not 0 < int(match["port"]) <= 65535:
            raise ConfigError(f"config {LISTENER_KEY!r} must be host:port, got {listener!r}")
        port = int(match["port"])
        entries = config[API_VOTERS_KEY]
        if entries is None:  # the `tidelog up` layout: one port, one loopback address per node
            api_voters = {i: f"{v.host}:{port}" for i, v in quorum.voters.items()}
        else:
            assert isinstance(entries, tuple)
            try:
                api_voters = {i: v.address for i, v in parse_voters(entries).items()}
            except ConfigError as exc:
                raise ConfigError([p.replace(VOTERS_KEY, API_VOTERS_KEY) for p in exc.problems]) from None
            if set(api_voters) != set(quorum.voters):
                raise ConfigError(f"config {API_VOTERS_KEY!r} names nodes {sorted(api_voters)}, but "
                                  f"{VOTERS_KEY!r} names {sorted(quorum.voters)}")
        api_voters[quorum.node_id] = f"{match['host']}:{port}"
        token = config["admin.token"]
        beyond_loopback = not is_loopback(match["host"])
        if beyond_loopback and not (isinstance(token, Password) and token.value):
            raise ConfigError(f"config {LISTENER_KEY!r} binds {match['host']}, beyond loopback, so config "
                              "'admin.token' must be set: anyone who reaches the admin API could otherwise "
                              "create, delete and reassign topics or stop brokers (bind 127.0.0.1 to keep it "
                              "local and open)")
        secret_file = config[SECRET_FILE_KEY]
        cluster_id = config["cluster.id"]
        if cluster_id is None:  # stable for a given voter set; Kafka's ids are 22 base64 chars too
            seed = ",".join(f"{i}@{v.address}" for i, v in sorted(quorum.voters.items()))
            cluster_id = base64.urlsafe_b64encode(hashlib.sha256(seed.encode()).digest()[:16]).decode()[:22]
        assert isinstance(cluster_id, str)
        return cls(
            node_id=quorum.node_id, host=match["host"], port=port,
            api_voters=MappingProxyType(dict(sorted(api_voters.items()))),
            quorum_ids=MappingProxyType({v.address: i for i, v in quorum.voters.items()}),
            cluster_id=cluster_id,
            token=token.value if isinstance(token, Password) and token.value else None,
            reads_need_token=beyond_loopback,
            rpc_secret_file=secret_file if isinstance(secret_file, str) and secret_file else None,
            tls=ControllerTls.from_config(config),
            session_timeout_ms=config.get_int("broker.session.timeout.ms"),
            heartbeat_interval_ms=config.get_int("broker.heartbeat.interval.ms"),
            default_partitions=config.get_int("num.partitions"),
            default_replication_factor=config.get_int("default.replication.factor"),
            leader_imbalance_check_interval_s=(config.get_int("leader.imbalance.check.interval.seconds")
                                               if config.get_bool("auto.leader.rebalance.enable") else 0),
            min_insync_replicas=config.get_int("min.insync.replicas"),
            console_metrics_port=config.get_int("console.broker.metrics.port"),
            console_reports_dir=str(config["console.chaos.reports.dir"] or "") or None,
        )


# --- Request validation: decoded JSON in, a frozen request (or AdminError) out.


@dataclass(frozen=True, slots=True)
class ElectionRequest:
    election: Election
    partitions: tuple[tuple[str, int], ...] | None  # None: every partition that needs one


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    names: dict[type, str] = {str: "a string", list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def check_object(body: Any, allowed: Sequence[str], required: Sequence[str] = (),
                 where: str = "") -> dict[str, Any]:
    """`body` as a dict with only `allowed` keys and every `required` one."""
    if not isinstance(body, dict):
        what = where.rstrip(".") or "the request body"
        raise invalid(f"{what} must be a JSON object, got {json_type(body)}", where.rstrip(".") or None)
    for key in body:
        if key not in allowed:
            raise invalid(f"unknown field {key!r} (expected {', '.join(allowed)})", where + key)
    for key in required:
        if key not in body:
            raise invalid(f"missing field {key!r}", where + key)
    return body


def check_int(value: Any, field: str, low: int, high: int, error: str = "INVALID_REQUEST") -> int:
    """An integer in [low, high]; true/false and 3.0 are not integers."""
    if type(value) is not int:
        raise invalid(f"{field} must be an integer, got {json_type(value)}", field)
    if not low <= value <= high:
        raise invalid(f"{field} must be between {low} and {high}, got {value}", field, error)
    return value


def check_topic_name(name: Any, field: str = "name") -> str:
    """Kafka's Topic.validate (the rule `quorum.topic_control.validate_topic_name` applies)."""
    if not isinstance(name, str):
        raise invalid(f"{field} must be a string, got {json_type(name)}", field)
    try:
        validate_topic_name(name)
    except ControllerApiError as exc:
        raise AdminError(exc.code.name, exc.message, field) from None
    return name


def check_configs(value: Any, field: str, *, allow_delete: bool) -> dict[str, str | None]:
    """A map of config key -> string value (or null to delete, when allowed)."""
    if not isinstance(value, dict):
        raise invalid(f"{field} must be an object of config names to values, got {json_type(value)}", field)
    if len(value) > MAX_CONFIGS_PER_REQUEST:
        raise invalid(f"{field} has {len(value)} entries, at most {MAX_CONFIGS_PER_REQUEST} are allowed",
                      field, "INVALID_CONFIG")
    out: dict[str, str | None] = {}
    for key, item in value.items():
        at = f"{field}.{key}"
        if not key or len(key) > MAX_CONFIG_NAME_CHARS:
            raise invalid(f"config name {_shown(key)} must be 1..{MAX_CONFIG_NAME_CHARS} characters",
                          at, "INVALID_CONFIG")
        if item is None and allow_delete:
            out[key] = None
        elif not isinstance(item, str):
            expected = "a string or null (to delete it)" if allow_delete else "a string"
            raise invalid(f"{at} must be {expected}, got {json_type(item)}", at, "INVALID_CONFIG")
        elif len(item) > MAX_CONFIG_VALUE_CHARS:
            raise invalid(f"{at} is longer than {MAX_CONFIG_VALUE_CHARS} characters", at, "INVALID_CONFIG")
        else:
            out[key] = item
    return out


def parse_elections(body: Any) -> ElectionRequest:
    """POST /v1/elections {type: preferred|unclean, partitions: [{topic, partition}] | null}."""
    body = check_object(body, ("type", "partitions"), ("type",))
    kind = body["type"]
    if kind not in ELECTION_TYPES:
        raise invalid(f"type must be one of {', '.join(ELECTION_TYPES)}, got {_shown(kind)}", "type")
    items = body.get("partitions")
    if items is None:
        return ElectionRequest(ELECTION_TYPES[kind], None)
    if not isinstance(items, list):
        raise invalid(f"partitions must be an array or null, got {json_type(items)}", "partitions")
    if len(items) > MAX_RECORDS_PER_USER_OP:
        raise invalid(f"partitions names {len(items)} partitions, at most {MAX_RECORDS_PER_USER_OP} "
                      "are allowed", "partitions")
    out: list[tuple[str, int]] = []
    for i, item in enumerate(items):
        at = f"partitions[{i}]."
        check_object(item, ("topic", "partition"), ("topic", "partition"), at)
        out.append((check_topic_name(item["topic"], at + "topic"),
                    check_int(item["partition"], at + "partition", 0, 2**31 - 1)))
    return ElectionRequest(ELECTION_TYPES[kind], tuple(dict.fromkeys(out)))


def parse_shutdown_broker(body: Any) -> None:
    """POST /v1/brokers/{id}/shutdown takes no fields: no body, `{}` or `null`."""
    if body is not None:
        check_object(body, ())


def parse_broker_id(text: str) -> int:
    """The {id} of /v1/brokers/{id}."""
    if not text.isascii() or not text.isdigit() or len(text) > 10 or int(text) > 2**31 - 1:
        raise invalid(f"broker id must be a non-negative 32-bit integer, got {_shown(text)}", "id")
    return int(text)


def known_topic(image: MetadataImage, name: str) -> TopicImage:
    """The topic named `name` in the image, or 404 UNKNOWN_TOPIC_OR_PARTITION."""
    check_topic_name(name)
    topic = image.topic(name)
    if topic is None:
        raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist", "name")
    return topic
