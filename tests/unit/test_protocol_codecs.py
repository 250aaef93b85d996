"""Table tests for the API codecs in common/protocol/: one row of (version, dataclass value,
exact bytes) drives the decoder and the encoder. Expected bytes are built here with struct,
from the protocol's field layouts. Decoders are fed the whole body, the body with trailing
bytes, and a whole request frame one byte at a time through FrameDecoder."""

from __future__ import annotations

import struct
from datetime import timedelta
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from broker.request_handler import decode_request, encode_response
from common.protocol import (
    api_versions,
    describe_configs,
    fetch,
    messages,
    produce,
)
from common.protocol import list_offsets as lo
from common.protocol import metadata as md
from common.protocol import offset_for_leader_epoch as ofle
from common.errors import ErrorCode
from common.protocol.api_keys import ApiKey
from common.protocol.frame import (
    FrameDecoder,
    RequestHeader,
    encode_request_header,
    join_chunks,
    parse_request_header,
)
from common.protocol.primitives import ProtocolError


def i8(v: int) -> bytes: return struct.pack(">b", v)
def i16(v: int) -> bytes: return struct.pack(">h", v)
def i32(v: int) -> bytes: return struct.pack(">i", v)
def i64(v: int) -> bytes: return struct.pack(">q", v)
def b(v: bool) -> bytes: return b"\x01" if v else b"\x00"
def s(v: str | None) -> bytes: return i16(-1) if v is None else i16(len(v.encode())) + v.encode()
def by(v: bytes | None) -> bytes: return i32(-1) if v is None else i32(len(v)) + v
def arr(*items: bytes) -> bytes: return i32(len(items)) + b"".join(items)
def ints(*v: int) -> bytes: return arr(*map(i32, v))


# Flexible (KIP-482) forms: lengths as unsigned varint of length + 1, and a tagged-field
# section (TAG: empty) after every struct. Only short lengths (one varint byte) here.
TAG = b"\x00"
def cs(v: str | None) -> bytes: return b"\x00" if v is None else bytes([len(v.encode()) + 1]) + v.encode()
def carr(*items: bytes) -> bytes: return bytes([len(items) + 1]) + b"".join(items)


class Row(NamedTuple):
    api_key: int
    version: int
    value: Any
    data: bytes
    decode: Callable[[memoryview, int], Any]
    encode: Callable[[Any, int], list]


def req(module: Any, name: str, key: int, version: int, value: Any, data: bytes) -> Row:
    return Row(key, version, value, data, getattr(module, f"decode_{name}_request"),
               getattr(module, f"encode_{name}_request"))


def resp(module: Any, name: str, key: int, version: int, value: Any, data: bytes) -> Row:
    return Row(key, version, value, data, getattr(module, f"decode_{name}_response"),
               getattr(module, f"encode_{name}_response"))


def kio_req(key: int, version: int, value: Any, data: bytes) -> Row:
    """A request row of an API served on kio's generated messages (no codec of ours)."""
    def decode_kio_request(body: memoryview, v: int) -> Any:
        return messages.decode_request(key, v, body)
    return Row(key, version, value, data, decode_kio_request, lambda value, v: [messages.encode(value)])


def codec_req(module: Any, key: int, version: int, value: Any, data: bytes) -> Row:
    """A request row of an API on kio's messages whose old versions kio lacks are coded by
    hand in `module` (its broker `CODEC`, its client `encode_request`)."""
    return Row(key, version, value, data, module.CODEC.decode, module.encode_request)


def codec_resp(module: Any, key: int, version: int, value: Any, data: bytes) -> Row:
    return Row(key, version, value, data, module.decode_response, module.CODEC.encode)


def IPI_REQ(version: int, **fields: Any) -> Any:  # noqa: N802 - a kio class, by version
    return messages.build(messages.request_type(22, version), **fields)


def FC_REQ(version: int, **fields: Any) -> Any:  # noqa: N802
    return messages.build(messages.request_type(10, version), **fields)


def FC_RESP(version: int, **fields: Any) -> Any:  # noqa: N802
    return messages.build(messages.response_type(10, version), **fields)


def kio_resp(key: int, version: int, value: Any, data: bytes) -> Row:
    """A response row of an API served on kio's generated messages."""
    def decode_kio_response(body: memoryview, v: int) -> Any:
        return messages.decode_response(key, v, body)
    return Row(key, version, value, data, decode_kio_response, lambda value, v: [messages.encode(value)])


BATCH = b"\x00" * 8 + b"fake record batch"
TOPIC_UUID = md.wire_topic_id("AAECAwQFBgcICQoLDA0ODw")  # Kafka's Uuid string of bytes 0..15
ZERO16 = b"\x00" * 16

# ---- requests ---------------------------------------------------------------------------

PRODUCE_REQ = produce.ProduceRequest(None, -1, 30000, (
    produce.TopicProduceData("t", (produce.PartitionProduceData(0, BATCH),
                                   produce.PartitionProduceData(1, None))),))
PRODUCE_REQ_BYTES = (s(None) + i16(-1) + i32(30000)
                     + arr(s("t") + arr(i32(0) + by(BATCH), i32(1) + by(None))))

FETCH_P = fetch.FetchPartition(2, fetch_offset=100, partition_max_bytes=1048576,
                               log_start_offset=5, current_leader_epoch=7)
FETCH_V4 = fetch.FetchRequest(-1, 500, 1, 52428800, 0, (
    fetch.FetchTopic("t", (fetch.FetchPartition(2, 100, 1048576),)),))
FETCH_V4_BYTES = (i32(-1) + i32(500) + i32(1) + i32(52428800) + i8(0)
                  + arr(s("t") + arr(i32(2) + i64(100) + i32(1048576))))
FETCH_V7 = fetch.FetchRequest(1, 500, 1, 1000, 1, (
    fetch.FetchTopic("t", (fetch.FetchPartition(2, 100, 1048576, 5),)),),
    session_id=9, session_epoch=3, forgotten_topics_data=(fetch.ForgottenTopic("u", (0, 1)),))
FETCH_V7_BYTES = (i32(1) + i32(500) + i32(1) + i32(1000) + i8(1) + i32(9) + i32(3)
                  + arr(s("t") + arr(i32(2) + i64(100) + i64(5) + i32(1048576)))
                  + arr(s("u") + ints(0, 1)))
FETCH_V11 = fetch.FetchRequest(-1, 500, 1, 1000, 0, (fetch.FetchTopic("t", (FETCH_P,)),),
                               0, -1, (), "rack-a")
FETCH_V11_BYTES = (i32(-1) + i32(500) + i32(1) + i32(1000) + i8(0) + i32(0) + i32(-1)
                   + arr(s("t") + arr(i32(2) + i32(7) + i64(100) + i64(5) + i32(1048576)))
                   + arr() + s("rack-a"))

LO_REQ_V1 = lo.request(1, -1, [("t", 0, lo.EARLIEST_TIMESTAMP, -1)])
LO_REQ_V5 = lo.request(5, -1, [("t", 0, lo.LATEST_TIMESTAMP, 4)], isolation_level=1)

OFLE_REQ_V0 = ofle.request(0, [("t", 1, 3, -1)])  # kio's v2 classes carry v0 and v1

CT = messages.request_module(19, 4)  # CreateTopics, on kio's messages
CREATE_TOPICS_REQ = CT.CreateTopicsRequest(topics=(
    CT.CreatableTopic(name="t", num_partitions=3, replication_factor=2, assignments=(), configs=(
        CT.CreatableTopicConfig(name="cleanup.policy", value="delete"), CT.CreatableTopicConfig(name="x", value=None))),
    CT.CreatableTopic(name="u", num_partitions=-1, replication_factor=-1, assignments=(
        CT.CreatableReplicaAssignment(partition_index=0, broker_ids=(1, 2)),), configs=())),
    timeout=timedelta(seconds=5), validate_only=True)
CT2 = messages.response_module(19, 2)
CREATE_TOPICS_REQ_BYTES = (
    arr(s("t") + i32(3) + i16(2) + arr() + arr(s("cleanup.policy") + s("delete"), s("x") + s(None)),
        s("u") + i32(-1) + i16(-1) + arr(i32(0) + ints(1, 2)) + arr())
    + i32(5000) + b(True))

CP = messages.request_module(37, 1)  # CreatePartitions, on kio's messages
CREATE_PARTS_REQ = CP.CreatePartitionsRequest(topics=(
    CP.CreatePartitionsTopic(name="t", count=4, assignments=None),
    CP.CreatePartitionsTopic(name="u", count=2, assignments=(CP.CreatePartitionsAssignment(broker_ids=(1, 2)),))),
    timeout=timedelta(milliseconds=100), validate_only=False)
CREATE_PARTS_REQ_BYTES = (arr(s("t") + i32(4) + i32(-1), s("u") + i32(2) + arr(ints(1, 2)))
                          + i32(100) + b(False))

DC_RESOURCES = ((2, "t", None), (4, "1", ("log.dirs",)))  # DescribeConfigs: kio's messages from v1
DC_REQ_BYTES_V1 = arr(i8(2) + s("t") + i32(-1), i8(4) + s("1") + arr(s("log.dirs"))) + b(True)

REQUESTS = [kio_req(18, v, api_versions.request(v), b"") for v in (0, 1, 2)]  # ApiVersions, on kio's messages
REQUESTS += [
    kio_req(18, v, api_versions.request(v, "confluent-kafka-python", "2.6.0-rdkafka-2.6.0"),
            cs("confluent-kafka-python") + cs("2.6.0-rdkafka-2.6.0") + TAG)
    for v in (3, 4)
]
REQUESTS += [
    req(md, "metadata", 3, 0, md.MetadataRequest(None), arr()),  # v0: an empty list is every topic
    req(md, "metadata", 3, 0, md.MetadataRequest(("a", "b")), arr(s("a"), s("b"))),
    req(md, "metadata", 3, 1, md.MetadataRequest(None), i32(-1)),
    req(md, "metadata", 3, 3, md.MetadataRequest(("a", "b")), arr(s("a"), s("b"))),
    req(md, "metadata", 3, 4, md.MetadataRequest((), False), arr() + b(False)),
    req(md, "metadata", 3, 9, md.MetadataRequest(("a",), True, True, False),
        carr(cs("a") + TAG) + b(True) + b(True) + b(False) + TAG),
    req(md, "metadata", 3, 9, md.MetadataRequest(None, False), b"\x00" + b(False) + b(False) + b(False) + TAG),
    req(md, "metadata", 3, 10, md.MetadataRequest(("a",), True, False, True),
        carr(ZERO16 + cs("a") + TAG) + b(True) + b(False) + b(True) + TAG),
    req(md, "metadata", 3, 11, md.MetadataRequest(("a",), True, False, True),  # no cluster operations
        carr(ZERO16 + cs("a") + TAG) + b(True) + b(True) + TAG),
    req(md, "metadata", 3, 12, md.MetadataRequest((), False, False, False, (TOPIC_UUID,), 1),
        carr(TOPIC_UUID.bytes + cs(None) + TAG) + b(False) + b(False) + TAG),
    req(md, "metadata", 3, 8, md.MetadataRequest(("a",), True, False, True),
        arr(s("a")) + b(True) + b(False) + b(True)),
    req(produce, "produce", 0, 3, PRODUCE_REQ, PRODUCE_REQ_BYTES),
    req(produce, "produce", 0, 8, produce.ProduceRequest("tx", 1, 100, ()),
        s("tx") + i16(1) + i32(100) + arr()),
    req(fetch, "fetch", 1, 4, FETCH_V4, FETCH_V4_BYTES),
    req(fetch, "fetch", 1, 7, FETCH_V7, FETCH_V7_BYTES),
    req(fetch, "fetch", 1, 11, FETCH_V11, FETCH_V11_BYTES),
    codec_req(lo, 2, 0, lo.V0Request(-1, (lo.V0Topic("t", (lo.V0Partition(0, -1, 5),)),)),
              i32(-1) + arr(s("t") + arr(i32(0) + i64(-1) + i32(5)))),
    codec_req(lo, 2, 1, LO_REQ_V1, i32(-1) + arr(s("t") + arr(i32(0) + i64(-2)))),
    codec_req(lo, 2, 5, LO_REQ_V5,
              i32(-1) + i8(1) + arr(s("t") + arr(i32(0) + i32(4) + i64(-1)))),
    *[codec_req(lo, 2, v, lo.request(v, -1, [("t", 0, ts, 4)], isolation_level=1),
                i32(-1) + i8(1) + carr(cs("t") + carr(i32(0) + i32(4) + i64(ts) + TAG) + TAG) + TAG)
      for v, ts in ((6, -1), (7, lo.MAX_TIMESTAMP), (8, lo.EARLIEST_LOCAL_TIMESTAMP),
                    (9, lo.LATEST_TIERED_TIMESTAMP))],
    codec_req(ofle, 23, 0, OFLE_REQ_V0, arr(s("t") + arr(i32(1) + i32(3)))),
    codec_req(ofle, 23, 1, OFLE_REQ_V0, arr(s("t") + arr(i32(1) + i32(3)))),
    codec_req(ofle, 23, 3, ofle.request(3, [("t", 1, 3, 4)], replica_id=2),
              i32(2) + arr(s("t") + arr(i32(1) + i32(4) + i32(3)))),
    kio_req(22, 0, IPI_REQ(0, transactional_id=None, transaction_timeout=timedelta(milliseconds=60000)),
            s(None) + i32(60000)),
    kio_req(22, 1, IPI_REQ(1, transactional_id="tx", transaction_timeout=timedelta(milliseconds=1)), s("tx") + i32(1)),
    kio_req(22, 2, IPI_REQ(2, transactional_id=None, transaction_timeout=timedelta(milliseconds=60000)),
            cs(None) + i32(60000) + TAG),
    codec_req(ofle, 23, 4, ofle.request(4, [("t", 1, 3, 4)], replica_id=2),
        i32(2) + carr(cs("t") + carr(i32(1) + i32(4) + i32(3) + TAG) + TAG) + TAG),
    kio_req(10, 0, FC_REQ(0, key="g"), s("g")),
    kio_req(10, 2, FC_REQ(2, key="tx", key_type=1), s("tx") + i8(1)),
    kio_req(10, 3, FC_REQ(3, key="g", key_type=0), cs("g") + i8(0) + TAG),
    *[kio_req(10, v, FC_REQ(v, key_type=0, coordinator_keys=("g", "h")), i8(0) + carr(cs("g"), cs("h")) + TAG)
      for v in (4, 5)],
    kio_req(19, 4, CREATE_TOPICS_REQ, CREATE_TOPICS_REQ_BYTES),
    kio_req(20, 1, messages.request_type(20, 1)(topic_names=("a", "b"), timeout=timedelta(seconds=30)),
            arr(s("a"), s("b")) + i32(30000)),  # DeleteTopics, on kio's messages
    kio_req(37, 1, CREATE_PARTS_REQ, CREATE_PARTS_REQ_BYTES),
    kio_req(32, 1, describe_configs.request(1, *DC_RESOURCES, include_synonyms=True), DC_REQ_BYTES_V1),
    kio_req(32, 3, describe_configs.request(3, *DC_RESOURCES, include_synonyms=True, include_documentation=True),
            DC_REQ_BYTES_V1 + b(True)),
]

# ---- responses --------------------------------------------------------------------------

MD_PART = md.MetadataResponsePartition(0, 0, 1, 5, (1, 2), (1,), (2,))
MD_RESP = md.MetadataResponse(0, (md.MetadataResponseBroker(1, "h", 9092, "r"),
                                  md.MetadataResponseBroker(2, "g", 9093)),
                              "cid", 1, (md.MetadataResponseTopic(0, "t", False, (MD_PART,)),))
MD_V1 = (arr(i32(1) + s("h") + i32(9092) + s("r"), i32(2) + s("g") + i32(9093) + s(None))
         + i32(1) + arr(i16(0) + s("t") + b(False)
                        + arr(i16(0) + i32(0) + i32(1) + ints(1, 2) + ints(1))))
MD_V8 = (i32(0) + arr(i32(1) + s("h") + i32(9092) + s("r"), i32(2) + s("g") + i32(9093) + s(None))
         + s("cid") + i32(1)
         + arr(i16(0) + s("t") + b(False)
               + arr(i16(0) + i32(0) + i32(1) + i32(5) + ints(1, 2) + ints(1) + ints(2))
               + i32(-2**31))
         + i32(-2**31))

MD_RESP_V12 = md.MetadataResponse(0, MD_RESP.brokers, "cid", 1, (
    md.MetadataResponseTopic(0, "t", False, (MD_PART,), 0xDF8, TOPIC_UUID),
    md.MetadataResponseTopic(100, None, False, (), topic_id=md.ZERO_UUID)))
MD_BROKERS_FLEX = carr(i32(1) + cs("h") + i32(9092) + cs("r") + TAG, i32(2) + cs("g") + i32(9093) + cs(None) + TAG)
MD_PART_FLEX = carr(i16(0) + i32(0) + i32(1) + i32(5) + carr(i32(1), i32(2)) + carr(i32(1)) + carr(i32(2)) + TAG)
MD_V9 = (i32(0) + MD_BROKERS_FLEX + cs("cid") + i32(1)
         + carr(i16(0) + cs("t") + b(False) + MD_PART_FLEX + i32(-2**31) + TAG) + i32(-2**31) + TAG)
MD_V12 = (i32(0) + MD_BROKERS_FLEX + cs("cid") + i32(1)
          + carr(i16(0) + cs("t") + TOPIC_UUID.bytes + b(False) + MD_PART_FLEX + i32(0xDF8) + TAG,
                 i16(100) + cs(None) + ZERO16 + b(False) + carr() + i32(-2**31) + TAG) + TAG)

PR_PART = produce.PartitionProduceResponse(0, 0, 42, -1, 7, (
    produce.BatchIndexAndErrorMessage(0, "bad"),), "why")
PR_RESP = produce.ProduceResponse((produce.TopicProduceResponse("t", (PR_PART,)),), 3)
PR_V3 = arr(s("t") + arr(i32(0) + i16(0) + i64(42) + i64(-1))) + i32(3)
PR_V8 = arr(s("t") + arr(i32(0) + i16(0) + i64(42) + i64(-1) + i64(7)
                         + arr(i32(0) + s("bad")) + s("why"))) + i32(3)

FR_PART = fetch.FetchPartitionResponse(0, 0, 10, BATCH, 9, 0, (fetch.AbortedTransaction(5, 6),),
                                       3)
FR_RESP = fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", (
    FR_PART, fetch.FetchPartitionResponse(1, 1, -1, None, -1, -1, None, -1))),), 0, 77)
FR_V4 = i32(0) + arr(s("t") + arr(
    i32(0) + i16(0) + i64(10) + i64(9) + arr(i64(5) + i64(6)) + by(BATCH),
    i32(1) + i16(1) + i64(-1) + i64(-1) + i32(-1) + by(None)))
FR_V11 = i32(0) + i16(0) + i32(77) + arr(s("t") + arr(
    i32(0) + i16(0) + i64(10) + i64(9) + i64(0) + arr(i64(5) + i64(6)) + i32(3) + by(BATCH),
    i32(1) + i16(1) + i64(-1) + i64(-1) + i64(-1) + i32(-1) + i32(-1) + by(None)))

def lo_response(version: int, partition: int, error: int, timestamp: int, offset: int, epoch: int) -> Any:
    """kio's ListOffsetsResponse of `version` (v1+) answering one partition of topic "t"."""
    m = messages.response_module(2, version)
    return messages.build(m.ListOffsetsResponse, throttle_time=timedelta(0), topics=(m.ListOffsetsTopicResponse(
        name="t", partitions=(messages.build(m.ListOffsetsPartitionResponse, partition_index=partition,
                                             error_code=ErrorCode(error), timestamp=timestamp, offset=offset,
                                             leader_epoch=epoch),)),))


def ofle_response(version: int, error: int, partition: int, epoch: int, end_offset: int) -> Any:
    """kio's OffsetForLeaderEpochResponse of `ofle.schema_version(version)` for one partition of "t"."""
    m = messages.response_module(23, ofle.schema_version(version))
    return m.OffsetForLeaderEpochResponse(throttle_time=timedelta(0), topics=(m.OffsetForLeaderTopicResult(
        topic="t", partitions=(m.EpochEndOffset(error_code=ErrorCode(error), partition=partition,
                                                leader_epoch=epoch, end_offset=end_offset),)),))


def dc_response(version: int) -> Any:
    m = messages.response_module(32, version)
    config = messages.build(m.DescribeConfigsResourceResult, name="retention.ms", value="1000", read_only=False,
                            config_source=1, is_sensitive=False, synonyms=(
                                m.DescribeConfigsSynonym(name="retention.ms", value="1000", source=1),),
                            config_type=5, documentation=None)
    return m.DescribeConfigsResponse(throttle_time=messages.NO_THROTTLE, results=(m.DescribeConfigsResult(
        error_code=ErrorCode.NONE, error_message=None, resource_type=2, resource_name="t", configs=(config,)),))


DC_RESP_V1 = i32(0) + arr(i16(0) + s(None) + i8(2) + s("t") + arr(
    s("retention.ms") + s("1000") + b(False) + i8(1) + b(False)
    + arr(s("retention.ms") + s("1000") + i8(1))))

RESPONSES = [
    kio_resp(18, 0, api_versions.response(0, ErrorCode.NONE, (api_versions.ApiVersion(0, 3, 8),)),
             i16(0) + arr(i16(0) + i16(3) + i16(8))),
    kio_resp(18, 2, messages.response_type(18, 2)(error_code=ErrorCode.NONE, api_keys=(
        messages.response_module(18, 2).ApiVersion(api_key=1, min_version=4, max_version=11),),
        throttle_time=timedelta(milliseconds=7)), i16(0) + arr(i16(1) + i16(4) + i16(11)) + i32(7)),
    resp(md, "metadata", 3, 1, md.MetadataResponse(
        0, MD_RESP.brokers, None, 1, (md.MetadataResponseTopic(
            0, "t", False, (md.MetadataResponsePartition(0, 0, 1, -1, (1, 2), (1,)),)),)), MD_V1),
    resp(md, "metadata", 3, 0, md.MetadataResponse(  # v0: no rack, controller id or internal flag
        0, (md.MetadataResponseBroker(1, "h", 9092),), None, -1, (md.MetadataResponseTopic(
            0, "t", False, (md.MetadataResponsePartition(0, 0, 1, -1, (1, 2), (1,)),)),)),
        arr(i32(1) + s("h") + i32(9092)) + arr(i16(0) + s("t") + arr(i16(0) + i32(0) + i32(1) + ints(1, 2) + ints(1)))),
    resp(md, "metadata", 3, 8, MD_RESP, MD_V8),
    resp(md, "metadata", 3, 9, MD_RESP, MD_V9),
    resp(md, "metadata", 3, 12, MD_RESP_V12, MD_V12),
    resp(produce, "produce", 0, 3, produce.ProduceResponse((produce.TopicProduceResponse(
        "t", (produce.PartitionProduceResponse(0, 0, 42),)),), 3), PR_V3),
    resp(produce, "produce", 0, 8, PR_RESP, PR_V8),
    resp(fetch, "fetch", 1, 4, fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", (
        fetch.FetchPartitionResponse(0, 0, 10, BATCH, 9, -1, (fetch.AbortedTransaction(5, 6),)),
        fetch.FetchPartitionResponse(1, 1, -1, None))),)), FR_V4),
    resp(fetch, "fetch", 1, 11, FR_RESP, FR_V11),
    codec_resp(lo, 2, 0, lo.V0Response((lo.V0TopicResponse("t", (
        lo.V0PartitionResponse(0, 0, (250, 200)), lo.V0PartitionResponse(1, 6, ()))),)),
        arr(s("t") + arr(i32(0) + i16(0) + arr(i64(250), i64(200)), i32(1) + i16(6) + arr()))),
    codec_resp(lo, 2, 1, lo_response(1, 0, 0, -1, 100, -1),
               arr(s("t") + arr(i32(0) + i16(0) + i64(-1) + i64(100)))),
    codec_resp(lo, 2, 5, lo_response(5, 0, 0, -1, 100, 4),
               i32(0) + arr(s("t") + arr(i32(0) + i16(0) + i64(-1) + i64(100) + i32(4)))),
    *[codec_resp(lo, 2, v, lo_response(v, 0, 0, -1, 100, 4),
                 i32(0) + carr(cs("t") + carr(i32(0) + i16(0) + i64(-1) + i64(100) + i32(4) + TAG)
                               + TAG) + TAG) for v in (6, 7, 8, 9)],
    kio_resp(18, 3, api_versions.response(3, ErrorCode.NONE, (api_versions.ApiVersion(2, 1, 8),)),
        i16(0) + carr(i16(2) + i16(1) + i16(8) + TAG) + i32(0) + TAG),
    codec_resp(ofle, 23, 0, ofle_response(0, 0, 1, -1, 50), arr(s("t") + arr(i16(0) + i32(1) + i64(50)))),
    codec_resp(ofle, 23, 1, ofle_response(1, 0, 1, 3, 50), arr(s("t") + arr(i16(0) + i32(1) + i32(3) + i64(50)))),
    codec_resp(ofle, 23, 3, ofle_response(3, 0, 1, 3, 50),
         i32(0) + arr(s("t") + arr(i16(0) + i32(1) + i32(3) + i64(50)))),
    *[kio_resp(22, v, messages.response_type(22, v)(throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE,
                                                     producer_id=1000, producer_epoch=0),
               i32(0) + i16(0) + i64(1000) + i16(0) + (TAG if v >= 2 else b"")) for v in (1, 2)],
    codec_resp(ofle, 23, 4, ofle_response(4, 0, 1, 3, 50),
         i32(0) + carr(cs("t") + carr(i16(0) + i32(1) + i32(3) + i64(50) + TAG) + TAG) + TAG),
    kio_resp(10, 0, FC_RESP(0, error_code=ErrorCode.NONE, node_id=1, host="h", port=9092),
             i16(0) + i32(1) + s("h") + i32(9092)),
    kio_resp(10, 3, FC_RESP(3, throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, error_message=None,
                            node_id=1, host="h", port=9092),
             i32(0) + i16(0) + cs(None) + i32(1) + cs("h") + i32(9092) + TAG),
    *[kio_resp(10, v, FC_RESP(v, throttle_time=messages.NO_THROTTLE, coordinators=(
        messages.response_module(10, v).Coordinator(key="g", node_id=1, host="h", port=9092,
                                                    error_code=ErrorCode.NONE, error_message=None),
        messages.response_module(10, v).Coordinator(key="x", node_id=-1, host="", port=-1,
                                                    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                    error_message="no"))),
        i32(0) + carr(cs("g") + i32(1) + cs("h") + i32(9092) + i16(0) + cs(None) + TAG,
                      cs("x") + i32(-1) + cs("") + i32(-1) + i16(15) + cs("no") + TAG) + TAG) for v in (4, 5)],
    kio_resp(10, 2, FC_RESP(2, throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            error_message="not yet", node_id=-1, host="", port=-1),
             i32(0) + i16(15) + s("not yet") + i32(-1) + s("") + i32(-1)),
    kio_resp(19, 2, CT2.CreateTopicsResponse(throttle_time=messages.NO_THROTTLE, topics=(
        CT2.CreatableTopicResult(name="t", error_code=ErrorCode.NONE, error_message=None),
        CT2.CreatableTopicResult(name="u", error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message="exists"))),
        i32(0) + arr(s("t") + i16(0) + s(None), s("u") + i16(36) + s("exists"))),
    kio_resp(20, 3, messages.response_type(20, 3)(throttle_time=messages.NO_THROTTLE, responses=(
        messages.response_module(20, 3).DeletableTopicResult(name="t", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),)),
        i32(0) + arr(s("t") + i16(3))),
    kio_resp(37, 0, messages.response_type(37, 0)(throttle_time=timedelta(milliseconds=1), results=(
        messages.response_module(37, 0).CreatePartitionsTopicResult(
            name="t", error_code=ErrorCode.INVALID_PARTITIONS, error_message="no"),)),
        i32(1) + arr(s("t") + i16(37) + s("no"))),
    kio_resp(32, 1, dc_response(1), DC_RESP_V1),
    kio_resp(32, 3, dc_response(3), DC_RESP_V1 + i8(5) + s(None)),  # v3's config_type, documentation end the config
]

ALL = REQUESTS + RESPONSES


def row_id(row: Row) -> str:
    return f"{row.decode.__name__}-v{row.version}"


# The checks every codec table runs (this module's, test_group_codecs', test_cluster_admin_codecs').


def check_codec_row(row: Row) -> None:
    """Exact bytes both ways, trailing bytes tolerated, every truncation a ProtocolError."""
    assert join_chunks(row.encode(row.value, row.version)) == row.data
    assert row.decode(memoryview(row.data), row.version) == row.value
    assert row.decode(memoryview(row.data + b"\x00\x01trailing"), row.version) == row.value
    for cut in range(len(row.data)):
        try:
            decoded = row.decode(memoryview(row.data[:cut]), row.version)
        except ProtocolError:
            continue
        # A body may end early only where what follows is optional to us (never here).
        pytest.fail(f"decoded {decoded!r} from {cut} of {len(row.data)} bytes")


def check_request_frame(row: Row) -> None:
    """A whole request frame (header v1 or v2 as the version says) fed one byte at a time."""
    header = RequestHeader(row.api_key, row.version, 123, "client")
    payload = encode_request_header(header) + row.data + b"librdkafka-trailing"
    stream = struct.pack(">i", len(payload)) + payload
    decoder = FrameDecoder(max_request_bytes=len(payload))
    frames = [f for i in range(len(stream)) for f in decoder.feed(stream[i:i + 1])]
    assert len(frames) == 1
    parsed, body = parse_request_header(frames[0])
    assert parsed == header
    assert decode_request(parsed, body) == row.value


def check_dispatch(row: Row) -> None:
    """The broker's dispatch table encodes the response as the codec does."""
    assert join_chunks(encode_response(ApiKey(row.api_key), row.value, row.version)) == row.data


@pytest.mark.parametrize("row", ALL, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", REQUESTS, ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", RESPONSES, ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


def test_unsupported_versions_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        fetch.decode_fetch_request(memoryview(FETCH_V4_BYTES), 3)
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(12345, 0, 1, None), memoryview(b""))
    with pytest.raises(ProtocolError):
        md.decode_metadata_request(memoryview(i32(-1)), 13)


class FakeSlice:
    """Stands in for a segment FileSlice: only `length` matters to the encoder."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)


def test_fetch_response_leaves_records_placeholders_in_place() -> None:
    first, second = FakeSlice(BATCH), FakeSlice(b"second batch")
    value = fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", (
        fetch.FetchPartitionResponse(0, 0, 10, first),
        fetch.FetchPartitionResponse(1, 0, 10, second))),), 0, 0)
    chunks = fetch.encode_fetch_response(value, 11)
    assert [c for c in chunks if not isinstance(c, bytes)] == [first, second]
    assert chunks[-1] is second  # nothing follows the last partition's records
    spliced = b"".join(c if isinstance(c, bytes) else c.data for c in chunks)
    inline = fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", (
        fetch.FetchPartitionResponse(0, 0, 10, first.data),
        fetch.FetchPartitionResponse(1, 0, 10, second.data))),), 0, 0)
    assert spliced == join_chunks(fetch.encode_fetch_response(inline, 11))


def test_produce_records_are_views_into_the_request() -> None:
    body = memoryview(bytearray(PRODUCE_REQ_BYTES))
    decoded = produce.decode_produce_request(body, 3)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is body.obj  # a slice, not a copy
