"""The transaction coordinator's rules in the seeded simulation (chaos/sim/transactions.py):
hundreds of seeds of crashes, pauses past the timeout and late Produce copies keep every
transaction whole; a late EndTxn (KIP-890's case, which the v1 protocol cannot tell from a
retry) is found as a torn transaction; a seed replays identically."""

from __future__ import annotations

import random
from collections import Counter
from functools import partial

from chaos.sim.transactions import simulate_transactions as simulate

simulate_transactions = partial(simulate, rng_factory=random.Random)

SEEDS = 200
STEPS = 400


def test_seeds_keep_every_transaction_whole_under_the_faults_they_draw() -> None:
    faults: Counter[str] = Counter()
    committed = 0
    for seed in range(SEEDS):
        result = simulate_transactions(seed, STEPS)
        assert result.violation is None, result.violation
        faults.update(result.faults)
        committed += result.committed
    assert committed > SEEDS * 5
    # the seeds exercised what they claim: coordinator crashes, fencing by timeout, late Produces
    assert min(faults[k] for k in ("crash", "pause", "late", "timeout-abort")) > 10, faults


def test_a_late_end_txn_tears_a_later_transaction_and_is_found() -> None:
    found = [r.violation for r in (simulate_transactions(seed, STEPS, late_end_txn=True) for seed in range(100))
             if r.violation is not None]
    assert found, "100 seeds with late EndTxn copies and no torn transaction: the invariant is blind"
    assert all("torn" in v or "aborted, yet" in v or "committed, yet" in v for v in found), found[:3]


def test_a_seed_replays_identically() -> None:
    assert simulate_transactions(42, STEPS) == simulate_transactions(42, STEPS)
    assert simulate_transactions(19, STEPS, late_end_txn=True) == simulate_transactions(19, STEPS, late_end_txn=True)
