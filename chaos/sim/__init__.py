"""Deterministic simulation of the control plane over the real pure rules (issue 15).

One seed -> a fault schedule, a virtual clock and a simulated network; controllers, brokers
and producers are driven by the real code of `metadata/`, `shutdown/`, `quorum/`'s rules and
`broker/replication`, and invariants are checked after every event. No sockets, threads,
asyncio or wall clock: the whole package is pure (tests/unit/test_purity.py). The runner that
spreads seeds over processes is `chaos.simulate` (a shell).
"""

PURE = True  # every module of this package is a pure core: no sockets, threads, clocks or files
