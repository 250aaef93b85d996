"""Wire codecs: kio's generated messages against our hand-written codecs, per API.

For each case the same request and response bytes (kafka-python's encoding, ours for the
hot paths, or kio's where kafka-python's layout is awkward to spell) are decoded by both sides and re-encoded from each side's own dataclass; both
sides must give back the same bytes. Each figure is the best of `--rounds` runs of
`--number` calls, in microseconds per call. An API served on kio's messages has no codec of
ours left: `--ours-from REV` loads the hand-written codec it replaced from that git revision
(8f6dba9 holds all of them), so the comparison can be repeated. This is what api_table.py's
choice rests on: a hand-tuned codec stays only where kio costs the broker measurably.
Produce, Fetch and Metadata are those: the broker decodes their requests and encodes their
responses on every produce, every consumer/follower poll and every client's metadata refresh,
and kio's writer takes 3-4 times as long as ours on their responses (ours also hands a
Fetch response's records to the socket as they are, a segment file slice, where kio's would
copy them into bytes first).

    python bench/codecs.py [--rounds 5] [--number 200] [--api METADATA] [--ours-from 8f6dba9]
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import types
import timeit
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol import admin as kp_admin

from common.errors import ErrorCode
from common.protocol import acls, api_versions, messages
from common.protocol import fetch
from common.protocol import metadata as md
from common.protocol import produce
from common.protocol.api_keys import ApiKey
from common.protocol.api_table import API_SPECS
from common.records import build_batch

# Served on kio's messages from v1, with a hand codec for v0 only (kio has no v0 of them).
KIO_FROM_V1 = frozenset({ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS})
TOPICS, PARTITIONS = 10, 6  # design.md's Metadata v12 case: 2,875 bytes


@dataclass(frozen=True)
class Case:
    api_key: ApiKey
    version: int
    request: bytes
    response: bytes
    ours: tuple[str, str]  # our codec's module in common/protocol/ and its function stem


@dataclass(frozen=True)
class OurCodec:
    decode_request: Callable[[memoryview, int], Any]
    encode_response: Callable[[Any, int], list[Any]]
    decode_response: Callable[[memoryview, int], Any]


def our_codec(module: str, stem: str, revision: str | None) -> OurCodec | None:
    """Our hand-written codec: from the tree, or (moved to kio since) from a git revision."""
    if revision is None:
        try:
            loaded: Any = importlib.import_module(f"common.protocol.{module}")
        except ImportError:
            return None
    else:
        loaded = _old_module(module, revision)
        if loaded is None:
            return None
    try:
        return OurCodec(getattr(loaded, f"decode_{stem}_request"), getattr(loaded, f"encode_{stem}_response"),
                        getattr(loaded, f"decode_{stem}_response"))
    except AttributeError:
        return None


MAX_DELETED_IMPORTS = 5  # old modules importing old modules deleted since: a short chain


def _old_module(module: str, revision: str) -> Any:
    """common/protocol/`module`.py as of `revision`; a sibling it imports that is gone from the
    tree (delete_topics imported admin's ZERO_UUID) is loaded from the same revision."""
    try:
        source = subprocess.run(["git", "show", f"{revision}:common/protocol/{module}.py"], check=True,
                                capture_output=True, text=True).stdout
    except subprocess.CalledProcessError:
        return None
    loaded = types.ModuleType(f"old_{module}")
    sys.modules[loaded.__name__] = loaded  # dataclasses look their module up there
    for _ in range(MAX_DELETED_IMPORTS):
        try:
            exec(compile(source, f"{revision}:common/protocol/{module}.py", "exec"), loaded.__dict__)  # noqa: S102
            return loaded
        except ModuleNotFoundError as e:
            sibling = (e.name or "").removeprefix("common.protocol.")
            if e.name == sibling or (gone := _old_module(sibling, revision)) is None:
                raise
            sys.modules[f"common.protocol.{sibling}"] = gone
    return None


def kp(message: Any, version: int, **fields: Any) -> bytes:
    return bytes(message(**fields).encode(version=version))


def metadata_case() -> Case:
    brokers = tuple(md.MetadataResponseBroker(i, f"127.0.0.{i}", 9092, None) for i in (2, 3, 4))
    topics = tuple(md.MetadataResponseTopic(0, f"topic-{t:02d}", False, tuple(
        md.MetadataResponsePartition(0, p, 2 + p % 3, 7, (2, 3, 4), (2, 3, 4)) for p in range(PARTITIONS)),
        topic_id=uuid.UUID(int=t + 1)) for t in range(TOPICS))
    response = md.MetadataResponse(0, brokers, "cluster-id", 2, topics)
    request = md.MetadataRequest(tuple(f"topic-{t:02d}" for t in range(TOPICS)), allow_auto_topic_creation=False)
    return Case(ApiKey.METADATA, 12, b"".join(md.encode_metadata_request(request, 12)),  # type: ignore[arg-type]
                b"".join(md.encode_metadata_response(response, 12)),  # type: ignore[arg-type]
                ("metadata", "metadata"))


def produce_case() -> Case:
    batch = build_batch([(b"k%d" % i, b"v" * 100) for i in range(10)], base_timestamp=1_700_000_000_000)
    request = produce.ProduceRequest(None, -1, 30000, tuple(
        produce.TopicProduceData(f"topic-{t}", tuple(produce.PartitionProduceData(p, batch) for p in range(3)))
        for t in range(3)))
    response = produce.ProduceResponse(tuple(
        produce.TopicProduceResponse(f"topic-{t}", tuple(
            produce.PartitionProduceResponse(p, 0, 1000 * p) for p in range(3))) for t in range(3)), 0)
    return Case(ApiKey.PRODUCE, 9, b"".join(produce.encode_produce_request(request, 9)),  # type: ignore[arg-type]
                b"".join(produce.encode_produce_response(response, 9)),  # type: ignore[arg-type]
                ("produce", "produce"))


def fetch_case() -> Case:
    """A consumer's Fetch v13 (topics by id, as librdkafka 2.x sends) of 3 topics x 3
    partitions, answered with one 10-record batch (~1.2 KB) per partition."""
    batch = build_batch([(b"k%d" % i, b"v" * 100) for i in range(10)], base_timestamp=1_700_000_000_000)
    ids = [uuid.UUID(int=t + 1) for t in range(3)]
    request = fetch.FetchRequest(-1, 500, 1, 52_428_800, fetch.READ_UNCOMMITTED, tuple(
        fetch.FetchTopic("", tuple(fetch.FetchPartition(p, 1000 * p, 1_048_576, current_leader_epoch=7,
                                                        last_fetched_epoch=7) for p in range(3)), topic_id=t)
        for t in ids), session_id=0, session_epoch=-1, rack_id="")
    response = fetch.FetchResponse(0, tuple(fetch.FetchTopicResponse("", tuple(
        fetch.FetchPartitionResponse(p, 0, 1000 * p + 10, batch, 1000 * p + 10, 0, None) for p in range(3)),
        topic_id=t) for t in ids), 0, 0)
    return Case(ApiKey.FETCH, 13, b"".join(fetch.encode_fetch_request(request, 13)),  # type: ignore[arg-type]
                b"".join(fetch.encode_fetch_response(response, 13)),  # type: ignore[arg-type]
                ("fetch", "fetch"))


def admin_cases() -> list[Case]:
    """The low-traffic APIs moved onto kio's messages, from kafka-python's bytes."""
    partitions = [(p, 100 * p) for p in range(6)]
    return [
        Case(ApiKey.DELETE_RECORDS, 2,
             kp(kp_admin.DeleteRecordsRequest, 2, topics=[(f"t{t}", partitions) for t in range(5)], timeout_ms=30000),
             kp(kp_admin.DeleteRecordsResponse, 2, throttle_time_ms=0,
                topics=[(f"t{t}", [(p, o, 0) for p, o in partitions]) for t in range(5)]),
             ("delete_records", "delete_records")),
        Case(ApiKey.DESCRIBE_LOG_DIRS, 4,
             kp(kp_admin.DescribeLogDirsRequest, 4, topics=[(f"t{t}", list(range(6))) for t in range(5)]),
             kp(kp_admin.DescribeLogDirsResponse, 4, throttle_time_ms=0, error_code=0, results=[
                 (0, "/data/a", [(f"t{t}", [(p, 1 << 20, 0, False) for p in range(6)]) for t in range(5)],
                  10 ** 12, 10 ** 11)]), ("describe_log_dirs", "describe_log_dirs")),
        Case(ApiKey.DESCRIBE_PRODUCERS, 0,
             kp(kp_admin.DescribeProducersRequest, 0, topics=[(f"t{t}", list(range(6))) for t in range(5)]),
             kp(kp_admin.DescribeProducersResponse, 0, throttle_time_ms=0, topics=[
                 (f"t{t}", [(p, 0, None, [(1000 + p, 0, 41, 1_700_000_000_000, -1, -1)]) for p in range(6)])
                 for t in range(5)]), ("describe_producers", "describe_producers")),
        Case(ApiKey.ALTER_REPLICA_LOG_DIRS, 2,
             kp(kp_admin.AlterReplicaLogDirsRequest, 2, dirs=[("/data/a", [(f"t{t}", list(range(6))) for t in range(5)])]),
             kp(kp_admin.AlterReplicaLogDirsResponse, 2, throttle_time_ms=0,
                results=[(f"t{t}", [(p, 0) for p in range(6)]) for t in range(5)]), ("-", "-")),
        Case(ApiKey.DESCRIBE_CLUSTER, 1,
             kp(kp_admin.DescribeClusterRequest, 1, include_cluster_authorized_operations=True, endpoint_type=1),
             kp(kp_admin.DescribeClusterResponse, 1, throttle_time_ms=0, error_code=0, error_message=None,
                endpoint_type=1, cluster_id="cluster-id", controller_id=2,
                brokers=[(b, f"127.0.0.{b}", 9092, None) for b in (2, 3, 4)], authorized_operations={5, 7, 8}),
             ("describe_cluster", "describe_cluster")),
        Case(ApiKey.ELECT_LEADERS, 2,
             kp(kp_admin.ElectLeadersRequest, 2, election_type=0,
                topic_partitions=[(f"t{t}", list(range(6))) for t in range(5)], timeout_ms=30000),
             kp(kp_admin.ElectLeadersResponse, 2, throttle_time_ms=0, error_code=0, replica_election_results=[
                 (f"t{t}", [(p, 84, "Leader election not needed for topic partition.") for p in range(6)])
                 for t in range(5)]), ("elect_leaders", "elect_leaders")),
        Case(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
             kp(kp_admin.AlterPartitionReassignmentsRequest, 0, timeout_ms=30000,
                topics=[(f"t{t}", [(p, [2, 3, 4]) for p in range(6)]) for t in range(5)]),
             kp(kp_admin.AlterPartitionReassignmentsResponse, 0, throttle_time_ms=0, error_code=0, error_message=None,
                responses=[(f"t{t}", [(p, 0, None) for p in range(6)]) for t in range(5)]),
             ("reassignments", "alter_partition_reassignments")),
        Case(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
             kp(kp_admin.ListPartitionReassignmentsRequest, 0, timeout_ms=30000, topics=None),
             kp(kp_admin.ListPartitionReassignmentsResponse, 0, throttle_time_ms=0, error_code=0, error_message=None,
                topics=[(f"t{t}", [(p, [2, 3, 4, 5], [5], [2]) for p in range(6)]) for t in range(5)]),
             ("reassignments", "list_partition_reassignments")),
        Case(ApiKey.CREATE_TOPICS, 7,
             kp(kp_admin.CreateTopicsRequest, 7, topics=[(f"t{t}", 6, 3, [], [("retention.ms", "60000")])
                                                          for t in range(10)], timeout_ms=30000, validate_only=False),
             kp(kp_admin.CreateTopicsResponse, 7, throttle_time_ms=0, topics=[
                 (f"t{t}", uuid.UUID(int=t + 1), 0, None, 6, 3, [("retention.ms", "60000", False, 1, False)])
                 for t in range(10)]), ("admin", "create_topics")),
        Case(ApiKey.DELETE_TOPICS, 6,
             kp(kp_admin.DeleteTopicsRequest, 6, topics=[(f"t{t}", None) for t in range(10)], timeout_ms=30000),
             kp(kp_admin.DeleteTopicsResponse, 6, throttle_time_ms=0,
                responses=[(f"t{t}", uuid.UUID(int=t + 1), 0, None) for t in range(10)]),
             ("delete_topics", "delete_topics")),
    ]


def config_cases() -> list[Case]:
    """The config APIs, 5 topics x 10 keys, built from kio's dataclasses (our codec, loaded
    from `--ours-from`, must give back the same bytes)."""
    keys = [f"key.{k}" for k in range(10)]

    def alter(api_key: ApiKey, version: int) -> Case:
        q, r = messages.request_module(api_key, version), messages.response_module(api_key, version)
        incremental = api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        request = getattr(q, "IncrementalAlterConfigsRequest" if incremental else "AlterConfigsRequest")(
            resources=tuple(q.AlterConfigsResource(resource_type=2, resource_name=f"t{t}", configs=tuple(
                messages.build(q.AlterableConfig, name=k, value="1000", config_operation=0) for k in keys))
                for t in range(5)), validate_only=False)
        response = getattr(r, "IncrementalAlterConfigsResponse" if incremental else "AlterConfigsResponse")(
            throttle_time=messages.NO_THROTTLE, responses=tuple(r.AlterConfigsResourceResponse(
                error_code=ErrorCode.NONE, error_message=None, resource_type=2, resource_name=f"t{t}")
                for t in range(5)))
        stem = "incremental_alter_configs" if incremental else "alter_configs"
        return Case(api_key, version, messages.encode(request), messages.encode(response), ("alter_configs", stem))

    q, r = messages.request_module(ApiKey.DESCRIBE_CONFIGS, 4), messages.response_module(ApiKey.DESCRIBE_CONFIGS, 4)
    describe_request = q.DescribeConfigsRequest(resources=tuple(q.DescribeConfigsResource(
        resource_type=2, resource_name=f"t{t}", configuration_keys=None) for t in range(5)),
        include_synonyms=True, include_documentation=False)
    describe_response = r.DescribeConfigsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(
        r.DescribeConfigsResult(error_code=ErrorCode.NONE, error_message=None, resource_type=2,
                                resource_name=f"t{t}", configs=tuple(r.DescribeConfigsResourceResult(
                                    name=k, value="1000", read_only=False, config_source=1, is_sensitive=False,
                                    synonyms=(r.DescribeConfigsSynonym(name=k, value="1000", source=1),
                                              r.DescribeConfigsSynonym(name=f"log.{k}", value="5", source=5)),
                                    config_type=5, documentation=None) for k in keys)) for t in range(5)))
    return [Case(ApiKey.DESCRIBE_CONFIGS, 4, messages.encode(describe_request), messages.encode(describe_response),
                 ("describe_configs", "describe_configs")),
            alter(ApiKey.ALTER_CONFIGS, 2), alter(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)]


def acl_cases() -> list[Case]:
    """The ACL APIs (tidelog answers SECURITY_DISABLED, but a client may send any filter), 20
    bindings, built from kio's dataclasses."""
    bindings = [(2, f"t{t}", f"User:u{t}", "*", 3, 3, 3) for t in range(20)]
    m = messages.response_module(ApiKey.DESCRIBE_ACLS, 3)
    described = m.DescribeAclsResponse(throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE,
                                       error_message=None, resources=tuple(m.DescribeAclsResource(
                                           resource_type=t, resource_name=n, pattern_type=p, acls=(m.AclDescription(
                                               principal=who, host=h, operation=o, permission_type=pt),))
                                           for t, n, who, h, o, pt, p in bindings))
    c = messages.response_module(ApiKey.CREATE_ACLS, 3)
    created = c.CreateAclsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(
        c.AclCreationResult(error_code=ErrorCode.NONE, error_message=None) for _ in bindings))
    return [Case(ApiKey.DESCRIBE_ACLS, 3, messages.encode(acls.describe_request(3, (1, None, None, None, 1, 1, 1))),
                 messages.encode(described), ("acls", "describe_acls")),
            Case(ApiKey.CREATE_ACLS, 3, messages.encode(acls.create_request(3, *bindings)), messages.encode(created),
                 ("acls", "create_acls"))]


def api_versions_case() -> Case:
    """ApiVersions v3, the first request of every connection (KIP-511's client software
    names), answered with every API tidelog serves."""
    return Case(ApiKey.API_VERSIONS, 3,
                messages.encode(api_versions.request(3, "confluent-kafka-python", "2.6.0-rdkafka-2.6.0")),
                messages.encode(api_versions.response(3, ErrorCode.NONE, api_versions.supported_api_versions())),
                ("api_versions", "api_versions"))


def best_us(call: Callable[[], Any], rounds: int, number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=rounds)) / number * 1e6


def measure(case: Case, rounds: int, number: int, revision: str | None) -> dict[str, float | None]:
    request, response = memoryview(case.request), memoryview(case.response)
    kio_response = messages.decode_response(case.api_key, case.version, response)
    assert messages.encode(kio_response) == case.response, f"{case.api_key.name}: kio's bytes differ"
    out: dict[str, float | None] = {
        "kio_decode": best_us(lambda: messages.decode_request(case.api_key, case.version, request), rounds, number),
        "kio_encode": best_us(lambda: messages.encode(kio_response), rounds, number),
        "ours_decode": None, "ours_encode": None,
    }
    on_kio = API_SPECS[case.api_key].generated or case.api_key in KIO_FROM_V1
    ours = our_codec(*case.ours, revision=revision if on_kio else None)
    if ours is not None:
        value = ours.decode_response(response, case.version)
        assert b"".join(ours.encode_response(value, case.version)) == case.response, case.api_key.name
        out["ours_decode"] = best_us(lambda: ours.decode_request(request, case.version), rounds, number)
        out["ours_encode"] = best_us(lambda: ours.encode_response(value, case.version), rounds, number)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--api", help="only this API (ApiKey name)")
    parser.add_argument("--ours-from", metavar="REV",
                        help="git revision to load the hand-written codecs of APIs now on kio's messages from")
    args = parser.parse_args()
    cases = [metadata_case(), produce_case(), fetch_case(), api_versions_case(), *admin_cases(), *config_cases(), *acl_cases()]
    print(f"{'API':28} {'v':>2} {'req B':>6} {'resp B':>6} | {'decode µs kio':>13} {'ours':>7}"
          f" | {'encode µs kio':>13} {'ours':>7}")
    for case in cases:
        if args.api and case.api_key.name != args.api:
            continue
        r = measure(case, args.rounds, args.number, args.ours_from)

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"
        print(f"{case.api_key.name:28} {case.version:>2} {len(case.request):>6} {len(case.response):>6} |"
              f" {fmt(r['kio_decode']):>13} {fmt(r['ours_decode']):>7} | {fmt(r['kio_encode']):>13}"
              f" {fmt(r['ours_encode']):>7}")


if __name__ == "__main__":
    main()
