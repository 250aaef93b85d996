"""ApiVersions (key 18), v0–v4: the response lists our ranges.

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

from common.errors import ErrorCode
from common.protocol.api_keys import (
    SUPPORTED_VERSIONS,
    ApiKey,
    check_version,
    is_supported,
    reader_for,
    writer_for,
)
from common.protocol.primitives import Chunk, Reader, Writer

UNSUPPORTED_VERSION = int(ErrorCode.UNSUPPORTED_VERSION)
# ApiVersionsRequest.isValid: a name or version Kafka would refuse gets INVALID_REQUEST.
_SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest:
    """v0–v2 carry no fields; v3+ name the client software (empty below v3)."""

    client_software_name: str = ""
    client_software_version: str = ""

    def is_valid(self, version: int) -> bool:
        """Kafka's rule: below v3 always; from v3 both must match the pattern."""
        return version < 3 or all(_SOFTWARE_PATTERN.fullmatch(v) for v in (
            self.client_software_name, self.client_software_version))


@dataclass(frozen=True, slots=True)
class ApiVersion:
    """One supported API: its key and inclusive version range."""

    api_key: int
    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse:
    """error_code, the supported APIs, and (v1+) throttle_time_ms."""

    error_code: int
    api_keys: tuple[ApiVersion, ...]
    throttle_time_ms: int = 0


def decode_api_versions_request(body: memoryview, version: int) -> ApiVersionsRequest:
    """Nothing to read for v0–v2; trailing bytes are tolerated."""
    check_version(ApiKey.API_VERSIONS, version)
    if version < 3:
        return ApiVersionsRequest()
    r = reader_for(ApiKey.API_VERSIONS, version, body)
    request = ApiVersionsRequest(r.string(), r.string())
    r.tagged_fields()
    return request


def encode_api_versions_request(req: ApiVersionsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): v0–v2 bodies are empty."""
    check_version(ApiKey.API_VERSIONS, version)
    if version < 3:
        return []
    w = writer_for(ApiKey.API_VERSIONS, version)
    w.string(req.client_software_name)
    w.string(req.client_software_version)
    w.tagged_fields()
    return w.chunks()


def supported_api_versions(
        versions: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS) -> tuple[ApiVersion, ...]:
    """The advertised list, sorted by key (a server may pass only the APIs it serves)."""
    return tuple(ApiVersion(int(k), lo, hi) for k, (lo, hi) in sorted(versions.items()))


def answer_api_versions(request_version: int, api_keys: tuple[ApiVersion, ...],
                        throttle_time_ms: int = 0) -> tuple[ApiVersionsResponse, int]:
    """The response and the version to encode it at (0 with error 35 when unsupported)."""
    if not is_supported(ApiKey.API_VERSIONS, request_version):
        return ApiVersionsResponse(UNSUPPORTED_VERSION, api_keys, 0), 0
    return ApiVersionsResponse(0, api_keys, throttle_time_ms), request_version


def _write_api(w: Writer, a: ApiVersion) -> None:
    w.int16(a.api_key)
    w.int16(a.min_version)
    w.int16(a.max_version)
    w.tagged_fields()


def encode_api_versions_response(resp: ApiVersionsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.API_VERSIONS, version)
    w = writer_for(ApiKey.API_VERSIONS, version)
    w.int16(resp.error_code)
    w.array(resp.api_keys, _write_api)
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    # v3+: SupportedFeatures, FinalizedFeatures and ZkMigrationReady are tagged fields
    # (absent = none); tidelog has no feature flags, as a broker with none finalized.
    w.tagged_fields()
    return w.chunks()


def _read_api(r: Reader) -> ApiVersion:
    api = ApiVersion(r.int16(), r.int16(), r.int16())
    r.tagged_fields()
    return api


def decode_api_versions_response(body: memoryview, version: int) -> ApiVersionsResponse:
    """Client side (tests, tools): the inverse of `encode_api_versions_response`."""
    check_version(ApiKey.API_VERSIONS, version)
    r = reader_for(ApiKey.API_VERSIONS, version, body)
    error_code = r.int16()
    api_keys = r.array(_read_api, 6)
    throttle = r.int32() if version >= 1 else 0
    r.tagged_fields()
    return ApiVersionsResponse(error_code, api_keys, throttle)
