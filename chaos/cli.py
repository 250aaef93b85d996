"""`tidelog chaos list|run|report|clean`: pick a scenario, run it, read its report.

    tidelog chaos list
    tidelog chaos run leader-kill-loop --report-dir out/    # or a .toml file; --seed N --duration S
    tidelog chaos report out/                               # re-render out/report.html from out/history.jsonl
    tidelog chaos clean                                     # remove a crashed run's iptables chain and qdisc
    tidelog chaos simulate --seeds 1000 --jobs 2            # the deterministic simulator (chaos.simulate)

`run` exits 0 when every expectation holds, 1 when one fails, 2 when the scenario cannot run
(among them: the chaos extra is not installed, checked before anything starts).
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from chaos.scenarios.generator import generate
from chaos.scenarios.spec import Scenario, ScenarioError, load_scenario, parse_scenario
from common.extras import needs_extra

SHIPPED = Path(__file__).resolve().parent / "scenarios"


def shipped() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SHIPPED.glob("*.toml"))}


def find_scenario(name: str) -> Scenario:
    path = Path(name)
    if path.suffix == ".toml" and path.exists():
        return load_scenario(path)
    if name in shipped():
        return load_scenario(shipped()[name])
    raise ScenarioError(f"no scenario {name!r}: give a .toml file or one of {', '.join(shipped())}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="chaos_command", required=True, metavar="ACTION")
    sub.add_parser("list", help="the shipped scenarios, one line each").set_defaults(run=run_list)
    run = sub.add_parser("run", help="run a scenario on its own cluster and write its report")
    run.add_argument("scenario", help="a shipped scenario's name or a .toml file")
    run.add_argument("--seed", type=int, default=None, help="seed of the random choices (and of a [generator])")
    run.add_argument("--duration", type=float, default=None, help="seconds of workload (default: the scenario's)")
    run.add_argument("--report-dir", type=Path, default=None, help="where history.jsonl and report.html go "
                     "(default: chaos-reports/<scenario>-<time>)")
    run.add_argument("--cluster-dir", type=Path, default=None,
                     help="use the cluster running there (`tidelog up --data-dir DIR`; left running), or start one "
                          "there and keep its files (default: a temporary directory)")
    run.add_argument("--serve", metavar="[HOST:]PORT", default=None,
                     help="serve the web console's live view of this run (faults, acks/s, latency, verdicts) "
                          "on a loopback address while it runs")
    # checked before the scenario starts: a missing client or plotting library fails now, not at the report
    run.set_defaults(run=needs_extra("tidelog chaos run", "chaos", run_run))
    report = sub.add_parser("report", help="re-render a report directory's report.html from its history")
    report.add_argument("dir", type=Path)
    report.set_defaults(run=needs_extra("tidelog chaos report", "chaos", run_report, modules=("matplotlib",)))
    sub.add_parser("clean", help="remove the harness's iptables chain and qdisc left by a crashed run"
                   ).set_defaults(run=run_clean)
    from chaos import simulate  # stdlib and the pure simulator only

    simulate.add_arguments(sub.add_parser(
        "simulate", help="seeded fault schedules over the real controller and replication rules, in one "
                         "process per job (no cluster)"))


def run_list(args: argparse.Namespace) -> int:
    for name, path in shipped().items():
        print(f"{name:34} {load_scenario(path).summary}")
    return 0


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every cleanup, as Ctrl-C does


def verdict_table(verdicts: list) -> str:
    width = max((len(v.expectation) for v in verdicts), default=10)
    return "\n".join(f"  {'PASS' if v.ok else 'FAIL'}  {v.expectation:{width}}  {v.detail}" for v in verdicts)


def power_unavailable(scenario: Scenario) -> str | None:
    """Why the scenario's power faults cannot run here (FUSE missing), or None."""
    from chaos.nemeses.power import power_faults
    from chaos.power import fuse_missing

    return fuse_missing() if power_faults(scenario) else None


def run_run(args: argparse.Namespace) -> int:
    from chaos.engine.runner import RunOptions, run_scenario

    try:
        scenario = find_scenario(args.scenario)
    except (ScenarioError, OSError) as exc:
        print(f"tidelog chaos: {exc}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else (scenario.generator.seed if scenario.generator else 0)
    scenario = generate(scenario, seed)
    missing = power_unavailable(scenario)
    if missing is not None:  # before anything starts, as the extras are checked
        print(f"tidelog chaos run: {scenario.name}: {missing}", file=sys.stderr)
        return 2
    if args.duration is not None:
        scenario = dataclasses.replace(scenario, duration_s=args.duration)
    report_dir = args.report_dir or Path("chaos-reports") / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"chaos: {scenario.name} (seed {seed}): {scenario.summary}", flush=True)
    for fault in scenario.schedule():
        print(f"  {fault.id} at {fault.start_s:5.1f} s for {fault.end_s - fault.start_s:4.1f} s: {fault.describe()}")
    live = None
    if args.serve is not None:  # the console's Chaos page of this run (issue 32)
        from console.chaos_serve import ChaosServer, ServeError, parse_address

        try:
            report_dir.mkdir(parents=True, exist_ok=True)
            live = ChaosServer(report_dir, *parse_address(args.serve)).start()
        except (ServeError, OSError) as exc:
            print(f"tidelog chaos run: {exc}", file=sys.stderr)
            return 2
        print(f"  live view: {live.url}", flush=True)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        outcome = run_scenario(scenario, RunOptions(report_dir=report_dir, seed=seed, cluster_dir=args.cluster_dir))
    finally:
        signal.signal(signal.SIGTERM, previous)
        if live is not None:
            live.stop()
    print(verdict_table(outcome.verdicts))
    for result in outcome.results:  # the latency each client saw (a measurement, not a verdict)
        if result.name == "latency":
            print("\n".join(f"  latency  {line}" for line in result.examples))
    print(f"{'AS PROMISED' if outcome.passed else 'EXPECTATIONS FAILED'}: report {report_dir / 'report.html'}")
    return 0 if outcome.passed else 1


def run_report(args: argparse.Namespace) -> int:
    from chaos.report.html import write_report

    directory: Path = args.dir
    try:
        scenario = parse_scenario((directory / "scenario.toml").read_text(encoding="utf-8"))
        _, verdicts = write_report(directory, scenario)
    except (ScenarioError, OSError) as exc:
        print(f"tidelog chaos report: {exc}", file=sys.stderr)
        return 2
    print(verdict_table(verdicts))
    print(f"report {directory / 'report.html'}")
    return 0 if all(v.ok for v in verdicts) else 1


def run_clean(args: argparse.Namespace) -> int:
    from chaos.nemeses.firewall import clean, iptables_missing

    why = iptables_missing()
    if why is not None:
        print(f"nothing to clean: {why}")
    removed = clean(everything=True)
    from chaos.power.mount import clean_leftovers  # mounts of a run that died before unmounting them

    removed += clean_leftovers()
    from chaos.links.install import clean as clean_links  # link faults' chains, HTB classes on lo

    removed += clean_links(everything=True)
    print("removed: " + (", ".join(removed) if removed else "nothing (no leftovers)"))
    return 0
