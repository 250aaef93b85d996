"""ApiVersions (key 18), v0–v4, on kio's generated messages: the response lists our ranges.

v0–v2 requests are empty; v3+ (flexible) name the client software (KIP-511), which must
match Kafka's pattern or the answer is INVALID_REQUEST. v4 only lifts a rule on the
SupportedFeatures tagged field, which we do not send. Whatever the version, the response
header is v0 (`api_keys.response_header_version`). A request at a version we do not
answer gets a v0 body with UNSUPPORTED_VERSION and the full list, so the client retries lower.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey, is_supported

_KEY: Final = ApiKey.API_VERSIONS
# ApiVersionsRequest.isValid: a name or version Kafka would refuse gets INVALID_REQUEST.
_SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def is_valid(request: Any, version: int) -> bool:
    """Kafka's ApiVersionsRequest.isValid: below v3 always; from v3 the client software's name
    and version (KIP-511) must both match the pattern."""
    return version < 3 or all(_SOFTWARE_PATTERN.fullmatch(v) for v in (
        request.client_software_name, request.client_software_version))


@dataclass(frozen=True, slots=True)
class Feature:
    """A feature flag of v3+'s tagged fields: the levels this broker supports and the level
    finalized for the cluster (Kafka's SupportedFeatureKey / FinalizedFeatureKey)."""

    name: str
    min_version: int
    max_version: int
    finalized: int


# Kafka 4.0's transactions v2 (KIP-890 part 2): a Java client enables it when the finalized
# `transaction.version` is >= 2, as Kafka 4.0 finalizes it for a new cluster. Levels 0/1 are
# v1's protocol (1 only changes Kafka's record format), which older clients keep speaking.
TRANSACTION_VERSION: Final = Feature("transaction.version", 0, 2, 2)
BROKER_FEATURES: Final = (TRANSACTION_VERSION,)
# Kafka answers the metadata offset of the features; tidelog's are fixed, so one epoch (>= 0:
# -1 would mean "none finalized" to a client).
FINALIZED_FEATURES_EPOCH: Final = 0


@dataclass(frozen=True, slots=True)
class ApiVersion:
    """One supported API: its key and inclusive version range (what every version's
    ApiVersionsResponse lists; kio's per-version classes are built from it)."""

    api_key: int
    min_version: int
    max_version: int


def request(version: int, client_software_name: str = "", client_software_version: str = "") -> Any:
    """Client side: kio's ApiVersionsRequest of `version` (v0-v2 carry nothing)."""
    m = messages.request_module(_KEY, version)
    return messages.build(m.ApiVersionsRequest, client_software_name=client_software_name,
                          client_software_version=client_software_version)


def response(version: int, error_code: ErrorCode, api_keys: tuple[ApiVersion, ...],
             features: tuple[Feature, ...] = ()) -> Any:
    """kio's ApiVersionsResponse of `version`: v3+'s feature fields are tagged, absent when
    `features` is empty (as a broker with none finalized)."""
    m = messages.response_module(_KEY, version)
    extra: dict[str, Any] = {}
    if features and version >= 3:
        extra = {"supported_features": tuple(m.SupportedFeatureKey(
                     name=f.name, min_version=f.min_version, max_version=f.max_version) for f in features),
                 "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
                 "finalized_features": tuple(m.FinalizedFeatureKey(
                     name=f.name, max_version_level=f.finalized, min_version_level=f.finalized)
                     for f in features)}
    return messages.build(m.ApiVersionsResponse, error_code=error_code, throttle_time=messages.NO_THROTTLE,
                          api_keys=tuple(m.ApiVersion(api_key=a.api_key, min_version=a.min_version,
                                                      max_version=a.max_version) for a in api_keys), **extra)


def supported_api_versions(
        versions: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS) -> tuple[ApiVersion, ...]:
    """The advertised list, sorted by key (a server may pass only the APIs it serves)."""
    return tuple(ApiVersion(int(k), lo, hi) for k, (lo, hi) in sorted(versions.items()))


def answer_api_versions(request_version: int, api_keys: tuple[ApiVersion, ...]) -> tuple[Any, int]:
    """The response and the version to encode it at (0 with error 35 when unsupported)."""
    if not is_supported(_KEY, request_version):
        return response(0, ErrorCode.UNSUPPORTED_VERSION, api_keys), 0
    return response(request_version, ErrorCode.NONE, api_keys), request_version
