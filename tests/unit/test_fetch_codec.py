"""common/protocol/fetch.py at v12-v17: every field of Kafka 3.9's FetchRequest/FetchResponse.

The oracle is kafka-python's decoder, generated from Kafka's own message JSON (an independent
reading of the same schema): what we encode must decode there to the same fields, and our
decoder must give back what we encoded (also with trailing bytes, and never from a prefix).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from common.protocol import fetch
from common.protocol.leader_discovery import LeaderIdAndEpoch, NodeEndpoint
from common.protocol.api_keys import ApiKey, is_flexible
from common.protocol.frame import join_chunks
from tests.unit.test_protocol_codecs import Row, check_codec_row, check_request_frame

TOPIC_ID = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
DIRECTORY = uuid.UUID(int=9)
BATCH = b"\x00" * 8 + b"fake record batch"


def request(version: int) -> fetch.FetchRequest:
    by_id = version >= 13
    return fetch.FetchRequest(
        3, 500, 1, 1000, 1,
        (fetch.FetchTopic("" if by_id else "t", (fetch.FetchPartition(
            2, 100, 1048576, 5, 7, 6, DIRECTORY if version >= 17 else fetch.ZERO_UUID),),
            TOPIC_ID if by_id else fetch.ZERO_UUID),),
        9, 3, (fetch.ForgottenTopic("" if by_id else "u", (0, 1), TOPIC_ID if by_id else fetch.ZERO_UUID),),
        "rack-a", "cluster-1", 44 if version >= 15 else -1)


def response(version: int) -> fetch.FetchResponse:
    by_id = version >= 13
    return fetch.FetchResponse(0, (fetch.FetchTopicResponse("" if by_id else "t", (
        fetch.FetchPartitionResponse(0, 0, 10, BATCH, 9, 0, (fetch.AbortedTransaction(5, 6),), 1,
                                     fetch.EpochEndOffset(3, 40), None, fetch.SnapshotId(7, 2)),
        fetch.FetchPartitionResponse(1, 6, -1, None, -1, -1, None, -1, None, LeaderIdAndEpoch(2, 4)),
    ), TOPIC_ID if by_id else fetch.ZERO_UUID),), 5, 77,
        (NodeEndpoint(2, "127.0.0.2", 9092, None), NodeEndpoint(3, "h3", 9093, "r1"))
        if version >= 16 else ())


VERSIONS = [12, 13, 14, 15, 16, 17]


@pytest.mark.parametrize("version", VERSIONS)
def test_request_round_trip_and_frames(version: int) -> None:
    value = request(version)
    data = join_chunks(fetch.encode_fetch_request(value, version))
    row = Row(int(ApiKey.FETCH), version, value, data, fetch.decode_fetch_request, fetch.encode_fetch_request)
    check_codec_row(row)
    check_request_frame(row)
    assert is_flexible(ApiKey.FETCH, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_round_trip(version: int) -> None:
    value = response(version)
    data = join_chunks(fetch.encode_fetch_response(value, version))
    check_codec_row(Row(int(ApiKey.FETCH), version, value, data, fetch.decode_fetch_response,
                        fetch.encode_fetch_response))


def oracle(kind: str, data: bytes, version: int) -> Any:
    from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse

    return (FetchRequest if kind == "request" else FetchResponse).decode(data, version=version)


@pytest.mark.parametrize("version", VERSIONS)
def test_request_as_kafkas_schema_reads_it(version: int) -> None:
    decoded = oracle("request", join_chunks(fetch.encode_fetch_request(request(version), version)), version)
    assert decoded.cluster_id == "cluster-1"
    if version >= 15:
        assert (decoded.replica_state.replica_id, decoded.replica_state.replica_epoch) == (3, 44)
    else:
        assert decoded.replica_id == 3
    topic = decoded.topics[0]
    assert (topic.topic_id if version >= 13 else topic.topic) == (TOPIC_ID if version >= 13 else "t")
    p = topic.partitions[0]
    assert (p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
            p.partition_max_bytes) == (2, 7, 100, 6, 5, 1048576)
    if version >= 17:
        assert p.replica_directory_id == DIRECTORY
    forgotten = decoded.forgotten_topics_data[0]
    assert list(forgotten.partitions) == [0, 1]
    assert (decoded.session_id, decoded.session_epoch, decoded.rack_id, decoded.isolation_level) == (9, 3, "rack-a", 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_as_kafkas_schema_reads_it(version: int) -> None:
    decoded = oracle("response", join_chunks(fetch.encode_fetch_response(response(version), version)), version)
    assert (decoded.throttle_time_ms, decoded.error_code, decoded.session_id) == (0, 5, 77)
    topic = decoded.responses[0]
    assert (topic.topic_id if version >= 13 else topic.topic) == (TOPIC_ID if version >= 13 else "t")
    first, second = topic.partitions
    assert (first.diverging_epoch.epoch, first.diverging_epoch.end_offset) == (3, 40)
    assert (first.snapshot_id.end_offset, first.snapshot_id.epoch) == (7, 2)
    assert first.records == BATCH and first.preferred_read_replica == 1
    assert [(a.producer_id, a.first_offset) for a in first.aborted_transactions] == [(5, 6)]
    assert (second.current_leader.leader_id, second.current_leader.leader_epoch) == (2, 4)
    assert second.records is None and second.aborted_transactions is None
    if version >= 16:
        assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
            (2, "127.0.0.2", 9092, None), (3, "h3", 9093, "r1")]


def test_untagged_defaults_are_not_sent() -> None:
    """A partition answer without diverging epoch, leader or snapshot carries an empty tag
    section (one zero byte), as Kafka's generated code writes it."""
    plain = fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", (fetch.FetchPartitionResponse(0, 0, 1, b""),)),))
    data = join_chunks(fetch.encode_fetch_response(plain, 12))
    assert data.endswith(b"\x00\x00\x00")  # partition tags, topic tags, response tags: all empty


def test_v15_consumer_has_no_replica_state() -> None:
    consumer = fetch.FetchRequest(-1, 500, 1, 1000, 0, ())
    data = join_chunks(fetch.encode_fetch_request(consumer, 15))
    assert fetch.decode_fetch_request(memoryview(data), 15) == consumer
    assert oracle("request", data, 15).replica_state is None


def test_the_brokers_row_checks_no_version_and_clients_still_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's Fetch row decodes and encodes without a version check of its own (its
    RequestHandler's row_for checked the version against the row's range, and refuses v3 or v18
    with ProtocolError before any codec runs); the module's entries, for clients and tests,
    still refuse a version tidelog does not serve."""
    from broker.request_handler import ROWS, row_for
    from common.protocol import api_keys
    from common.protocol.frame import RequestHeader
    from common.protocol.primitives import ProtocolError

    row = ROWS[ApiKey.FETCH]
    data = join_chunks(fetch.encode_fetch_request(request(16), 16))
    encoded = join_chunks(fetch.encode_fetch_response(response(16), 16))
    checks: list[int] = []
    monkeypatch.setattr(fetch, "check_version", lambda key, version: checks.append(version))
    assert row.codec.decode(memoryview(data), 16) == request(16)
    assert join_chunks(row.codec.encode(response(16), 16)) == encoded
    assert checks == []
    monkeypatch.undo()
    for version in (3, 18):
        with pytest.raises(ProtocolError, match=f"FETCH v{version} is not supported"):
            row_for(RequestHeader(int(ApiKey.FETCH), version, 1, None))
        with pytest.raises(ProtocolError, match=f"FETCH v{version} is not supported"):
            fetch.decode_fetch_request(memoryview(data), version)
        with pytest.raises(ProtocolError, match=f"FETCH v{version} is not supported"):
            fetch.encode_fetch_response(response(16), version)
    assert api_keys.is_supported(ApiKey.FETCH, 17) and not api_keys.is_supported(ApiKey.FETCH, 18)
