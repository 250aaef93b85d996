"""Wire codecs: kio's generated messages against our hand-written codecs, per API.

For each case the same request and response bytes (kafka-python's encoding, or ours for the
hot paths) are decoded by both sides and re-encoded from each side's own dataclass; both
sides must give back the same bytes. Each figure is the best of `--rounds` runs of
`--number` calls, in microseconds per call. An API served on kio's messages (no codec of
ours left) shows kio's figures only. This is what api_table.py's choice rests on: a
hand-tuned codec stays only where kio costs the broker measurably.

    python bench/codecs.py [--rounds 5] [--number 200] [--api METADATA]
"""

from __future__ import annotations

import argparse
import importlib
import timeit
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol import admin as kp_admin

from common.protocol import messages
from common.protocol import metadata as md
from common.protocol import produce
from common.protocol.api_keys import ApiKey
from common.protocol.api_table import API_SPECS
from common.records import build_batch

TOPICS, PARTITIONS = 10, 6  # design.md's Metadata v12 case: 2,875 bytes


@dataclass(frozen=True)
class Case:
    api_key: ApiKey
    version: int
    request: bytes
    response: bytes
    # our response decoder, for the value our encoder re-encodes (hand codecs only)
    our_response_decoder: Callable[[memoryview, int], Any] | None = None


def our_decoder(module: str, name: str) -> Callable[[memoryview, int], Any] | None:
    """Our hand-written response decoder while it exists (None once the API moved to kio)."""
    try:
        return getattr(importlib.import_module(f"common.protocol.{module}"), f"decode_{name}_response")  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
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
                md.decode_metadata_response)


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
                produce.decode_produce_response)


def admin_cases() -> list[Case]:
    """The low-traffic APIs moved onto kio's messages, from kafka-python's bytes."""
    partitions = [(p, 100 * p) for p in range(6)]
    return [
        Case(ApiKey.DELETE_RECORDS, 2,
             kp(kp_admin.DeleteRecordsRequest, 2, topics=[(f"t{t}", partitions) for t in range(5)], timeout_ms=30000),
             kp(kp_admin.DeleteRecordsResponse, 2, throttle_time_ms=0,
                topics=[(f"t{t}", [(p, o, 0) for p, o in partitions]) for t in range(5)]),
             our_decoder("delete_records", "delete_records")),
        Case(ApiKey.DESCRIBE_LOG_DIRS, 4,
             kp(kp_admin.DescribeLogDirsRequest, 4, topics=[(f"t{t}", list(range(6))) for t in range(5)]),
             kp(kp_admin.DescribeLogDirsResponse, 4, throttle_time_ms=0, error_code=0, results=[
                 (0, "/data/a", [(f"t{t}", [(p, 1 << 20, 0, False) for p in range(6)]) for t in range(5)],
                  10 ** 12, 10 ** 11)]), our_decoder("describe_log_dirs", "describe_log_dirs")),
        Case(ApiKey.DESCRIBE_PRODUCERS, 0,
             kp(kp_admin.DescribeProducersRequest, 0, topics=[(f"t{t}", list(range(6))) for t in range(5)]),
             kp(kp_admin.DescribeProducersResponse, 0, throttle_time_ms=0, topics=[
                 (f"t{t}", [(p, 0, None, [(1000 + p, 0, 41, 1_700_000_000_000, -1, -1)]) for p in range(6)])
                 for t in range(5)]), our_decoder("describe_producers", "describe_producers")),
        Case(ApiKey.ALTER_REPLICA_LOG_DIRS, 2,
             kp(kp_admin.AlterReplicaLogDirsRequest, 2, dirs=[("/data/a", [(f"t{t}", list(range(6))) for t in range(5)])]),
             kp(kp_admin.AlterReplicaLogDirsResponse, 2, throttle_time_ms=0,
                results=[(f"t{t}", [(p, 0) for p in range(6)]) for t in range(5)])),
    ]


def best_us(call: Callable[[], Any], rounds: int, number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=rounds)) / number * 1e6


def measure(case: Case, rounds: int, number: int) -> dict[str, float | None]:
    request, response = memoryview(case.request), memoryview(case.response)
    kio_response = messages.decode_response(case.api_key, case.version, response)
    assert messages.encode(kio_response) == case.response, f"{case.api_key.name}: kio's bytes differ"
    out: dict[str, float | None] = {
        "kio_decode": best_us(lambda: messages.decode_request(case.api_key, case.version, request), rounds, number),
        "kio_encode": best_us(lambda: messages.encode(kio_response), rounds, number),
        "ours_decode": None, "ours_encode": None,
    }
    spec = API_SPECS[case.api_key]
    if not spec.generated and case.our_response_decoder is not None:
        ours = case.our_response_decoder(response, case.version)
        assert b"".join(spec.codec.encode(ours, case.version)) == case.response, case.api_key.name
        out["ours_decode"] = best_us(lambda: spec.codec.decode(request, case.version), rounds, number)
        out["ours_encode"] = best_us(lambda: spec.codec.encode(ours, case.version), rounds, number)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--api", help="only this API (ApiKey name)")
    args = parser.parse_args()
    cases = [metadata_case(), produce_case(), *admin_cases()]
    print(f"{'API':28} {'v':>2} {'req B':>6} {'resp B':>6} | {'decode µs kio':>13} {'ours':>7}"
          f" | {'encode µs kio':>13} {'ours':>7}")
    for case in cases:
        if args.api and case.api_key.name != args.api:
            continue
        r = measure(case, args.rounds, args.number)

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"
        print(f"{case.api_key.name:28} {case.version:>2} {len(case.request):>6} {len(case.response):>6} |"
              f" {fmt(r['kio_decode']):>13} {fmt(r['ours_decode']):>7} | {fmt(r['kio_encode']):>13}"
              f" {fmt(r['ours_encode']):>7}")


if __name__ == "__main__":
    main()
