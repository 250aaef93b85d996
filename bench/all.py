"""`make bench-all`: every figure issue 17 sets a goal for, in one table.

Runs, one after the other and each in its own process (so one cluster's leftovers never
weigh on the next), the benchmarks that measure them, letting each print its own detail:
- bench/produce_consume.py: produce acks=1 / acks=all and consume, 1 and 6 partitions,
  tidelog beside Tansu (when installed) with the C load generator; broker CPU per GB;
- bench/replication.py: acks=all latency at RF=1 and RF=3, and leader SIGKILL / SIGSTOP ->
  first acknowledged acks=all write (default and small sessions);
- bench/loaded_latency.py (issue 35): a 1,000 records/s acks=all canary alone and beside a
  100 MB/s load with a consumer group, and what held the brokers' event loops meanwhile;
- bench/partition_scale.py: 10,000 partitions RF=3 — creation, idle CPU, controlled
  shutdown, restart back into every ISR, broker RSS;
- bench/transactional_produce.py (issue 27): transactional / plain produce, exactly-once / at-least-once
  consume-transform-produce, commit_transaction() latency.
- bench/quorum_fsync.py (issue 28): metadata write p50/p99 and 10,000-partition topic creation
  with controller.quorum.fsync on and off, controller failover (kill -> first accepted write).
Then prints one table: each figure, tidelog's value, the peer's where there is one, the
goal, and the machine's load average when the run started (a shared VM drifts).

    python bench/all.py [--quick]      # --quick: smaller runs, for a smoke check of the harness
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

BENCH: Final = Path(__file__).resolve().parent
BENCH_TIMEOUT_S: Final = 3600.0  # one benchmark; each bounds its own waits well below this


def run(script: str, args: list[str], out: Path) -> Any | None:
    """Run one benchmark (its output goes straight to ours); its JSON results, or None if it failed."""
    print(f"\n######## {script} {' '.join(args)}", flush=True)
    done = subprocess.run([sys.executable, str(BENCH / script), *args, "--json", str(out)],
                          timeout=BENCH_TIMEOUT_S, check=False)
    if done.returncode != 0 or not out.exists():
        print(f"######## {script} failed (exit {done.returncode}); its figures are missing below", flush=True)
        return None
    return json.loads(out.read_text())


Row = tuple[str, str, str, str]  # figure, tidelog, peer, goal


def _num(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{unit}"


def throughput_rows(rows: list[dict[str, Any]]) -> list[Row]:
    ours = {r["phase"]: r for r in rows if r["peer"] == "tidelog"}
    peer = {r["phase"]: r for r in rows if r["peer"] == "tansu"}
    floor = next((r["cpu_s_per_gb"] for r in rows if r["phase"] == "sendfile sender"), None)
    out: list[Row] = []
    for phase, row in ours.items():
        other = peer.get(phase, {})
        if phase.startswith("consume") and floor and row["cpu_s_per_gb"] is not None:
            out.append((f"{phase} broker CPU / sendfile sender's", f"{row['cpu_s_per_gb'] / floor:.1f}x",
                        "-" if other.get("cpu_s_per_gb") is None else f"{other['cpu_s_per_gb'] / floor:.1f}x",
                        "<= 1.5x"))
        if phase.startswith("latency"):
            out.append((f"{phase} RF=1 p50 / p99 / p99.9 ms",
                        f"{_num(row['p50_ms'], '.2f')} / {_num(row['p99_ms'], '.2f')} / {_num(row['p999_ms'], '.2f')}",
                        f"{_num(other.get('p50_ms'), '.2f')} / {_num(other.get('p99_ms'), '.2f')}", ""))
            continue
        goal = "<= 2 s/GB" if phase.startswith("produce") else "<= 0.3 s/GB"
        out.append((f"{phase} records/s", _num(row["records_per_s"], ",.0f"),
                    _num(other.get("records_per_s"), ",.0f"), ">= 2x peer"))
        out.append((f"{phase} broker CPU s/GB", _num(row["cpu_s_per_gb"], ".2f"),
                    _num(other.get("cpu_s_per_gb"), ".2f"), goal))
    return out


def replication_rows(results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for rf, figures in results.get("latency", {}).items():
        out.append((f"latency acks=all 10k/s {rf.upper()} p50 / p99 / p99.9 ms",
                    f"{_num(figures['p50_ms'], '.2f')} / {_num(figures['p99_ms'], '.2f')} / "
                    f"{_num(figures['p999_ms'], '.2f')}", "", "p50 <= 2, p99 <= 10" if rf == "rf3" else ""))
    for key, figures in results.items():
        if key.startswith("kill"):
            goal = "<= 2 s" if key.startswith("kill default") else ""
            out.append((f"leader {key} -> first ack s (median)", _num(figures["total_s"], ".2f"), "", goal))
        elif key.startswith("pause"):
            out.append((f"leader {key} -> fenced s (median)", _num(figures["session_s"], ".2f"), "",
                        "the session (alive: never fenced early)"))
            out.append((f"leader {key} -> first ack s (median)", _num(figures["total_s"], ".2f"), "",
                        "librdkafka's socket.timeout.ms"))
    return out


def loaded_latency_rows(results: dict[str, Any]) -> list[Row]:
    """loaded_latency.py's canary, alone and under load (issue 35, goal 2)."""
    out: list[Row] = []
    for key, label, goal in (("canary_alone", "alone", ""), ("canary_loaded", "loaded", "p99 <= 10, p99.9 <= 25")):
        f = results.get(key, {})
        out.append((f"canary acks=all 1k/s RF=3 {label}: p50 / p99 / p99.9 ms",
                    f"{_num(f.get('p50_ms'), '.2f')} / {_num(f.get('p99_ms'), '.2f')} / {_num(f.get('p999_ms'), '.2f')}",
                    "", goal))
    out.append(("load achieved: produce / consume MB/s", f"{_num(results.get('load_produce_mb_s'), '.1f')} / "
                f"{_num(results.get('load_consume_mb_s'), '.1f')}", "", "100 asked"))
    return out


def scale_rows(results: dict[str, Any]) -> list[Row]:
    """partition_scale.py's figures: {"figures": [[name, value, goal], ...]}."""
    return [(str(name), str(value), "", str(goal)) for name, value, goal in results.get("figures", [])]


def transaction_rows(results: dict[str, Any]) -> list[Row]:
    """transactional_produce.py's figures: {"rows": [...], "fractions": {peer: {...}}}."""
    fractions = results.get("fractions", {})
    ours, peer = fractions.get("tidelog", {}), fractions.get("tansu", {})
    out: list[Row] = [
        ("transactional / plain produce (commit every 100 ms)", _num(ours.get("txn_over_plain"), ".2f"),
         _num(peer.get("txn_over_plain"), ".2f"), ">= 0.8"),
        ("consume-transform-produce exactly-once / at-least-once", _num(ours.get("eos_over_alo"), ".2f"),
         _num(peer.get("eos_over_alo"), ".2f"), ""),
    ]
    by = {(r["peer"], r["phase"]): r for r in results.get("rows", [])}
    for phase in sorted({ph for _, ph in by if ph.startswith(("produce txn", "small txn"))}):
        mine, other = by.get(("tidelog", phase), {}), by.get(("tansu", phase), {})
        out.append((f"{phase}: p50 / p99 ms", f"{_num(mine.get('p50_ms'), '.1f')} / "
                    f"{_num(mine.get('p99_ms'), '.1f')}",
                    f"{_num(other.get('p50_ms'), '.1f')} / {_num(other.get('p99_ms'), '.1f')}", ""))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small runs: checks the harness, not the figures")
    args = parser.parse_args()
    load = os.getloadavg()
    quick = args.quick
    plan: list[tuple[str, list[str], Callable[[Any], list[Row]]]] = [
        ("produce_consume.py", ["--records", "200000" if quick else "2000000", "--seconds", "3" if quick else "20"],
         throughput_rows),
        ("replication.py", ["--skip-throughput", "--kills", "1" if quick else "3", "--pauses", "1",
                            "--seconds", "3" if quick else "20"], replication_rows),
        ("loaded_latency.py", ["--seconds", "3", "--load-mb-s", "10"] if quick else [], loaded_latency_rows),
    ]
    if (BENCH / "partition_scale.py").exists():
        plan.append(("partition_scale.py", ["--partitions", "1000"] if quick else [], scale_rows))
    plan.append(("transactional_produce.py", ["--seconds", "2", "--commits", "20", "--ctp-records", "20000"] if quick else [],
                 transaction_rows))
    plan.append(("quorum_fsync.py", ["--writes", "20", "--partitions", "1000", "--failovers", "1"] if quick else [],
                 scale_rows))
    table: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-all-") as work:
        for i, (script, script_args, rows) in enumerate(plan):
            results = run(script, script_args, Path(work) / f"{i}.json")
            table.extend(rows(results) if results is not None else [(f"{script}: FAILED", "-", "-", "-")])
    width = max(len(r[0]) for r in table)
    print(f"\n==== issue 17 figures ({os.cpu_count()} CPUs; load average at start "
          f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}{'; --quick' if quick else ''})")
    print(f"{'figure':<{width}}  {'tidelog':>26}  {'peer (Tansu)':>22}  goal")
    for figure, ours, peer, goal in table:
        print(f"{figure:<{width}}  {ours:>26}  {peer:>22}  {goal}")


if __name__ == "__main__":
    main()
