"""What the pytest plugin costs a test suite, beside a plain `tidelog up --detach`.

    python bench/testing_overhead.py [--runs 3] [--tests 20]

For each cluster shape (3 controllers + 3 brokers, the default; one combined node) it runs a
generated suite in a fresh pytest process and reports, as medians over the runs:

  session start -> first test   from launching `python -m pytest` to the first test body
  cluster READY                 the tidelog_cluster fixture's setup (Cluster.startup_seconds)
  tidelog_topic overhead        setup + teardown of a test that makes one 3-partition topic,
                                minus those of a test that only uses the cluster
  session teardown              the last test's teardown (the cluster stopped, its dir removed)

and beside them the wall time of `tidelog up --detach` (READY printed) and `tidelog down` for the
same shape on free ports. Then, for both shapes, where start-up time goes, from the node logs:
interpreter and imports (spawn -> the node's quorum and listeners up), the quorum's first election,
broker registration, unfencing, and READY; and what each node process imports before it serves
(`python -X importtime`, cumulative seconds per top-level module, on an idle interpreter).

    python bench/testing_overhead.py --start-only [--runs 5]   # the start-up figures alone (~1 min)

Numbers for the lead, never a timed assertion in a test. Goals (issue 33): one combined node
READY in <= 0.5 s, 3 controllers + 3 brokers in <= 2 s, on the shared 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from localcluster.launcher import free_ports

SHAPES = {"3c+3b": "tidelog_brokers = 3\n", "1x": "tidelog_brokers = 1\ntidelog_combined = true\n"}
UP_ARGS = {"3c+3b": ["--controllers", "3", "--brokers", "3"], "1x": ["--combined", "--controllers", "1"]}

CONFTEST = """
import json, os, time

def pytest_runtest_logreport(report):
    with open(os.environ["BENCH_OUT"], "a") as out:
        out.write(json.dumps({"test": report.nodeid.split("::")[-1], "when": report.when,
                              "duration": report.duration, "outcome": report.outcome}) + "\\n")
"""


def suite(tests: int) -> str:
    body = ["import os, time, json", "",
            "def test_0_first(tidelog_cluster):",
            "    with open(os.environ['BENCH_OUT'], 'a') as out:",
            ("        out.write(json.dumps({'first_test_at': time.time(),"
             " 'ready_s': tidelog_cluster.startup_seconds}) + '\\n')"), ""]
    for i in range(tests):
        body += [f"def test_topic_{i:03d}(tidelog_topic):", "    tidelog_topic(partitions=3)", "",
                 f"def test_plain_{i:03d}(tidelog_cluster):", "    pass", ""]
    return "\n".join(body)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def run_suite(shape: str, tests: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as scratch:
        root = Path(scratch)
        (root / "pytest.ini").write_text("[pytest]\n" + SHAPES[shape])
        (root / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        (root / "test_suite.py").write_text(suite(tests))
        out = root / "out.jsonl"
        launched = time.time()
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tidelog.testing.plugin", "-q",
                               "-p", "no:cacheprovider", "-p", "no:randomly"], cwd=root, env={**env(), "BENCH_OUT": str(out)},
                              capture_output=True, timeout=600, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the suite failed:\n{done.stdout.decode()[-3000:]}")
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    first = next(r for r in rows if "first_test_at" in r)
    phases: dict[str, dict[str, float]] = {}
    for r in rows:
        if "when" in r:
            phases.setdefault(r["test"], {})[r["when"]] = r["duration"]
    around = {name: p.get("setup", 0) + p.get("teardown", 0) for name, p in phases.items()}
    topic = statistics.median(v for k, v in around.items() if k.startswith("test_topic_"))
    plain = statistics.median(v for k, v in around.items() if k.startswith("test_plain_"))
    last = [r for r in rows if r.get("when") == "teardown"][-1]  # the session fixture ends in it
    return {"session start -> first test": first["first_test_at"] - launched, "cluster READY": first["ready_s"],
            "tidelog_topic overhead": topic - plain, "plain test overhead": plain,
            "session teardown": last["duration"] - plain}


def run_up(shape: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-up-") as scratch:
        hosts = [f"127.0.0.{i}" for i in range(1, 7)]
        raft, admin, kafka, metrics = free_ports(hosts, 4)
        data = Path(scratch) / "data"
        command = [sys.executable, "-m", "tidelog", "up", "--detach", "--data-dir", str(data), *UP_ARGS[shape],
                   "--raft-port", str(raft), "--admin-port", str(admin), "--kafka-port", str(kafka),
                   "--metrics-port", str(metrics)]
        started = time.monotonic()
        up = subprocess.run(command, env=env(), capture_output=True, timeout=120, check=False)
        ready = time.monotonic() - started
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "tidelog", "down", "--data-dir", str(data)], env=env(),
                       capture_output=True, timeout=120, check=False)
        down = time.monotonic() - started
        if up.returncode != 0:
            raise SystemExit(f"tidelog up failed:\n{up.stdout.decode()}{up.stderr.decode()}")
    return {"tidelog up --detach": ready, "tidelog down": down}


STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
MILESTONES = {"first log line (interpreter up)": "", "nodes started (imports done)": " started: ",
              "active controller elected": "Became active controller",
              "broker registered": "registered with broker epoch", "broker unfenced": "is unfenced"}
# each shape as nodes spawned as processes (what `tidelog up` does) and forked from a warm zygote
# (Cluster(fast_start=True), what the pytest plugin does: tidelog.testing.zygote)
START_SHAPES: dict[str, dict[str, object]] = {
    "1x": {"brokers": 1, "combined": True}, "1x forked": {"brokers": 1, "combined": True, "fast_start": True},
    "3c+3b": {"brokers": 3}, "3c+3b forked": {"brokers": 3, "fast_start": True}}
# what each node command imports by the time it serves (combined_node imports the other two as it runs)
NODE_MODULES = {"controller": "quorum.node", "broker": "broker.node",
                "combined": "tidelog.combined_node, quorum.node, broker.node"}
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$")


def start_breakdown(shape: str) -> dict[str, float]:
    """Seconds from Cluster.start() to each milestone (the last node to reach it) and to READY."""
    from tidelog.testing import Cluster

    began = time.time()
    with Cluster(**START_SHAPES[shape]) as cluster:  # type: ignore[arg-type]  # the shapes' keywords
        ready = time.time() - began
        reached: dict[str, float] = {}
        for node in cluster.local.nodes:
            firsts: dict[str, float] = {}
            for line in node.spec.log_path.read_text().splitlines():
                stamp = STAMP.match(line)
                if stamp is None:
                    continue
                at = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - began
                for name, needle in MILESTONES.items():
                    if needle in line and name not in firsts:
                        firsts[name] = at
            for name, at in firsts.items():
                reached[name] = max(reached.get(name, 0.0), at)
    return {**{name: reached[name] for name in MILESTONES if name in reached}, "READY (Cluster.start returns)": ready}


def import_costs(role: str, top: int = 8) -> list[tuple[str, float]]:
    """What `python -m tidelog <role>` imports before it runs: the whole and the heaviest modules
    (cumulative seconds), as -X importtime reports them in a fresh interpreter."""
    module = NODE_MODULES[role]
    done = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           f"import sys; sys.modules.setdefault('hypothesis', None); import tidelog.cli, {module}"],
                          env=env(), capture_output=True, timeout=120, check=True)
    rows = [m for m in (IMPORT_LINE.match(line) for line in done.stderr.decode().splitlines()) if m]
    total = sum(int(m.group(1)) for m in rows) / 1e6
    nested = sorted(((m.group(4), int(m.group(2)) / 1e6) for m in rows if len(m.group(3)) in (1, 3)),
                    key=lambda row: -row[1])
    return [(f"all imports of {role}", total), *nested[:top]]


def report_start(runs: int) -> None:
    from tidelog.testing.zygote import Zygote

    began = time.monotonic()
    Zygote.shared().ping()  # the plugin starts it at collection: its start is not the cluster's
    print(f"zygote ready (its imports) in {time.monotonic() - began:.2f} s")
    for shape in START_SHAPES:
        breakdown: dict[str, list[float]] = {}
        for _ in range(runs):
            for key, value in start_breakdown(shape).items():
                breakdown.setdefault(key, []).append(value)
        print(f"{shape} start-up, seconds after Cluster.start() until the last node reached each step "
              f"(median of {runs}):")
        for key, values in breakdown.items():
            print(f"  {key:<32} {statistics.median(values):7.3f} s   ({', '.join(f'{v:.3f}' for v in values)})")
    for role in NODE_MODULES:
        print(f"imports of a {role} process (python -X importtime, cumulative s):")
        for name, seconds in import_costs(role):
            print(f"  {name:<40} {seconds:6.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tests", type=int, default=20, help="tests of each kind per suite")
    parser.add_argument("--start-only", action="store_true", help="only the start-up breakdown and imports")
    args = parser.parse_args()
    if args.start_only:
        report_start(args.runs)
        return 0
    for shape in SHAPES:
        samples: dict[str, list[float]] = {}
        for _ in range(args.runs):
            for key, value in {**run_suite(shape, args.tests), **run_up(shape)}.items():
                samples.setdefault(key, []).append(value)
        print(f"{shape}: median of {args.runs} runs ({args.tests} topic tests + {args.tests} plain tests each)")
        for key, values in samples.items():
            shown = ", ".join(f"{v:.3f}" for v in values)
            print(f"  {key:<30} {statistics.median(values):7.3f} s   ({shown})")
    report_start(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
