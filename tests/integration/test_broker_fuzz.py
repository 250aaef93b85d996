"""The broker's Kafka listener under fuzz, over loopback, against a real cluster (3 controllers
+ 1 broker, all processes): 5,000 cases of random bytes, random size prefixes and mutated real
frames for every implemented API/version (bench/fuzz_broker.py, whose 100,000-case run is
`make fuzz`).

Invariants (style.md, "Edges"): the broker does exactly what its own codecs predict for each
case (answers every frame that parses, in order; closes the connection on the first that
does not, with one "Closing connection" log line), a canary client is answered correctly
throughout, the broker is alive afterwards with no traceback in its log, real data still
goes through confluent-kafka, and it stops cleanly. A failure prints its seed: rerun with
`.venv/bin/python bench/fuzz_broker.py --cases 5000 --seed SEED`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from common.protocol.api_keys import ApiKey

pytest.importorskip("confluent_kafka")

CASES = 5_000
SEED = int(os.environ.get("TIDELOG_FUZZ_SEED", "20240611"))
BENCH = Path(__file__).resolve().parents[2] / "bench" / "fuzz_broker.py"


def load_fuzzer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_broker", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module


fuzz_broker = load_fuzzer()


@pytest.mark.timeout(180)
def test_broker_survives_fuzzed_frames(tmp_path: Path) -> None:
    report = fuzz_broker.run(tmp_path / "cluster", cases=CASES, seed=SEED, canary_every=250)
    print(report.summary())
    assert not report.failures, report.summary()
    assert report.cases == CASES, report.summary()
    assert report.canary_rounds >= CASES // 500, report.summary()
    assert report.outcomes["answered"] > 0 and report.outcomes["connection closed (protocol error)"] > 0


REAL_FRAMES = list(fuzz_broker.API_VERSION_PAIRS)


@pytest.mark.parametrize("api_version", REAL_FRAMES, ids=lambda p: f"{p[0].name}-v{p[1]}")
def test_every_real_frame_parses(api_version: tuple[object, int]) -> None:
    """The frames the fuzzer mutates are real: each parses and would be answered."""
    api, version = api_version
    data = fuzz_broker.frame(api, version, 42, fuzz_broker.REAL_BODIES[api_version])
    may_wait = api in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP)  # for a rebalance (issue 12)
    assert fuzz_broker.predict(data) == fuzz_broker.Prediction((42,), "open", may_wait, 0)
