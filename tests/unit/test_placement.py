"""metadata/placement.py: Kafka's classic replica assignment, rack-unaware and rack-aware."""

from __future__ import annotations

import random
from collections import Counter
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.image import BrokerRegistration
from metadata.placement import PlacementError, place_replicas, rack_alternated


class B(NamedTuple):
    broker_id: int
    rack: str | None = None
    fenced: bool = False
    in_controlled_shutdown: bool = False


FIVE = [B(i) for i in range(5)]
RACKED_4 = [B(0, "r1"), B(1, "r1"), B(2, "r2"), B(3, "r2")]
RACKED_6 = [B(0, "r1"), B(1, "r2"), B(2, "r2"), B(3, "r3"), B(4, "r3"), B(5, "r1")]

# (brokers, partitions, replication factor, start partition id, fixed start index or a
#  seed for random.Random, expected assignment) -- every row worked out by hand.
CASES = [
    pytest.param(FIVE, 10, 3, 0, ("fixed", 0), {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        # partition 5 wraps the broker list: the follower shift grows by one
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2)},
        id="unaware-shift-grows-each-round"),
    pytest.param([B(30), B(10), B(20)], 3, 2, 0, ("fixed", 1),
                 {0: (20, 10), 1: (30, 20), 2: (10, 30)}, id="unaware-sorted-by-broker-id"),
    pytest.param(FIVE[:3], 2, 2, 3, ("fixed", 0), {3: (0, 2), 4: (1, 0)},
                 id="unaware-added-partitions-start-at-3"),
    pytest.param([B(1), B(2), B(3), B(4)], 4, 2, 0, ("seed", 1),
                 {0: (2, 3), 1: (3, 4), 2: (4, 1), 3: (1, 2)}, id="unaware-seeded-start-1-shift-0"),
    pytest.param([B(1), B(2, fenced=True), B(3), B(4, in_controlled_shutdown=True)], 2, 2, 0, ("fixed", 0),
                 {0: (1, 3), 1: (3, 1)}, id="fenced-and-shutting-down-brokers-are-skipped"),
    # KRaft's StripedReplicaPlacer: the brokers without a rack are one rack of their own
    pytest.param([B(0, "a"), B(1), B(2, "b")], 3, 2, 0, ("fixed", 0),
                 {0: (1, 0), 1: (0, 2), 2: (2, 1)}, id="unracked-brokers-are-one-rack"),
    pytest.param([B(0, "a"), B(1), B(2, "a"), B(3)], 2, 2, 0, ("fixed", 0),
                 {0: (1, 0), 1: (0, 3)}, id="unracked-pair-and-racked-pair-one-replica-each"),
    pytest.param(RACKED_4, 4, 2, 0, ("fixed", 0),
                 {0: (0, 2), 1: (2, 1), 2: (1, 3), 3: (3, 0)}, id="aware-alternates-racks"),
    # CreatePartitions adds partitions 3 and 4 with the same rack-aware walk (the shift grows at 4)
    pytest.param(RACKED_4, 2, 2, 3, ("fixed", 0), {3: (3, 0), 4: (0, 3)}, id="aware-added-partitions-start-at-3"),
    pytest.param(RACKED_6, 6, 3, 0, ("fixed", 2), {
        0: (3, 2, 0), 1: (5, 4, 1), 2: (2, 0, 3), 3: (4, 1, 5), 4: (0, 3, 2), 5: (1, 5, 4)},
        id="aware-skips-a-used-rack"),
    pytest.param([B(0, "r1"), B(1, "r1"), B(2, "r2")], 1, 3, 0, ("fixed", 0), {0: (0, 2, 1)},
                 id="aware-more-replicas-than-racks"),
    pytest.param([B(7)], 2, 1, 0, ("seed", 5), {0: (7,), 1: (7,)}, id="single-broker"),
]


@pytest.mark.parametrize(("brokers", "partitions", "rf", "start", "start_index", "expected"), CASES)
def test_assignment(brokers, partitions, rf, start, start_index, expected):
    how, value = start_index
    fixed = value if how == "fixed" else None
    result = place_replicas(brokers, partitions=partitions, replication_factor=rf,
                            rng=random.Random(value), start_partition_id=start, fixed_start_index=fixed)
    assert result == expected


def test_rack_alternated_takes_one_broker_per_rack_in_turn():
    racks = {0: "r1", 5: "r1", 1: "r2", 2: "r2", 3: "r3", 4: "r3", 6: "r3"}
    assert rack_alternated(racks) == [0, 1, 3, 5, 2, 4, 6]


def test_accepts_broker_registrations_from_the_image():
    brokers = [BrokerRegistration(i, i, f"inc-{i}", (), None, fenced=False) for i in (1, 2)]
    assert place_replicas(brokers, partitions=1, replication_factor=2, rng=random.Random(0),
                          fixed_start_index=0) == {0: (1, 2)}


ERRORS = [
    (FIVE, 0, 1, "number of partitions must be larger than 0, got 0"),
    (FIVE, -3, 1, "number of partitions must be larger than 0, got -3"),
    (FIVE, 1, 0, "replication factor must be larger than 0, got 0"),
    (FIVE, 1, -1, "replication factor must be larger than 0, got -1"),
    (FIVE, 1, 6, "replication factor 6 is larger than the 5 eligible"),
    ([B(1), B(2, fenced=True), B(3, in_controlled_shutdown=True)], 1, 2,
     "replication factor 2 is larger than the 1 eligible (unfenced, not shutting down) broker(s) [1]"),
    ([], 1, 1, "replication factor 1 is larger than the 0 eligible"),
]


@pytest.mark.parametrize(("brokers", "partitions", "rf", "message"), ERRORS, ids=[e[3] for e in ERRORS])
def test_errors(brokers, partitions, rf, message):
    with pytest.raises(PlacementError) as info:
        place_replicas(brokers, partitions=partitions, replication_factor=rf, rng=random.Random(0))
    assert message in str(info.value)


def test_negative_start_partition_id_is_an_error():
    with pytest.raises(PlacementError, match="start partition id"):
        place_replicas(FIVE, partitions=1, replication_factor=1, rng=random.Random(0), start_partition_id=-1)


@st.composite
def clusters(draw):
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=9, unique=True))
    racked = draw(st.sampled_from(["all", "none", "some"]))
    brokers = []
    for broker_id in ids:
        rack = {"all": draw(st.sampled_from("abc")), "none": None,
                "some": draw(st.sampled_from([None, "a", "b"]))}[racked]
        brokers.append(B(broker_id, rack, fenced=draw(st.booleans()) and draw(st.booleans()),
                         in_controlled_shutdown=draw(st.integers(0, 5)) == 0))
    return brokers


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 40), st.integers(1, 9), st.integers(0, 30), st.integers(0, 2**32))
def test_placement_properties(brokers, partitions, rf, start, seed):
    eligible = {b.broker_id: b for b in brokers if not b.fenced and not b.in_controlled_shutdown}
    kwargs = dict(partitions=partitions, replication_factor=rf, start_partition_id=start)
    if rf > len(eligible):
        with pytest.raises(PlacementError):
            place_replicas(brokers, rng=random.Random(seed), **kwargs)
        return
    result = place_replicas(brokers, rng=random.Random(seed), **kwargs)
    assert result == place_replicas(brokers, rng=random.Random(seed), **kwargs)  # deterministic
    assert list(result) == list(range(start, start + partitions))
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf, "no broker twice in one partition"
        assert set(replicas) <= set(eligible), "only eligible brokers"
    # Leaders (first replicas) go round-robin: spread evenly.
    leaders = Counter(replicas[0] for replicas in result.values())
    counts = [leaders.get(b, 0) for b in eligible]
    assert max(counts) - min(counts) <= 1
    racks = {b.rack for b in eligible.values()}
    if None not in racks:
        for replicas in result.values():
            assert len({eligible[r].rack for r in replicas}) == min(rf, len(racks)), "racks alternate"
    elif racks == {None} and start == 0 and partitions % len(eligible) == 0:
        # Whole rounds of the rack-unaware walk: every broker holds as many replicas. (A mix of
        # racked and unracked brokers is placed rack-aware, the unracked as one rack: 9b68b3d.)
        assert len(set(Counter(r for rs in result.values() for r in rs).values())) == 1
