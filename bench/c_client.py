"""The C-speed load generator (bench/loadgen.c, librdkafka) from Python: built on first use, run per phase.

On a 2-core machine a Python client is often what a benchmark measures; librdkafka driven
from C is not (issue 17). The binary is compiled into bench/.build/ against Debian's
librdkafka-dev headers (`make bench-tools` installs them when run as root) and rebuilt when
the source or the library it links changes. Each phase is one process; its CPU time is read
from RUSAGE_CHILDREN around it.

It links and runs the librdkafka bundled in the confluent-kafka wheel (PyPI), found beside the
installed package and reached through an rpath, not Debian's: the Python client then runs the
very same librdkafka, and Debian's 2.0.2 cannot talk to Tansu. librdkafka < 2.2 skips one byte
too few per KIP-482 tagged field (fixed by librdkafka PR #4278); Tansu writes the ApiVersions v3
response's four tagged fields (SupportedFeatures, FinalizedFeaturesEpoch, FinalizedFeatures,
ZkMigrationReady) even when empty, so 2.0.2 misreads them, fails with "ApiVersion read
underflow" and retries forever. librdkafka keeps its C ABI stable, so Debian's older header
is safe for the calls loadgen makes. Without the wheel it links Debian's -lrdkafka and says so.

    binary = build()                      # None (with the reason printed) when it cannot be built
    result = produce(binary, "127.0.0.2:9092", "t", records=1_000_000, value_bytes=100,
                     partitions=1, acks="all", linger_ms=5)
    librdkafka_version(binary)            # "2.16.0 (headers 2.0.2, ...librdkafka-0cb94173.so.1)"

`python bench/c_client.py` builds it and prints which librdkafka it runs (make bench-tools).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

SOURCE: Final = Path(__file__).with_name("loadgen.c")
BINARY: Final = Path(__file__).with_name(".build") / "loadgen"
LINKED: Final = BINARY.with_suffix(".linked")  # the library the binary was linked against
HEADER: Final = Path("/usr/include/librdkafka/rdkafka.h")
PHASE_TIMEOUT_S: Final = 900.0  # one phase; loadgen bounds its own waits below this
# librdkafka's debug=protocol line for each request it sends ("... Sent ProduceRequest (v10, 123681
# bytes @ 0, CorrId 5)"): the client's own count, the same for any broker (Tansu has no /metrics)
SENT_REQUEST: Final = re.compile(r"Sent (\w+)Request \(v\d+, (\d+) bytes")


@dataclass(frozen=True, slots=True)
class LoadResult:
    """One loadgen phase: what it moved, how long it took, what it cost the client."""

    records: int
    seconds: float
    payload_bytes: int
    client_cpu_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    # with count_requests: requests librdkafka sent, and their bytes, by API ("Produce", "Fetch", ...)
    requests: Counter[str] = field(default_factory=Counter)
    request_bytes: Counter[str] = field(default_factory=Counter)


class LoadError(RuntimeError):
    """A phase failed: a record not delivered or not consumed."""


def wheel_librdkafka() -> Path | None:
    """The librdkafka shared object bundled in the installed confluent-kafka wheel, if any."""
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or spec.origin is None:
        return None
    # auditwheel puts bundled libraries in <site-packages>/confluent_kafka.libs/ under a hashed name
    found = sorted(Path(spec.origin).parent.parent.joinpath("confluent_kafka.libs").glob("librdkafka-*.so*"))
    return found[0] if found else None


def link_args(library: Path | None) -> list[str]:
    """The linker arguments for `library` (found again at run time through an rpath), or Debian's."""
    if library is None:
        return ["-lrdkafka"]
    return [str(library), f"-Wl,-rpath,{library.parent}"]


def build() -> Path | None:
    """The loadgen binary, compiled if missing, older than its source or linked to another
    library than the one to use now; None when it cannot be."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not HEADER.exists():
        print("loadgen: needs a C compiler and librdkafka-dev (make bench-tools, or apt-get install "
              "gcc librdkafka-dev); falling back to the Python client", file=sys.stderr)
        return None
    library = wheel_librdkafka()
    if library is None:
        print("loadgen: no librdkafka in the confluent-kafka wheel; linking Debian's, which Tansu "
              "cannot talk to (librdkafka < 2.2)", file=sys.stderr)
    linked = str(library or "-lrdkafka")
    if (BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime and LINKED.exists()
            and LINKED.read_text() == linked):
        return BINARY
    BINARY.parent.mkdir(exist_ok=True)
    done = subprocess.run([compiler, "-O2", "-Wall", "-o", str(BINARY), str(SOURCE), *link_args(library)],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        print(f"loadgen: build failed:\n{done.stderr}", file=sys.stderr)
        return None
    LINKED.write_text(linked)
    return BINARY


def required(bench: str) -> Path:
    """The loadgen binary (`build`) for a bench that cannot run on the Python client: SystemExit
    naming `bench` and the make target that installs the tools when it cannot be built."""
    binary = build()
    if binary is None:
        raise SystemExit(f"{bench} needs the C load generator: make bench-tools")
    return binary


def librdkafka_version(binary: Path) -> str:
    """Which librdkafka `binary` runs on (rd_kafka_version_str()), the headers it was built
    with and the shared object the dynamic loader picked."""
    done = subprocess.run([str(binary), "version"], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise LoadError(f"loadgen version failed (exit {done.returncode}): {done.stderr[-500:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return f"{out['runtime']} (headers {out['headers']}, {out['library']})"


def _run(binary: Path, args: list[str], *, count_requests: bool = False,
         settings: dict[str, str] | None = None) -> LoadResult:
    """One loadgen run. `settings` are librdkafka settings over the loadgen's defaults, and
    `count_requests` adds debug=protocol (LOADGEN_CONFIG's lines kept, these after them): one
    stderr line per request sent and one per response, a few thousand lines in a bulk phase; not
    for a phase of one request per record."""
    extra = dict(settings or {})
    if count_requests:
        extra["debug"] = "protocol"
    with tempfile.TemporaryDirectory(prefix="loadgen-") as work:
        env = None
        if extra:
            config = Path(work) / "config"
            given = os.environ.get("LOADGEN_CONFIG")
            config.write_text((Path(given).read_text() + "\n" if given else "")
                              + "".join(f"{key}={value}\n" for key, value in extra.items()))
            env = {**os.environ, "LOADGEN_CONFIG": str(config)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        # stderr to a file, read after the exit: a pipe would wake this process for every line
        with open(Path(work) / "stderr", "w+") as stderr:
            done = subprocess.run([str(binary), *args], stdout=subprocess.PIPE, stderr=stderr, text=True,
                                  timeout=PHASE_TIMEOUT_S, env=env)
            stderr.seek(0)
            done.stderr = stderr.read()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise LoadError(f"loadgen {args[0]} printed no result (exit {done.returncode}): {done.stderr[-500:]}") from None
    if done.returncode != 0:
        raise LoadError(f"loadgen {args[0]} failed: {out}; {done.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    requests: Counter[str] = Counter()
    request_bytes: Counter[str] = Counter()
    if count_requests:
        for api, size in SENT_REQUEST.findall(done.stderr):
            requests[api] += 1
            request_bytes[api] += int(size)
    return LoadResult(out["records"], out["seconds"], out["payload_bytes"], cpu, out.get("p50_ms"),
                      out.get("p99_ms"), out.get("p999_ms"), out.get("max_ms"), requests, request_bytes)


def produce(binary: Path, bootstrap: str, topic: str, *, records: int, value_bytes: int, partitions: int,
            acks: str, linger_ms: int, rate: int = 0, warmup: int = 0, count_requests: bool = False,
            idempotent: bool | None = None) -> LoadResult:
    """Produce `records` (record i to partition i % partitions); `rate` > 0 paces and times each record.
    `idempotent` None: idempotent exactly when acks=all (Kafka's clients' default)."""
    settings = {} if idempotent is None else {"enable.idempotence": "true" if idempotent else "false"}
    return _run(binary, ["produce", bootstrap, topic, str(records), str(value_bytes), str(partitions), acks,
                         str(linger_ms), str(rate), str(warmup)], count_requests=count_requests, settings=settings)


def consume(binary: Path, bootstrap: str, topic: str, *, records: int, partitions: int,
            group: str | None = None, count_requests: bool = False) -> LoadResult:
    """Read `records` records from offset 0 of every partition (assigned, no group), or as a
    member of consumer group `group` (subscribed, from the earliest offset)."""
    return _run(binary, ["consume", bootstrap, topic, str(records), str(partitions), *([group] if group else [])],
                count_requests=count_requests)


if __name__ == "__main__":
    built = build()
    print(f"loadgen: {built} on librdkafka {librdkafka_version(built)}" if built else "loadgen: not built")
