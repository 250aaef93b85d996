"""ApiVersions (key 18), v0–v4, on kio's generated messages: the response lists our ranges.

v0–v2 requests are empty; v3+ (flexible) name the client software (KIP-511), which must
match Kafka's pattern or the answer is INVALID_REQUEST. v4 only lifts a rule on the
SupportedFeatures tagged field (a min_version of 0). The supported features are one table
(`SUPPORTED_FEATURES`); the finalized ones and their epoch come from the metadata image.
Whatever the version, the response header is v0 (`api_keys.response_header_version`). A request at a version we do not
answer gets a v0 body with UNSUPPORTED_VERSION and the full list, so the client retries lower.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from common.errors import ErrorCode
from common.metadata_version import LATEST_LEVEL, LEGACY_LEVEL, METADATA_VERSION
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
    finalized for the cluster (Kafka's SupportedFeatureKey / FinalizedFeatureKey; 0: not finalized)."""

    name: str
    min_version: int
    max_version: int
    finalized: int


@dataclass(frozen=True, slots=True)
class SupportedFeature:
    """One feature tidelog implements, the levels it supports (Kafka's QuorumFeatures /
    BrokerFeatures: brokers and controllers of one build support the same ranges)."""

    name: str
    min_version: int
    max_version: int


TRANSACTION_VERSION_FEATURE: Final = "transaction.version"
ELR_VERSION: Final = "eligible.leader.replicas.version"  # KIP-966: level >= 1 enables ELR
# The one table ApiVersions, UpdateFeatures and `tidelog features` read. Not claimed: group.version
# (KIP-848's consumer protocol is not served), kraft.version (pysyncobj's membership, not a
# KRaft feature level), share.version and streams.version.
SUPPORTED_FEATURES: Final = (
    # tidelog's own levels of its metadata log format (common.metadata_version): 2 writes
    # PartitionChange short, which the builds before it cannot read
    SupportedFeature(METADATA_VERSION, LEGACY_LEVEL, LATEST_LEVEL),
    # Kafka 4.0's transactions v2 (KIP-890 part 2): a Java client enables it when the finalized
    # `transaction.version` is >= 2. Levels 0/1 are v1's protocol (1 only changes Kafka's record
    # format), which older clients keep speaking.
    SupportedFeature(TRANSACTION_VERSION_FEATURE, 0, 2),
    SupportedFeature(ELR_VERSION, 0, 1),
)
SUPPORTED_BY_NAME: Final = MappingProxyType({f.name: f for f in SUPPORTED_FEATURES})
# What a new cluster finalizes (Kafka 4.1's defaults for what tidelog implements: transactions v2,
# ELR on; this build's latest metadata.version, as Kafka bootstraps at its latest production one):
# the first active controller of an empty log writes these (quorum.feature_control).
BOOTSTRAP_LEVELS: Final = MappingProxyType({METADATA_VERSION: LATEST_LEVEL,
                                            TRANSACTION_VERSION_FEATURE: 2, ELR_VERSION: 1})
# What a log written before feature records behaves as, and gets written on its first activation
# (as Kafka writes metadata.version 3.0-IV1 for a log without one): what this build answered
# before (transaction.version 2 finalized), ELR off and metadata.version 1 (a log of the builds
# before, which may still run during a rolling upgrade) until `tidelog features upgrade`.
LEGACY_LEVELS: Final = MappingProxyType({METADATA_VERSION: LEGACY_LEVEL, TRANSACTION_VERSION_FEATURE: 2})


def finalized_levels(levels: Mapping[str, int]) -> dict[str, int]:
    """The finalized levels of an image's feature records; a log without metadata.version is a
    pre-features one (or not yet activated) and answers LEGACY_LEVELS."""
    return dict(levels) if METADATA_VERSION in levels else dict(LEGACY_LEVELS)


def broker_features(levels: Mapping[str, int]) -> tuple[Feature, ...]:
    """ApiVersions' feature list: every supported feature, finalized at its image level (0: none)."""
    finalized = finalized_levels(levels)
    return tuple(Feature(f.name, f.min_version, f.max_version, finalized.get(f.name, 0))
                 for f in SUPPORTED_FEATURES)


# The features of a cluster whose image finalized nothing yet (a pre-features log).
TRANSACTION_VERSION: Final = Feature(TRANSACTION_VERSION_FEATURE, 0, 2, 2)
BROKER_FEATURES: Final = broker_features({})
# Kafka answers the offset of the metadata image the levels come from (KRaftMetadataCache.features:
# image.highestOffsetAndEpoch().offset); -1 would mean "none finalized" to a client, so a broker
# that has applied nothing yet answers 0.
NO_IMAGE_FEATURES_EPOCH: Final = 0


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
             features: tuple[Feature, ...] = (), features_epoch: int = NO_IMAGE_FEATURES_EPOCH) -> Any:
    """kio's ApiVersionsResponse of `version`: v3+'s feature fields are tagged, absent when
    `features` is empty; only features finalized above 0 are listed as finalized (as Kafka)."""
    m = messages.response_module(_KEY, version)
    extra: dict[str, Any] = {}
    if features and version >= 3:
        extra = {"supported_features": tuple(m.SupportedFeatureKey(
                     name=f.name, min_version=f.min_version, max_version=f.max_version) for f in features),
                 "finalized_features_epoch": max(features_epoch, NO_IMAGE_FEATURES_EPOCH),
                 "finalized_features": tuple(m.FinalizedFeatureKey(
                     name=f.name, max_version_level=f.finalized, min_version_level=f.finalized)
                     for f in features if f.finalized > 0)}
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
