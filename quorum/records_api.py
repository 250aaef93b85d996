"""The admin API's DeleteRecords endpoint: the controller asks the partition's leader, in Kafka's
protocol, as `kafka-delete-records.sh` does.

    POST /v1/topics/{name}/partitions/{partition}/delete-records   {"offset": 60, "timeout_ms"?: 30000}
      -> 200 {"topic", "partition", "low_watermark"}

Records live in the brokers, not in the metadata log: the call goes to the leader the
controller's image names (one short connection), retried on NOT_LEADER_OR_FOLLOWER while a
leadership move is being applied, bounded by the request's timeout plus `TIMEOUT_MARGIN`.
`offset` -1 means the high watermark. Kafka's error names, as the rest of the admin API:
OFFSET_OUT_OF_RANGE (beyond the high watermark, nothing applied) is a 400,
UNKNOWN_TOPIC_OR_PARTITION a 404, REQUEST_TIMED_OUT (a replica did not follow in time) a 504.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web

from common.errors import ErrorCode
from common.limits import CLIENT_RETRY_BACKOFF
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import ClientFraming
from common.protocol.primitives import ProtocolError
from common.units import MIB, SECONDS
from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum.admin_api import AdminError

DEFAULT_TIMEOUT_MS: Final = 30_000  # kafka-delete-records.sh's default request timeout
MAX_TIMEOUT_MS: Final = 5 * 60_000
TIMEOUT_MARGIN: Final = 5 * SECONDS  # connecting, and a retry after a leadership move
MAX_RESPONSE_BYTES: Final = 1 * MIB
CLIENT_ID: Final = "tidelog-admin-api"
# A classic version: this client reads response header v0 (DeleteRecords v1 carries every field used).
DELETE_RECORDS_VERSION: Final = 1
FIELDS: Final = ("offset", "timeout_ms")
_STATUS: Final = {"UNKNOWN_TOPIC_OR_PARTITION": 404, "REQUEST_TIMED_OUT": 504, "NOT_LEADER_OR_FOLLOWER": 503,
                  "LEADER_NOT_AVAILABLE": 503, "BROKER_NOT_AVAILABLE": 503, "KAFKA_STORAGE_ERROR": 500}


def parse_delete_records(body: Any) -> tuple[int, int]:
    """(offset, timeout_ms) from a request body; AdminError for bad input."""
    body = api.check_object(body, FIELDS, ("offset",))
    offset = api.check_int(body["offset"], "offset", -1, 2**63 - 1)
    timeout_ms = api.check_int(body.get("timeout_ms", DEFAULT_TIMEOUT_MS), "timeout_ms", 0, MAX_TIMEOUT_MS)
    return offset, timeout_ms


def error_for(code: int, message: str) -> AdminError:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"ERROR_CODE_{code}"
    return AdminError(name, message, "offset" if code == ErrorCode.OFFSET_OUT_OF_RANGE else None,
                      status=_STATUS.get(name, 400))


class RecordsApi:
    def __init__(self, image: Callable[[], MetadataImage], authorize: Callable[[web.Request], None]) -> None:
        self._image, self._authorize = image, authorize

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/topics/{name}/partitions/{partition}/delete-records", self._delete_records)]

    def _leader_address(self, topic: str, partition: int) -> tuple[int, tuple[str, int]]:
        image = self._image()
        t = image.topic(topic)
        if t is None or partition not in t.partitions:
            raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{partition} does not exist", None)
        leader = t.partitions[partition].leader
        broker = image.broker(leader)
        if leader < 0 or broker is None or broker.fenced or not broker.listeners:
            raise AdminError("LEADER_NOT_AVAILABLE", f"{topic}-{partition} has no available leader", None,
                             status=503)
        return leader, (broker.listeners[0].host, broker.listeners[0].port)

    async def _call(self, address: tuple[str, int], request: Any, timeout_s: float) -> Any:
        """kio's DeleteRecordsRequest to `address`; its DeleteRecordsResponse."""
        framing = ClientFraming(CLIENT_ID, MAX_RESPONSE_BYTES)
        writer = None
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(*address)
                writer.write(framing.request(int(ApiKey.DELETE_RECORDS), DELETE_RECORDS_VERSION,
                                             messages.encode_request(request, DELETE_RECORDS_VERSION)))
                await writer.drain()
                head = await reader.readexactly(ClientFraming.HEAD_BYTES)
                body = await reader.readexactly(framing.body_size(head))
            return messages.decode_response(ApiKey.DELETE_RECORDS, DELETE_RECORDS_VERSION, body)
        except (OSError, TimeoutError, EOFError, ProtocolError, asyncio.IncompleteReadError) as e:
            raise AdminError("BROKER_NOT_AVAILABLE", f"DeleteRecords to {address[0]}:{address[1]} failed: "
                             f"{e or type(e).__name__}", None, status=503) from None
        finally:
            if writer is not None:
                writer.close()

    async def _delete_records(self, request: web.Request) -> web.Response:
        self._authorize(request)
        topic = api.check_topic_name(request.match_info["name"], "topic")
        try:
            partition = int(request.match_info["partition"])
        except ValueError:
            raise api.invalid("partition must be an integer", "partition") from None
        try:
            body = await request.json()
        except ValueError:
            raise api.invalid("the request body is not JSON", None) from None
        offset, timeout_ms = parse_delete_records(body)
        m = messages.request_module(ApiKey.DELETE_RECORDS, DELETE_RECORDS_VERSION)
        message = m.DeleteRecordsRequest(topics=(m.DeleteRecordsTopic(name=topic, partitions=(
            m.DeleteRecordsPartition(partition_index=partition, offset=offset),)),),
            timeout=timedelta(milliseconds=timeout_ms))
        deadline = time.monotonic() + timeout_ms / 1000 + TIMEOUT_MARGIN
        while True:  # bounded by the deadline: one retry per leadership move
            leader, address = self._leader_address(topic, partition)
            remaining = deadline - time.monotonic()
            response = await self._call(address, message, max(remaining, CLIENT_RETRY_BACKOFF))
            result = response.topics[0].partitions[0]
            if result.error_code == 0:
                return web.json_response({"topic": topic, "partition": partition,
                                          "low_watermark": result.low_watermark})
            if result.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
                raise error_for(result.error_code, f"DeleteRecords on {topic}-{partition} at offset {offset} "
                                f"failed on its leader {leader}")
            await asyncio.sleep(CLIENT_RETRY_BACKOFF)
