"""common/protocol/messages.py (kio's generated messages bridged to our frames) and
common/protocol/api_table.py: AlterReplicaLogDirs, the first API with no codec of ours, against
kafka-python's encoding; truncation, trailing bytes and garbage raise ProtocolError; the table's
flexible versions agree with Kafka's schemas; the rule of AlterReplicaLogDirs."""

from __future__ import annotations

import pytest

from broker.handlers.log_admin import alter_replica_log_dir_error
from broker.request_handler import ADVERTISED_API_VERSIONS, ROWS, decode_request, encode_response
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import FIRST_FLEXIBLE_VERSION, SUPPORTED_VERSIONS, ApiKey, is_flexible
from common.protocol.api_table import API_SPECS
from common.protocol.frame import RequestHeader, encode_request_header, parse_request_header
from common.protocol.primitives import ProtocolError
from tests.kafka_python_oracle import every_truncation_fails, kafka_python_body

kafka_admin = pytest.importorskip("kafka.protocol.admin")

ARLD = ApiKey.ALTER_REPLICA_LOG_DIRS
KP_REQUEST = {"dirs": [("/data/a", [("orders", [0, 2]), ("é-topic", [])]), ("/data/b", [])]}
KP_RESPONSE = {"throttle_time_ms": 0, "results": [("orders", [(0, 0), (2, 57)]), ("quiet", [])]}


def kio_request(version: int):
    m = messages.request_module(ARLD, version)
    return m.AlterReplicaLogDirsRequest(dirs=(
        m.AlterReplicaLogDir(path="/data/a", topics=(
            m.AlterReplicaLogDirTopic(name="orders", partitions=(0, 2)),
            m.AlterReplicaLogDirTopic(name="é-topic", partitions=()))),
        m.AlterReplicaLogDir(path="/data/b", topics=())))


def kio_response(version: int):
    m = messages.response_module(ARLD, version)
    return messages.build(m.AlterReplicaLogDirsResponse, throttle_time=messages.NO_THROTTLE, results=(
        m.AlterReplicaLogDirTopicResult(topic_name="orders", partitions=(
            m.AlterReplicaLogDirPartitionResult(partition_index=0, error_code=ErrorCode.NONE),
            m.AlterReplicaLogDirPartitionResult(partition_index=2, error_code=ErrorCode.LOG_DIR_NOT_FOUND))),
        m.AlterReplicaLogDirTopicResult(topic_name="quiet", partitions=())))


@pytest.mark.parametrize("version", [1, 2])
def test_request_decodes_kafka_pythons_bytes_through_the_dispatch_table(version):
    body = kafka_python_body(kafka_admin.AlterReplicaLogDirsRequest, version, **KP_REQUEST)
    header = RequestHeader(ARLD, version, 9, "kp")
    parsed, view = parse_request_header(encode_request_header(header) + body)
    assert parsed == header
    assert decode_request(parsed, view) == kio_request(version)
    assert decode_request(parsed, memoryview(body + b"\x00\x07")) == kio_request(version)  # trailing bytes
    assert messages.encode(kio_request(version)) == body
    every_truncation_fails(lambda b, v: decode_request(RequestHeader(ARLD, v, 1, None), b), body, version)


@pytest.mark.parametrize("version", [1, 2])
def test_response_matches_kafka_python(version):
    ours = b"".join(encode_response(ARLD, kio_response(version), version))
    assert ours == kafka_python_body(kafka_admin.AlterReplicaLogDirsResponse, version, **KP_RESPONSE)
    assert messages.decode_response(ARLD, version, ours) == kio_response(version)


def test_a_response_of_another_version_is_a_handler_bug():
    with pytest.raises(ValueError):
        encode_response(ARLD, kio_response(1), 2)


@pytest.mark.parametrize("version, body", [
    (1, b"\xff\xff\xff\xfe"),  # negative dir count
    (1, b"\x00\x00\x7f\xff"),  # more dirs than bytes
    (1, b"\x7f\xff\xff\xff"),  # a count that must not be allocated
    (2, b"\x00"),  # compact null where an array is required
    (2, b"\x02\x00"),  # compact null path
    (2, b"\x02\x05ab"),  # path longer than the body
    (2, b"\x02\x02\xff\x01\x00\x00"),  # a path that is not UTF-8
], ids=["negative-count", "count-too-large", "huge-count", "null-array", "null-path", "short-path", "bad-utf8"])
def test_malformed_requests_raise_protocol_error(version, body):
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(ARLD, version, 1, None), memoryview(body))


@pytest.mark.parametrize("version", [0, 3])
def test_versions_outside_the_range_are_refused(version):
    with pytest.raises(ProtocolError):
        decode_request(RequestHeader(ARLD, version, 1, None), memoryview(b"\x00\x00\x00\x00"))


def test_api_versions_advertises_alter_replica_log_dirs_v1_to_v2():
    advertised = {a.api_key: (a.min_version, a.max_version) for a in ADVERTISED_API_VERSIONS}
    assert advertised[ARLD] == (1, 2)


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_VERSIONS))
def test_flexible_versions_agree_with_kafkas_schemas(api_key):
    # kio's classes are generated from Kafka 4's JSON: versions it dropped are not compared.
    low, high = SUPPORTED_VERSIONS[api_key]
    for version in range(low, high + 1):
        try:
            generated = messages.request_type(api_key, version).__flexible__
        except KeyError:
            continue
        assert is_flexible(api_key, version) == generated, (api_key.name, version, FIRST_FLEXIBLE_VERSION[api_key])
        assert messages.response_type(api_key, version).__flexible__ == generated


def test_the_table_serves_every_api_and_its_facts():
    assert set(API_SPECS) == set(ROWS) == set(SUPPORTED_VERSIONS)
    # Kafka's SaslServerAuthenticator: only these three before authentication, and none of them is
    # authorized (there is no principal yet)
    before_auth = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    assert {k for k, s in API_SPECS.items() if s.before_authentication} == before_auth
    assert {k for k, s in API_SPECS.items() if s.acl is None} == before_auth
    assert {k for k, s in API_SPECS.items() if s.forwarded} == {
        ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS}  # KIP-554: the controllers store credentials
    for api_key, spec in API_SPECS.items():
        assert ROWS[api_key].codec is spec.codec and ROWS[api_key].versions == spec.versions
        if spec.generated:  # kio has every version the row answers
            for version in range(spec.versions[0], spec.versions[1] + 1):
                messages.request_type(api_key, version)
                messages.response_type(api_key, version)


DIRS = ["/data/a", "/data/b"]
TP = TopicPartition("orders", 0)


@pytest.mark.parametrize("tp, destination, current, expected", [
    (TP, "/data/a", "/data/a", ErrorCode.NONE),  # already there
    (TP, "/data/c", "/data/a", ErrorCode.LOG_DIR_NOT_FOUND),
    (TP, "/data/a/", "/data/a", ErrorCode.LOG_DIR_NOT_FOUND),  # Kafka compares the path as sent
    (TopicPartition("gone", 1), "/data/c", None, ErrorCode.LOG_DIR_NOT_FOUND),  # the dir is checked first
    (TopicPartition("gone", 1), "/data/a", None, ErrorCode.REPLICA_NOT_AVAILABLE),
    (TP, "/data/b", "/data/a", ErrorCode.KAFKA_STORAGE_ERROR),  # no copy between dirs yet
    (TopicPartition("t" * 213, 0), "/data/a", "/data/a", ErrorCode.NONE),  # 213 + 2 + 40 = 255
    (TopicPartition("t" * 214, 0), "/data/a", "/data/a", ErrorCode.INVALID_TOPIC_EXCEPTION),
])
def test_alter_replica_log_dir_rule(tp, destination, current, expected):
    assert alter_replica_log_dir_error(tp, destination, log_dirs=DIRS, current_dir=current) == expected


# --- unknown tagged fields (KIP-482): Kafka skips them, kio's native reader refuses them ---

def api_versions_response_with_tags(*extra: bytes) -> tuple[object, bytes]:
    m = messages.response_module(ApiKey.API_VERSIONS, 3)
    value = m.ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=(
        m.ApiVersion(api_key=ARLD, min_version=1, max_version=2),), throttle_time=messages.NO_THROTTLE,
        finalized_features_epoch=5)
    data = messages.encode(value)
    known = b"\x01\x08" + (5).to_bytes(8, "big")  # tag 1 (finalized_features_epoch), 8 bytes
    assert data.endswith(b"\x01" + known)
    return value, data[:-len(known) - 1] + bytes([1 + len(extra)]) + known + b"".join(extra)


def test_an_unknown_tag_is_skipped_and_known_ones_kept():
    value, data = api_versions_response_with_tags(b"\x09\x02ab", b"\x7f\x00")
    assert messages.decode_response(ApiKey.API_VERSIONS, 3, data) == value
    assert messages.decode_response(ApiKey.API_VERSIONS, 3, data + b"\x00\x01") == value  # trailing bytes


def test_an_unknown_tag_in_a_nested_struct_is_skipped():
    # DescribeProducers v0: topic "t" with partition 7 and a struct-level tag 3 of 2 bytes
    body = b"\x02\x02t\x02\x00\x00\x00\x07\x01\x03\x02ab\x00"
    m = messages.request_module(ApiKey.DESCRIBE_PRODUCERS, 0)
    assert messages.decode_request(ApiKey.DESCRIBE_PRODUCERS, 0, body) == \
        m.DescribeProducersRequest(topics=(m.TopicRequest(name="t", partition_indexes=(7,)),))


@pytest.mark.parametrize("extra", [
    (b"\x09\x05ab",),  # a tag longer than the message
    (b"\x09\x02ab", b"\x08\x00"),  # tags out of order
    (b"\x09\x02ab", b"\x09\x00"),  # a tag twice
    (b"\x89\x89\x89\x89\x89\x01\x00",),  # a 6-byte varint
], ids=["short", "out-of-order", "twice", "long-varint"])
def test_malformed_unknown_tags_raise_protocol_error(extra):
    _, data = api_versions_response_with_tags(*extra)
    with pytest.raises(ProtocolError):
        messages.decode_response(ApiKey.API_VERSIONS, 3, data)


def test_writable_buffers_decode_too():
    # tidelog's own client reads answers into a bytearray; the native reader wants read-only
    data = messages.encode(kio_response(2))
    assert messages.decode_response(ARLD, 2, bytearray(data)) == kio_response(2)
    assert messages.decode_response(ARLD, 2, memoryview(bytearray(data))) == kio_response(2)


@pytest.mark.parametrize("api_key, version, body, field", [
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, b"\x00\x00\x00", "resources"),  # compact null, top level
    (ApiKey.DELETE_RECORDS, 2, b"\x02\x02t\x00\x00\x00\x00\x00\x00\x00", "partitions"),  # in a nested struct
], ids=["top-level", "nested"])
def test_a_null_where_the_schema_has_no_nullable_versions_is_refused(api_key, version, body, field):
    """kio's reader lets an array be null whatever the schema says; Kafka's generated readers
    refuse it ("non-nullable field X was serialized as null"), and so does the bridge."""
    with pytest.raises(ProtocolError, match=f"non-nullable field {field}"):
        messages.decode_request(api_key, version, body)


def test_a_nullable_array_may_be_null():
    body = b"\x02\x02\x02t\x00\x00\x00\x00\x00"  # DescribeConfigs v4: configuration_keys null (every key)
    request = messages.decode_request(ApiKey.DESCRIBE_CONFIGS, 4, body)
    assert request.resources[0].configuration_keys is None


@pytest.mark.parametrize("api_key, version, body", [
    (ApiKey.ALTER_REPLICA_LOG_DIRS, 2, bytes.fromhex("8b8cdee51fe74860242b4eba662821495286ae")),  # compact, ~2**32
    (ApiKey.DELETE_RECORDS, 1, b"\x7f\xff\xff\xff" + b"\x00" * 8),  # classic int32 count
    (ApiKey.DESCRIBE_CONFIGS, 4, b"\x02\x02\x02t\xff\xff\xff\xff\x0f"),  # nested: configuration_keys
], ids=["top-level-compact", "top-level-classic", "nested"])
def test_an_array_count_beyond_the_body_is_refused_before_the_native_reader(api_key, version, body):
    """kio's native reader allocates a count before reading it: ~2**32 elements aborted the
    process (a failed 68 GB allocation), so a count beyond the bytes left never reaches it."""
    with pytest.raises(ProtocolError, match="elements in"):
        messages.decode_request(api_key, version, body)
