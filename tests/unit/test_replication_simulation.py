"""A seeded simulation of one partition on three replicas, driving the pure rules of
broker/replication (style.md §12): one seed -> a heap of (time, seq, action), a fake
clock, invariants after every event, the seed printed on failure.

Logs are lists of (epoch, record id); the offset is the index. A controller (global here)
elects leaders from the ISR with an epoch bump and applies AlterPartition proposals.
`truncate_by="epoch"` uses broker.replication.truncation; `truncate_by="hw"` is the
pre-KIP-101 rule (cut the log to the local HW), kept to show the two classic failures.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

import pytest

from broker.log.leader_epoch_cache import LeaderEpochCache
from broker.replication.high_watermark import (
    FollowerState,
    follower_high_watermark,
    high_watermark,
    on_follower_fetch,
    reset_follower_state,
)
from broker.replication.isr_policy import isr_to_shrink, replicas_to_expand
from broker.replication.truncation import (
    AskLeader,
    TruncateFully,
    TruncationStep,
    end_offset_for,
    on_epoch_end_offset,
    start_truncation,
)

REPLICAS = (0, 1, 2)
LAG_MS = 400
MAX_FETCH = 3
EVENTS_PER_SEED = 400
Entry = tuple[int, int]  # (epoch, record id)


class Violation(AssertionError):
    pass


@dataclass
class Replica:
    id: int
    log: list[Entry] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=lambda: LeaderEpochCache(None))
    hw: int = 0
    alive: bool = True
    step: TruncationStep | None = None  # follower: truncation still to finish
    states: dict[int, FollowerState] = field(default_factory=dict)  # leader: soft state

    def truncate(self, offset: int) -> None:
        del self.log[offset:]
        self.cache.truncate_from_end(offset)
        self.hw = min(self.hw, offset)

    def append(self, entries: list[Entry]) -> None:
        for epoch, record in entries:
            self.cache.assign(epoch, len(self.log))
            self.log.append((epoch, record))


class Cluster:
    def __init__(self, truncate_by: str = "epoch") -> None:
        self.truncate_by = truncate_by
        self.replicas = {r: Replica(r) for r in REPLICAS}
        self.leader: int | None = None
        self.epoch = -1
        self.isr: tuple[int, ...] = REPLICAS
        self.now = 0
        self.next_record = 0
        self.committed: list[Entry] = []
        self.hw_seen: dict[tuple[int, int], int] = {}
        self.elect(0)

    # ---- controller ------------------------------------------------------------------

    def elect(self, new_leader: int | None) -> None:
        if new_leader is not None and new_leader not in self.isr:
            raise Violation(f"unclean election of {new_leader} (ISR {self.isr})")
        self.leader = new_leader
        self.epoch += 1
        for r in self.replicas.values():
            if r.alive:
                self.become(r)

    def become(self, r: Replica) -> None:
        r.states.clear()
        if r.id == self.leader:
            r.step = None
            r.cache.assign(self.epoch, len(r.log))
            r.states.update({f: reset_follower_state(now_ms=self.now, in_isr=f in self.isr)
                             for f in REPLICAS if f != r.id})
            if r.log[:len(self.committed)] != self.committed:
                raise Violation(f"new leader {r.id} lacks committed entries: "
                                f"{r.log} vs {self.committed}")
        elif self.truncate_by == "epoch":
            r.step = start_truncation(r.cache.entries, len(r.log))
        else:
            r.truncate(r.hw)  # pre-KIP-101: trust the local high watermark
            r.step = None

    def alter_isr(self, proposed: tuple[int, ...] | None) -> None:
        if proposed is not None and proposed:
            self.isr = proposed
            self.update_hw()

    def crash(self, rid: int) -> None:
        r = self.replicas[rid]
        if not r.alive:
            return
        r.alive, r.step = False, None
        r.states.clear()
        if len(self.isr) > 1 and rid in self.isr:  # fenced: out of the ISR (not the last)
            self.isr = tuple(i for i in self.isr if i != rid)
        if rid == self.leader:
            alive = [i for i in self.isr if self.replicas[i].alive]
            self.elect(alive[0] if alive else None)
        else:
            self.update_hw()

    def bounce(self, rid: int) -> None:
        """A quick process restart the controller never noticed (not fenced): the log
        and the HW checkpoint survive, the soft state does not."""
        r = self.replicas[rid]
        if r.alive and rid != self.leader:
            self.become(r)

    def restart(self, rid: int) -> None:
        r = self.replicas[rid]
        if r.alive:
            return
        r.alive = True
        if self.leader is None and rid in self.isr:
            self.elect(rid)
        else:
            self.become(r)

    # ---- leader ----------------------------------------------------------------------

    def produce(self) -> None:
        if self.leader is None:
            return
        self.next_record += 1
        self.replicas[self.leader].append([(self.epoch, self.next_record)])
        self.update_hw()

    def update_hw(self) -> None:
        if self.leader is None:
            return
        leader = self.replicas[self.leader]
        leos = {f: s.log_end_offset for f, s in leader.states.items()}
        start = leader.cache.entries[-1].start_offset
        leader.hw = high_watermark(leader=leader.id, leader_leo=len(leader.log), isr=self.isr,
                                   follower_leos=leos, current_hw=leader.hw,
                                   leader_epoch_start_offset=start).offset

    def fetch(self, rid: int) -> None:
        r = self.replicas[rid]
        if self.leader is None or rid == self.leader or not r.alive:
            return
        leader = self.replicas[self.leader]
        if r.step is not None:  # one OffsetForLeaderEpoch round trip per event
            if isinstance(r.step, AskLeader):
                if r.step.truncate_to is not None:
                    r.truncate(r.step.truncate_to)
                answer = end_offset_for(leader.cache.entries, r.step.epoch, len(leader.log))
                r.step = on_epoch_end_offset(r.cache.entries, len(r.log),
                                             asked_epoch=r.step.epoch, answer=answer)
            else:
                r.truncate(0 if isinstance(r.step, TruncateFully) else r.step.offset)
                r.step = None
            return
        offset = len(r.log)
        if offset > len(leader.log):
            raise Violation(f"follower {rid} LEO {offset} past leader LEO {len(leader.log)} "
                            "(its log diverged)")
        leader.states[rid] = on_follower_fetch(leader.states[rid], fetch_offset=offset,
                                               leader_leo=len(leader.log), now_ms=self.now)
        start = leader.cache.entries[-1].start_offset
        self.alter_isr(replicas_to_expand(REPLICAS, self.isr, leader.states, leader.hw, start))
        self.update_hw()
        r.append(leader.log[offset:offset + MAX_FETCH])
        r.hw = follower_high_watermark(leader_high_watermark=leader.hw,
                                       log_end_offset=len(r.log))

    def check_isr(self) -> None:
        if self.leader is not None:
            leader = self.replicas[self.leader]
            self.alter_isr(isr_to_shrink(self.isr, leader.id, leader.states, self.now,
                                         leader_leo=len(leader.log),
                                         replica_lag_time_max_ms=LAG_MS))

    # ---- invariants ------------------------------------------------------------------

    def check(self) -> None:
        if self.leader is None:
            return
        leader = self.replicas[self.leader]
        key = (leader.id, self.epoch)
        if leader.hw < self.hw_seen.get(key, 0):
            raise Violation(f"HW of leader {key} went back to {leader.hw}")
        self.hw_seen[key] = leader.hw
        if leader.log[:len(self.committed)] != self.committed:
            raise Violation(f"leader {leader.id} lost or changed committed entries: "
                            f"{leader.log} vs {self.committed}")
        self.committed.extend(leader.log[len(self.committed):leader.hw])
        for rid in self.isr:
            log = self.replicas[rid].log
            upto = min(len(log), leader.hw)
            if log[:upto] != leader.log[:upto]:
                raise Violation(f"ISR member {rid} disagrees below HW {leader.hw}: {log} vs "
                                f"leader {leader.id} {leader.log}")


def simulate(seed: int) -> Cluster:
    rng = random.Random(seed)
    cluster = Cluster()
    heap: list[tuple[int, int, str, int]] = []
    seq = 0

    def schedule(delay: int, action: str, arg: int = -1) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (cluster.now + delay, seq, action, arg))

    for rid in REPLICAS:
        schedule(rng.randint(1, 20), "fetch", rid)
    schedule(rng.randint(1, 10), "produce")
    schedule(100, "isr")
    schedule(rng.randint(20, 150), "chaos")
    for _ in range(EVENTS_PER_SEED):  # bounded run: a fixed number of events per seed
        cluster.now, _, action, arg = heapq.heappop(heap)
        if action == "fetch":
            cluster.fetch(arg)
            schedule(rng.randint(1, 40), "fetch", arg)
        elif action == "produce":
            cluster.produce()
            schedule(rng.randint(1, 15), "produce")
        elif action == "isr":
            cluster.check_isr()
            schedule(100, "isr")
        elif action == "chaos":
            chaos(cluster, rng)
            schedule(rng.randint(20, 150), "chaos")
        cluster.check()
    return cluster


def chaos(cluster: Cluster, rng: random.Random) -> None:
    choice = rng.choice(("crash", "restart", "restart", "bounce", "move"))
    rid = rng.choice(REPLICAS)
    if choice == "crash":
        cluster.crash(rid)
    elif choice == "restart":
        cluster.restart(rid)
    elif choice == "bounce":
        cluster.bounce(rid)
    else:  # leader change with an epoch bump (preferred leader / controlled shutdown)
        alive = [i for i in cluster.isr if cluster.replicas[i].alive and i != cluster.leader]
        if alive and cluster.leader is not None:
            cluster.elect(rng.choice(alive))


@pytest.mark.parametrize("first_seed", range(0, 200, 50))
def test_simulation_keeps_committed_entries(first_seed: int) -> None:
    for seed in range(first_seed, first_seed + 50):
        try:
            cluster = simulate(seed)
        except Violation as e:
            pytest.fail(f"seed {seed}: {e}")
        assert cluster.committed or seed % 50, f"seed {seed}: nothing was ever committed"


def test_simulation_is_deterministic() -> None:
    a, b = simulate(7), simulate(7)
    assert [r.log for r in a.replicas.values()] == [r.log for r in b.replicas.values()]


# ---- Kafka's two classic scenarios (KIP-101) ---------------------------------------------

def two_replicas(truncate_by: str) -> Cluster:
    """A leads, B follows, C is gone (crashed and out of the ISR)."""
    cluster = Cluster(truncate_by)
    cluster.crash(2)
    return cluster


def scenario_data_loss(truncate_by: str, fetches_after_bounce: int = 0) -> Cluster:
    """A and B hold m1, m2 and the HW is 2 on A, but B's HW is still 1 (the fetch that
    would carry HW 2 has not returned). B restarts, then A dies: B leads."""
    c = two_replicas(truncate_by)
    a, b = c.replicas[0], c.replicas[1]
    c.produce(); c.fetch(1); c.fetch(1)      # m1 on both, HW 1 everywhere
    c.produce(); c.fetch(1)                  # m2 on B; A learns B's LEO only next fetch
    c.fetch(1)                                # A: HW 2; B learned HW 2? force it stale:
    b.hw = 1
    c.check()
    assert a.hw == 2 and len(c.committed) == 2
    c.bounce(1)                               # B restarts as follower, still in the ISR
    for _ in range(fetches_after_bounce):    # epoch: OffsetForLeaderEpoch, then truncate
        c.fetch(1)
    c.crash(0)                                # A dies, B is elected from the ISR
    c.check()
    return c


def scenario_divergence(truncate_by: str) -> Cluster:
    """A has m1, m2 (HW 2 with ISR {A}); B has only m1 (HW 1). Both die; B comes back
    first and leads (clean here: B still in the ISR from the controller's view, as in
    KIP-101's power failure), writes m3 at offset 1; then A returns as a follower."""
    c = two_replicas(truncate_by)
    a, b = c.replicas[0], c.replicas[1]
    c.produce(); c.fetch(1); c.fetch(1)      # m1 on both, HW 1
    c.produce(); c.fetch(1)                  # m2 reaches B ...
    b.truncate(1)                             # ... and is lost unflushed in the outage
    a.hw = 2                                  # A's HW reached 2 before the outage
    c.isr = (0, 1)
    a.alive = b.alive = False
    c.leader = None
    c.restart(1)                              # B is elected, epoch 1
    c.produce()                               # m3 at offset 1 in B's new epoch
    c.isr = (1,)                              # A is still down: HW 2 on B
    c.update_hw()
    c.restart(0)                              # A follows B
    for _ in range(3):
        c.fetch(0)
    return c


def test_truncating_by_hw_loses_committed_data() -> None:
    with pytest.raises(Violation, match="lacks committed entries"):
        scenario_data_loss("hw")


@pytest.mark.parametrize("fetches_after_bounce", [0, 1, 2])
def test_truncating_by_epoch_keeps_committed_data(fetches_after_bounce: int) -> None:
    c = scenario_data_loss("epoch", fetches_after_bounce)
    assert c.leader == 1 and c.replicas[1].log == c.committed == [(0, 1), (0, 2)]


def test_truncating_by_hw_lets_logs_diverge() -> None:
    c = scenario_divergence("hw")
    a, b = c.replicas[0], c.replicas[1]
    assert len(a.log) == len(b.log) == 2 and a.log != b.log   # same HW, different offset 1


def test_truncating_by_epoch_converges() -> None:
    c = scenario_divergence("epoch")
    assert c.replicas[0].log == c.replicas[1].log == [(0, 1), (1, 3)]
