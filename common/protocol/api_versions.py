"""ApiVersions (key 18), v0–v2: the request body is empty; the response lists our ranges.

An ApiVersions request at a version we do not answer (librdkafka opens with v3) gets a v0
body carrying UNSUPPORTED_VERSION and the full list, so the client can retry lower.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from common.protocol.api_keys import (
    SUPPORTED_VERSIONS,
    ApiKey,
    check_version,
    is_supported,
)
from common.protocol.primitives import Chunk, Reader, Writer

UNSUPPORTED_VERSION = 35


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest:
    """v0–v2 carry no fields (v3+ adds client software name/version, which we never parse)."""


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
    return ApiVersionsRequest()


def encode_api_versions_request(req: ApiVersionsRequest, version: int) -> list[Chunk]:
    """Client side (tests, tools): v0–v2 bodies are empty."""
    check_version(ApiKey.API_VERSIONS, version)
    return []


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


def encode_api_versions_response(resp: ApiVersionsResponse, version: int) -> list[Chunk]:
    check_version(ApiKey.API_VERSIONS, version)
    w = Writer()
    w.int16(resp.error_code)
    w.array(resp.api_keys, _write_api)
    if version >= 1:
        w.int32(resp.throttle_time_ms)
    return w.chunks()


def _read_api(r: Reader) -> ApiVersion:
    return ApiVersion(r.int16(), r.int16(), r.int16())


def decode_api_versions_response(body: memoryview, version: int) -> ApiVersionsResponse:
    """Client side (tests, tools): the inverse of `encode_api_versions_response`."""
    check_version(ApiKey.API_VERSIONS, version)
    r = Reader(body)
    error_code = r.int16()
    api_keys = r.array(_read_api, 6)
    throttle = r.int32() if version >= 1 else 0
    return ApiVersionsResponse(error_code, api_keys, throttle)
