"""bench/produce_consume.py's harness for goal 3 of issue 35: what it counts and how it summarises.

- c_client counts the requests librdkafka sent from its debug=protocol lines (a stand-in loadgen
  checks the config it is handed: the caller's LOADGEN_CONFIG lines kept, debug=protocol added);
- the rounds: a (peer, phase)'s JSON row is the median of its rounds, each round kept;
  the ratio summary is median [min-max]; the floors pool every sample of every round;
- cpu_pinning pins a thread and restores it, and pins every thread of another process;
- loopback_floors' sendfile sender returns every sample, sorted, and the median's row.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the benches are scripts: their modules import each other by name
import c_client  # noqa: E402
import cpu_pinning  # noqa: E402
import loopback_floors  # noqa: E402

produce_consume = pytest.importorskip("produce_consume")

STDERR = textwrap.dedent("""\
    %7|1796053143.836|SEND|rdkafka#producer-1| [thrd:b/bootstrap]: b/bootstrap: Sent ApiVersionRequest (v3, 41 bytes @ 0, CorrId 1)
    %7|1796053143.844|RECV|rdkafka#producer-1| [thrd:b/bootstrap]: b/bootstrap: Received ApiVersionResponse (v3, 635 bytes, CorrId 1, rtt 7.49ms)
    %7|1796053143.861|SEND|rdkafka#producer-1| [thrd:b/2]: b/2: Sent ProduceRequest (v10, 123681 bytes @ 0, CorrId 2)
    %7|1796053143.862|SEND|rdkafka#producer-1| [thrd:b/2]: b/2: Sent ProduceRequest (v10, 1000 bytes @ 0, CorrId 3)
    %7|1796053143.870|RECV|rdkafka#producer-1| [thrd:b/2]: b/2: Received ProduceResponse (v10, 60 bytes, CorrId 2, rtt 1.00ms)
    """)


def fake_loadgen(tmp_path: Path) -> Path:
    """A stand-in for bench/.build/loadgen: copies the config it was given to `config.seen`,
    prints librdkafka's debug lines on stderr and a produce's result on stdout."""
    (tmp_path / "stderr.txt").write_text(STDERR)
    script = tmp_path / "loadgen"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ -n "$LOADGEN_CONFIG" ]; then cp "$LOADGEN_CONFIG" {tmp_path}/config.seen; fi
        cat {tmp_path}/stderr.txt >&2
        echo '{json.dumps({"records": 10, "seconds": 0.5, "payload_bytes": 1000})}'
        """))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_counts_the_requests_librdkafka_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "given.conf"
    given.write_text("socket.nagle.disable=true")
    monkeypatch.setenv("LOADGEN_CONFIG", str(given))
    result = c_client.produce(fake_loadgen(tmp_path), "b:1", "t", records=10, value_bytes=100, partitions=6,
                              acks="1", linger_ms=5, count_requests=True)
    assert result.requests == {"Produce": 2, "ApiVersion": 1}
    assert result.request_bytes["Produce"] == 124681
    assert (tmp_path / "config.seen").read_text().split() == ["socket.nagle.disable=true", "debug=protocol"]


def test_counts_nothing_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOADGEN_CONFIG", raising=False)
    result = c_client.consume(fake_loadgen(tmp_path), "b:1", "t", records=10, partitions=1)
    assert not result.requests
    assert not (tmp_path / "config.seen").exists()


def row(peer: str, phase: str, round_: int, wall_s: float, cpu_s: float, requests: int | None = None,
        samples: tuple[float, ...] = ()) -> object:
    return produce_consume.Row(peer, phase, 1000, 100_000, wall_s, cpu_s, None, requests=requests,
                               round=round_, samples_s_per_gb=samples)


def test_json_row_is_the_median_of_the_rounds(tmp_path: Path) -> None:
    rows = [row("tidelog", "produce acks=1   P=6", n, wall, cpu, req)
            for n, wall, cpu, req in ((1, 1.0, 0.3, 10), (2, 4.0, 0.1, 40), (3, 2.0, 0.2, 20))]
    out = tmp_path / "rows.json"
    produce_consume.write_json(out, rows)
    (only,) = json.loads(out.read_text())
    assert (only["wall_s"], only["broker_cpu_s"], only["requests"], only["round"]) == (2.0, 0.2, 20, 0)
    assert only["records_per_s"] == 500.0 and only["records_per_request"] == 50.0
    assert [r["round"] for r in only["rounds"]] == [1, 2, 3]


@pytest.mark.parametrize(("values", "unit", "expected"), [
    ([2.0, None, 1.0, 4.0], "x", "2.00x [1.00-4.00]"),
    ([1.5], "", "1.50"),
    ([None], "", "-"),
])
def test_spread_is_median_min_max(values: list[float | None], unit: str, expected: str) -> None:
    assert produce_consume.spread(values, ".2f", unit) == expected


def test_floors_pool_every_sample_of_every_round() -> None:
    rows = [row("raw", "sendfile sender", 1, 1.0, 0.01, samples=(0.05, 0.06, 0.30)),
            row("raw", "sendfile sender", 2, 1.0, 0.01, samples=(0.04, 0.07))]
    raw = produce_consume.by_round(rows, "raw")
    assert produce_consume.pooled(raw, "sendfile sender") == 0.06
    assert produce_consume.pooled(raw, "file write") is None


def test_pinned_sets_and_restores_this_threads_cpus() -> None:
    before = os.sched_getaffinity(0)
    one = frozenset([min(before)])
    with cpu_pinning.pinned(one):
        assert os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before


def test_pin_process_pins_every_thread() -> None:
    one = frozenset([max(os.sched_getaffinity(0))])
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(2)]\n"
                              "print(flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # its threads are started
        assert cpu_pinning.pin_process(child.pid, one) == 3
        assert cpu_pinning.process_cpus(child.pid) == str(min(one))
    finally:
        child.kill()
        child.wait()


def test_sendfile_sender_keeps_every_sample(tmp_path: Path) -> None:
    floor = loopback_floors.sendfile_sender(tmp_path, 4 * loopback_floors.CHUNK, samples=3, plan=None)
    assert floor.payload_bytes == 4 * loopback_floors.CHUNK
    assert len(floor.samples_s_per_gb) == 3 and list(floor.samples_s_per_gb) == sorted(floor.samples_s_per_gb)
    assert floor.cpu_s / (floor.payload_bytes / loopback_floors.GB) == pytest.approx(floor.samples_s_per_gb[1])
    assert not list(tmp_path.iterdir())  # the file is removed


def test_idempotence_set_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the loadgen applies LOADGEN_CONFIG after its defaults, so a setting here overrides
    # its idempotent-when-acks=all default
    monkeypatch.delenv("LOADGEN_CONFIG", raising=False)
    binary = fake_loadgen(tmp_path)
    c_client.produce(binary, "b:1", "t", records=10, value_bytes=100, partitions=1, acks="all", linger_ms=0)
    assert not (tmp_path / "config.seen").exists()
    c_client.produce(binary, "b:1", "t", records=10, value_bytes=100, partitions=1, acks="all", linger_ms=0,
                     idempotent=False, count_requests=True)
    assert (tmp_path / "config.seen").read_text().split() == ["enable.idempotence=false", "debug=protocol"]
