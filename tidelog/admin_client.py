"""A small synchronous client of the controllers' admin API (/v1, JSON), for the CLI.

    client = AdminClient(("http://127.0.0.1:9080", "http://127.0.0.2:9080"))
    client.create_topic("demo", partitions=3, replication_factor=1, configs={"retention.ms": "60000"})
    client.topic("demo")["partitions"]

Any controller answers (reads from its committed image, writes forwarded to the active
controller), so the client starts with the first URL and moves to the next only when one
cannot be reached at all (refused, unreachable: nothing was sent). A write that was sent
but not answered in time is never retried: its outcome is unknown, and the error says so.
An error answer becomes `ClusterError` with the API's Kafka error name.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, Final

from common.limits import ADMIN_WRITE_TIMEOUT, MAX_ADMIN_ANSWER_BYTES
from tidelog.cli_common import ClusterError, Endpoints

UNREACHABLE: Final = "CONTROLLER_UNREACHABLE"  # not a Kafka name: no controller answered at all


class AdminClient:
    """JSON over HTTP to the first controller that can be reached."""

    def __init__(self, urls: Sequence[str], *, token: str | None = None, timeout: float = ADMIN_WRITE_TIMEOUT,
                 tls: ssl.SSLContext | None = None) -> None:
        if not urls:
            raise ValueError("at least one admin URL is needed")
        self.urls, self._token, self._timeout = tuple(urls), token, timeout
        self._tls = tls  # an https URL's server is checked against this (--admin-ca); None: the system's CAs

    @classmethod
    def of(cls, found: Endpoints, *, token: str | None) -> AdminClient:
        """A CLI command's client: the controllers it resolved, with --admin-ca's TLS context."""
        return cls(found.admin_urls, token=token, tls=found.admin_tls)

    # -- the transport ----------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer; ClusterError for an error answer or no answer."""
        data = None if body is None else json.dumps(body).encode()
        tried: list[str] = []
        for url in self.urls:  # bounded: one attempt per controller
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            request = urllib.request.Request(f"{url}{path}", data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self._timeout, context=self._tls) as answer:
                    return _decode(answer.read(MAX_ADMIN_ANSWER_BYTES + 1), url)
            except urllib.error.HTTPError as exc:
                if method == "GET" and exc.code == 503:  # not caught up (or no quorum): another may be
                    tried.append(f"{url}: {_api_error(exc, url)}")
                    continue
                raise _api_error(exc, url) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                if method != "GET" and not _never_sent(reason):  # a read is safe to send again, a write is not
                    raise ClusterError("REQUEST_TIMED_OUT", f"{method} {url}{path} got no answer ({reason}); "
                                       "the write may or may not have been applied: check before retrying") from None
                tried.append(f"{url}: {reason}")
        raise ClusterError(UNREACHABLE, "no controller's admin API could be reached: " + "; ".join(tried))

    # -- the API ----------------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        return _object(self.request("GET", "/v1/cluster"))

    def brokers(self) -> list[dict[str, Any]]:
        return _array(self.request("GET", "/v1/brokers"))

    def topics(self) -> list[dict[str, Any]]:
        return _array(self.request("GET", "/v1/topics"))

    def topic(self, name: str) -> dict[str, Any]:
        return _object(self.request("GET", f"/v1/topics/{_segment(name)}"))

    def create_topic(self, name: str, *, partitions: int | None, replication_factor: int | None,
                     configs: Mapping[str, str], assignments: Sequence[Sequence[int]] | None = None,
                     validate_only: bool = False) -> dict[str, Any]:
        """`assignments[p]`: partition p's replicas, preferred leader first (instead of the sizes)."""
        body: dict[str, Any] = {"name": name, "configs": dict(configs)}
        if assignments is not None:
            body["assignments"] = [{"partition": p, "replicas": list(r)} for p, r in enumerate(assignments)]
        if validate_only:
            body["validate_only"] = True
        if partitions is not None:
            body["partitions"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        return _object(self.request("POST", "/v1/topics", body))

    def delete_topic(self, name: str) -> dict[str, Any]:
        return _object(self.request("DELETE", f"/v1/topics/{_segment(name)}"))

    def alter_configs(self, name: str, changes: Mapping[str, str | None]) -> dict[str, Any]:
        return _object(self.request("PATCH", f"/v1/topics/{_segment(name)}/configs",
                                    {"configs": dict(changes)}))

    def alter_broker_configs(self, broker_id: int | None, changes: Mapping[str, str | None]) -> dict[str, Any]:
        """Set (None: delete) dynamic configs of one broker, or the cluster default (None)."""
        path = "/v1/brokers/configs" if broker_id is None else f"/v1/brokers/{broker_id}/configs"
        return _object(self.request("PATCH", path, {"configs": dict(changes)}))

    def shutdown_broker(self, broker_id: int) -> dict[str, Any]:
        return _object(self.request("POST", f"/v1/brokers/{broker_id}/shutdown"))


def _object(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ClusterError("UNKNOWN_SERVER_ERROR", f"the admin API answered {type(answer).__name__}, not a JSON object")
    return answer


def _array(answer: Any) -> list[dict[str, Any]]:
    if not isinstance(answer, list):
        raise ClusterError("UNKNOWN_SERVER_ERROR", f"the admin API answered {type(answer).__name__}, not a JSON array")
    return answer


def _segment(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _never_sent(reason: object) -> bool:
    """A connection that was never made: safe to try the next controller."""
    if isinstance(reason, (ConnectionRefusedError, socket.gaierror)):
        return True
    return isinstance(reason, OSError) and reason.errno in (101, 113, 99)  # ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL


def _decode(raw: bytes, url: str) -> Any:
    if len(raw) > MAX_ADMIN_ANSWER_BYTES:
        raise ClusterError("UNKNOWN_SERVER_ERROR", f"{url} answered more than {MAX_ADMIN_ANSWER_BYTES} bytes")
    try:
        return json.loads(raw)
    except ValueError:
        raise ClusterError("UNKNOWN_SERVER_ERROR", f"{url} answered something that is not JSON: "
                           f"{raw[:100]!r}") from None


def _api_error(exc: urllib.error.HTTPError, url: str) -> ClusterError:
    """The API's {"error", "message", "field"} as ClusterError (the field named in the message)."""
    try:
        body = json.loads(exc.read(MAX_ADMIN_ANSWER_BYTES))
    except (ValueError, OSError):
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return ClusterError("UNKNOWN_SERVER_ERROR", f"{url} answered HTTP {exc.code} {exc.reason}")
    message = str(body.get("message") or "")
    field = body.get("field")
    return ClusterError(body["error"], f"{message} (field: {field})" if field else message)
