"""The pieces every ACL gate shares (broker/handlers/authorization.py has the gates' table):
the broker's authorizer over its metadata image, a gate's verdict, the refusal log line, and the
check of a request as a whole against its API's first resource.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from broker.handlers.context import ClientInfo
from common.errors import ErrorCode
from common.protocol import acls as acl_codes
from common.protocol import messages
from common.protocol import metadata as md
from common.protocol.api_keys import ApiKey
from common.protocol.api_table import API_SPECS
from common.protocol.primitives import ProtocolError
from metadata.image import AclsImage, MetadataImage
from security.acl import CLUSTER_NAME, AclOperation, ResourceType, from_record
from security.authorizer import Authorizer, AuthorizerSettings, host_address

log = logging.getLogger("broker.handlers.authorization")  # one logger for every refusal line

Op, Res = AclOperation, ResourceType
TOPIC_DENIED: Final = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED: Final = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED: Final = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
TXN_DENIED: Final = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
MAX_LOGGED_REFUSALS: Final = 10_000  # (principal, host, API, resource) keys remembered so each refusal logs once
FETCH_TOPIC_IDS_VERSION: Final = 13
GROUP_OPERATIONS_VERSION: Final = 3  # DescribeGroups include_authorized_operations from v3


class RefusedRequest(ProtocolError):
    """A request of an API without a gate of its own, refused whole: the connection closes."""


class BrokerAuthorizer:
    """The broker's authorizer over its metadata image: rebuilt when the image's ACLs change
    (so the decision cache is never stale), shared by every connection."""

    def __init__(self, settings: AuthorizerSettings, image: Callable[[], MetadataImage]) -> None:
        self.settings = settings
        self._image = image
        self._acls: AclsImage | None = None
        self._authorizer = Authorizer(settings, ())
        self._names_of: Mapping[Any, str] = {}
        self.refusals_logged: set[tuple[str, str, str, str]] = set()  # cleared with each new set of ACLs
        self._topics: object = None

    def current(self) -> Authorizer:
        acls = self._image().acls
        if acls is not self._acls:
            bindings = [b for b in (from_record(r) for r in acls.by_id.values()) if b is not None]
            self._authorizer, self._acls = Authorizer(self.settings, bindings), acls
            self.refusals_logged.clear()
            log.info("Authorizer loaded %d ACL(s)", len(bindings))
        return self._authorizer

    def allowed(self, client: ClientInfo, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return self.current().authorize(client.principal, host_address(client.host), operation, resource_type, name)

    def allowed_any(self, client: ClientInfo, operation: AclOperation, resource_type: ResourceType) -> bool:
        return self.current().authorize_any(client.principal, host_address(client.host), operation, resource_type)

    def operations(self, client: ClientInfo, resource_type: ResourceType, name: str,
                   supported: Iterable[AclOperation]) -> int:
        """The caller's authorized operations as Kafka's 32-bit field."""
        return acl_codes.operations_bitfield(self.current().authorized_operations(
            client.principal, host_address(client.host), resource_type, name, supported))

    def topic_name(self, image: MetadataImage, topic_id: Any) -> str | None:
        """The name of a wire topic id (Fetch v13+), from a map rebuilt when the topics change."""
        if image.topics is not self._topics:
            self._names_of = {md.wire_topic_id(t.topic_id): t.name for t in image.topics.by_id.values()}
            self._topics = image.topics
        return self._names_of.get(topic_id)


@dataclass(frozen=True, slots=True)
class Refuse:
    response: Any


@dataclass(frozen=True, slots=True)
class Narrow:
    request: Any
    finish: Callable[[Any], Any]


Verdict = Refuse | Narrow | None
Gate = Callable[[BrokerAuthorizer, Any, int, ClientInfo, MetadataImage], Verdict]


def log_refusal(a: BrokerAuthorizer, client: ClientInfo, api: str, what: str) -> None:
    """One INFO line per (principal, host, API, resource) and set of ACLs: clients retry refused
    requests (librdkafka's FindCoordinator every 50 ms), which must not flood the log."""
    key = (client.principal, client.host, api, what)
    if key in a.refusals_logged:
        return
    if len(a.refusals_logged) >= MAX_LOGGED_REFUSALS:
        a.refusals_logged.clear()
    a.refusals_logged.add(key)
    log.info("Refused %s of %s from %s (client %r): not authorized on %s (logged once until the ACLs change)",
             api, client.principal, client.host, client.client_id, what)


# ---- every other API: checked whole, refused by closing the connection ------------------------

def resource_names(resource: ResourceType, req: Any) -> list[str]:
    """The resources of `resource`'s type a request names (best effort over kio's field names)."""
    if resource == Res.CLUSTER:
        return [CLUSTER_NAME]
    if resource == Res.GROUP:
        if hasattr(req, "group_id"):
            return [req.group_id]
        groups = getattr(req, "groups_names", None) or getattr(req, "groups", None) or ()
        return [g if isinstance(g, str) else g.group_id for g in groups]
    if resource == Res.TRANSACTIONAL_ID:
        if getattr(req, "transactional_id", None) is not None:
            return [req.transactional_id]
        return list(getattr(req, "transactional_ids", ()))
    return [t.name for t in getattr(req, "topics", None) or () if getattr(t, "name", None)]


# The code a refusal of a whole request carries, by the resource it was refused on.
DENIED_BY_RESOURCE: Final = {Res.CLUSTER: CLUSTER_DENIED, Res.GROUP: GROUP_DENIED, Res.TOPIC: TOPIC_DENIED,
                             Res.TRANSACTIONAL_ID: TXN_DENIED}


def top_level_refusal(api_key: ApiKey, version: int, code: int) -> Any | None:
    """The response refusing a whole request, where the API's response has a top-level error
    code (ElectLeaders, the reassignment APIs, DescribeQuorum, EndTxn, ...): that code, every
    list empty, every other field at its default. None where it has none (the caller closes the
    connection instead: an answer without a per-item error would read as a success)."""
    try:
        cls = messages.response_type(api_key, version)
    except KeyError:  # a hand codec's version
        return None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if "error_code" not in fields:
        return None
    values: dict[str, Any] = {"error_code": messages.error_code(code)}
    for name, f in fields.items():
        if name in values or f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        kind = str(f.type)
        if name == "throttle_time":
            values[name] = messages.NO_THROTTLE
        elif name == "error_message" or kind.endswith("| None"):
            values[name] = None
        elif kind.startswith("tuple"):
            values[name] = ()
        elif "Timedelta" in kind:
            values[name] = datetime.timedelta(0)
        elif any(f"primitive.{t}'" in kind for t in ("i8", "i16", "i32", "i64")):
            values[name] = 0  # a schema field without a default is 0 in Kafka's generated messages
        else:
            return None  # a required scalar we cannot make up
    return cls(**values)


def whole(api_key: ApiKey) -> Gate:
    spec = API_SPECS[api_key]
    assert spec.acl is not None
    operation, resources = spec.acl.operation, spec.acl.resources

    def gate(a: BrokerAuthorizer, req: Any, version: int, client: ClientInfo, image: MetadataImage) -> Verdict:
        resource = resources[0]
        for name in resource_names(resource, req):
            if not a.allowed(client, operation, resource, name):
                log_refusal(a, client, api_key.name, f"{resource.name} {name} ({operation.name})")
                refusal = top_level_refusal(api_key, version, DENIED_BY_RESOURCE.get(resource, CLUSTER_DENIED))
                if refusal is not None:
                    return Refuse(refusal)
                raise RefusedRequest(f"{client.principal} is not authorized to {operation.name} "
                                     f"{resource.name} {name} ({api_key.name}): connection closed")
        return None
    return gate


