"""`tidelog chaos simulate`: many seeds of the deterministic simulator, in parallel processes.

    tidelog chaos simulate --seeds 1000 --jobs 2 --steps 200      # seeds 0..999, prints seeds/s
    tidelog chaos simulate --seed 42 --trace                       # one seed, replayed identically
    tidelog chaos simulate --seeds 300 --power --no-quorum-fsync   # finds what fsync prevents

The shell of `chaos.sim` (which is pure): it spreads seeds over worker processes, times the
run on the wall clock, and for a failing seed prints the seed, the violated invariant and
the shrunk schedule with the last events of its trace. Exits 1 when any seed failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import multiprocessing
import random
import sys
import time
from typing import TextIO

from chaos.sim.schedule import generate
from chaos.sim.seams import BUGS, NO_BUGS, PlantedBugs
from chaos.sim.shrink import shrink
from chaos.sim.world import SimResult, Simulation

CHUNK = 25  # seeds per task: amortises the inter-process round trip


def run_seed(seed: int, steps: int, bugs: PlantedBugs = NO_BUGS, trace: bool = False,
             power: bool = False, quorum_fsync: bool = True) -> SimResult:
    return Simulation(generate(seed, steps, random.Random, bugs=bugs, trace=trace, power=power,
                               quorum_fsync=quorum_fsync), random.Random).run()


def _run_chunk(job: tuple[int, int, int, str | None, bool, bool]) -> list[tuple[int, str | None, int]]:
    first, count, steps, bug, power, quorum_fsync = job
    logging.disable(logging.WARNING)  # the rules log transitions; a worker has no reader for them
    bugs = BUGS[bug] if bug else NO_BUGS
    out = []
    for seed in range(first, first + count):
        result = run_seed(seed, steps, bugs, power=power, quorum_fsync=quorum_fsync)
        out.append((seed, None if result.violation is None else result.violation.invariant, result.events))
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds (default 1000)")
    parser.add_argument("--from", dest="first", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--steps", type=int, default=200, help="events per schedule (default 200)")
    parser.add_argument("--seed", type=int, default=None, help="run this one seed only")
    parser.add_argument("--trace", action="store_true", help="with --seed: print the run's last events")
    parser.add_argument("--plant", choices=sorted(BUGS), default=None,
                        help="run with a planted bug (to see the simulator find it)")
    parser.add_argument("--power", action="store_true",
                        help="schedules include power failures: brokers lose their unflushed log tails, "
                             "controllers (one, a majority, all at once) their unsynced Raft entries, term and vote")
    parser.add_argument("--no-quorum-fsync", dest="quorum_fsync", action="store_false",
                        help="controllers as with controller.quorum.fsync=false: Raft entries and votes are "
                             "acknowledged before they are durable (with --power: committed metadata can be lost)")
    parser.add_argument("--transactions", action="store_true",
                        help="simulate the transaction coordinator's rules instead (chaos/sim/transactions.py)")
    parser.add_argument("--late-end-txn", action="store_true",
                        help="with --transactions: late EndTxn copies too (KIP-890's case: found as torn)")
    parser.set_defaults(run=run)


def _flags(power: bool, quorum_fsync: bool) -> str:
    return f"{' --power' if power else ''}{'' if quorum_fsync else ' --no-quorum-fsync'}"


def _report_failure(seed: int, steps: int, bugs: PlantedBugs, power: bool, quorum_fsync: bool = True,
                    out: TextIO = sys.stdout) -> None:
    options = generate(seed, steps, random.Random, bugs=bugs, power=power, quorum_fsync=quorum_fsync)
    first = Simulation(options, random.Random).run()
    assert first.violation is not None
    print(f"seed {seed} FAILED: {first.violation}", file=out)
    small = shrink(options, first.violation.invariant, random.Random)
    traced = Simulation(dataclasses.replace(small, trace=True), random.Random).run()
    print(f"shrunk to {small.steps} steps and {len(small.faults)} fault(s) of {len(options.faults)}:",
          file=out)
    for fault in small.faults:
        print(f"  {fault}", file=out)
    print("last events of the shrunk run:", file=out)
    for line in traced.trace:
        print(f"  {line}", file=out)
    print(f"replay: tidelog chaos simulate --seed {seed} --steps {steps} --trace{_flags(power, quorum_fsync)}",
          file=out)


def run_transactions(args: argparse.Namespace) -> int:
    """The transaction coordinator's simulation over the seeds, in this process."""
    from chaos.sim.transactions import simulate_transactions

    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    started = time.monotonic()
    failed = [r.violation for r in (simulate_transactions(seed, args.steps, rng_factory=random.Random,
                                                          late_end_txn=args.late_end_txn) for seed in seeds)
              if r.violation is not None]
    elapsed = max(time.monotonic() - started, 1e-9)
    print(f"{len(seeds)} transaction seeds of {args.steps} steps in {elapsed:.1f} s: {len(seeds) / elapsed:.0f} "
          f"seeds/s, {len(failed)} failed")
    for violation in failed[:20]:
        print(f"  {violation}")
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    if args.transactions:
        return run_transactions(args)
    bugs = BUGS[args.plant] if args.plant else NO_BUGS
    logging.disable(logging.WARNING)
    if args.seed is not None:
        result = run_seed(args.seed, args.steps, bugs, trace=args.trace, power=args.power,
                          quorum_fsync=args.quorum_fsync)
        if args.trace:
            print("\n".join(result.trace))
        print(f"seed {args.seed}: {result.events} events, {result.virtual_ms} virtual ms, {result.acked} "
              f"acknowledged writes: {'OK' if result.violation is None else result.violation}")
        return 0 if result.violation is None else 1
    jobs = [(s, min(CHUNK, args.first + args.seeds - s), args.steps, args.plant, args.power, args.quorum_fsync)
            for s in range(args.first, args.first + args.seeds, CHUNK)]
    started = time.monotonic()
    failed: list[tuple[int, str]] = []
    events = 0
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs)) as pool:
        for chunk in pool.imap(_run_chunk, jobs):
            for seed, invariant, count in chunk:
                events += count
                if invariant is not None:
                    failed.append((seed, invariant))
    elapsed = max(time.monotonic() - started, 1e-9)
    print(f"{args.seeds} seeds of {args.steps} steps in {elapsed:.1f} s: {args.seeds / elapsed:.0f} seeds/s "
          f"({args.seeds / elapsed / max(1, args.jobs):.0f} per job), {events} events, {len(failed)} failed")
    if failed:
        seed, invariant = failed[0]
        print(f"failing seeds: {', '.join(f'{s} ({i})' for s, i in failed[:20])}")
        _report_failure(seed, args.steps, bugs, args.power, args.quorum_fsync)
        return 1
    return 0
