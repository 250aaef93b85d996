"""groups/txn_offsets.py and the transactional part of groups/image.py: TxnOffsetCommit's
KIP-447 checks, offsets pending per producer until its marker commits or aborts them,
require_stable's UNSTABLE_OFFSET_COMMIT, and the same image from any split of the records."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.errors import ErrorCode as E
from groups.group import ClassicGroup
from groups.image import GroupsImage
from groups.offsets import CommitPartition, FetchedOffset, expire_offsets, fetch_offsets
from groups.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue
from groups.state import GroupState as S
from groups.txn_offsets import TxnCommitRequest, txn_commit_offsets
from tests.unit.group_helpers import COMPLETING, CONFIG, EMPTY, GEN, NOW, P0, STABLE, STATIC

PID, OTHER = 7, 8


def txn_commit(group: ClassicGroup | None, generation: int = GEN, member: str = "a", instance: str | None = None,
               group_id: str = "g", parts: tuple[CommitPartition, ...] = (P0,)):  # noqa: ANN201
    return txn_commit_offsets(group, TxnCommitRequest(group_id, PID, 0, parts, generation, member, instance),
                              now_ms=NOW, config=CONFIG)


@pytest.mark.parametrize("group, kwargs, expected", [
    (STABLE, {"group_id": ""}, E.INVALID_GROUP_ID),
    (None, {}, E.ILLEGAL_GENERATION),
    (replace(STABLE, state=S.DEAD), {}, E.COORDINATOR_NOT_AVAILABLE),
    (STABLE, {"member": "ghost"}, E.UNKNOWN_MEMBER_ID),
    (STABLE, {"generation": GEN - 1}, E.ILLEGAL_GENERATION),  # KIP-447: a zombie of an older generation
    (STABLE, {"generation": -1}, E.ILLEGAL_GENERATION),  # a member id without its generation
    (STATIC, {"instance": "inst-b"}, E.FENCED_INSTANCE_ID),
    (STATIC, {"instance": "inst-z"}, E.UNKNOWN_MEMBER_ID),
], ids=["empty-id", "unknown-group-with-generation", "dead", "unknown-member", "old-generation",
        "member-without-generation", "fenced-instance", "unknown-instance"])
def test_kip447_checks_store_nothing(group: ClassicGroup | None, kwargs: dict, expected: E) -> None:
    outcome = txn_commit(group, **kwargs)
    assert outcome.records == () and outcome.response == (("orders", 0, expected),)


@pytest.mark.parametrize("group, kwargs", [
    (STABLE, {}),
    (STATIC, {"instance": "inst-a"}),
    (COMPLETING, {"generation": COMPLETING.generation_id}),  # allowed for a transaction (not a plain commit)
    (STABLE, {"generation": -1, "member": ""}),  # v0-v2: no member, any state
    (EMPTY, {"generation": -1, "member": ""}),
    (None, {"generation": -1, "member": ""}),
], ids=["member", "static-member", "completing-rebalance", "v2-live-group", "v2-empty", "v2-unknown-group"])
def test_accepted_commits_write_kafkas_records(group: ClassicGroup | None, kwargs: dict) -> None:
    outcome = txn_commit(group, **kwargs)
    assert outcome.response == (("orders", 0, E.NONE),)
    assert outcome.records == (CoordinatorRecord(OffsetCommitKey("g", "orders", 0),
                                                 OffsetCommitValue(42, "meta", NOW, 3)),)
    assert outcome.group is not None and outcome.group.group_id == "g"


def test_metadata_too_large_fails_alone() -> None:
    big = CommitPartition("orders", 1, 1, -1, "x" * (CONFIG.offset_metadata_max_bytes + 1))
    outcome = txn_commit(STABLE, parts=(P0, big))
    assert outcome.response == (("orders", 0, E.NONE), ("orders", 1, E.OFFSET_METADATA_TOO_LARGE))
    assert len(outcome.records) == 1


# ---- the image: pending offsets per producer, ended by its marker ----------------------

def rec(offset: int | None, partition: int = 0, group: str = "g") -> CoordinatorRecord:
    value = None if offset is None else OffsetCommitValue(offset, "", NOW)
    return CoordinatorRecord(OffsetCommitKey(group, "orders", partition), value)


Step = tuple[str, object]  # ("plain", record) | ("txn", (producer id, record)) | ("end", (producer id, committed))
COMMITTED_5 = [("plain", rec(5))]


def run(steps: list[Step], image: GroupsImage = GroupsImage.EMPTY) -> GroupsImage:
    for kind, arg in steps:
        if kind == "plain":
            image = image.replay(arg, NOW)  # type: ignore[arg-type]
        elif kind == "txn":
            pid, record = arg  # type: ignore[misc]
            image = image.replay(record, NOW, pid)
        else:
            pid, committed = arg  # type: ignore[misc]
            image = image.end_transaction(pid, committed)
    return image


def committed(image: GroupsImage, partition: int = 0) -> int | None:
    value = image.offsets.get("g", {}).get(("orders", partition))
    return None if value is None else value.offset


@pytest.mark.parametrize("steps, offset, pending", [
    (COMMITTED_5 + [("txn", (PID, rec(9)))], 5, {("orders", 0)}),  # pending: not visible
    (COMMITTED_5 + [("txn", (PID, rec(9))), ("end", (PID, True))], 9, set()),
    (COMMITTED_5 + [("txn", (PID, rec(9))), ("end", (PID, False))], 5, set()),
    (COMMITTED_5 + [("txn", (PID, rec(9))), ("end", (OTHER, True))], 5, {("orders", 0)}),  # another's marker
    # a plain commit written after the transactional one wins at commit (Kafka compares offsets)
    ([("txn", (PID, rec(9))), ("plain", rec(12)), ("end", (PID, True))], 12, set()),
    ([("txn", (PID, rec(9))), ("plain", rec(12))], 12, {("orders", 0)}),  # still pending meanwhile
    # ...but one written before it loses
    ([("plain", rec(12)), ("txn", (PID, rec(9))), ("end", (PID, True))], 9, set()),
    # a tombstone removes the committed offset and every pending one of the partition
    (COMMITTED_5 + [("txn", (PID, rec(9))), ("plain", rec(None)), ("end", (PID, True))], None, set()),
    # two producers: each marker ends its own
    ([("txn", (PID, rec(9))), ("txn", (OTHER, rec(3, 1))), ("end", (OTHER, True))], None, {("orders", 0)}),
    ([("txn", (PID, rec(9))), ("end", (PID, True)), ("end", (PID, True))], 9, set()),  # a retried marker
    # two transactions with an offset of the same partition: the one written last wins, whichever commits first
    ([("txn", (PID, rec(9))), ("txn", (OTHER, rec(12))), ("end", (OTHER, True)), ("end", (PID, True))], 12, set()),
    ([("txn", (OTHER, rec(12))), ("txn", (PID, rec(9))), ("end", (OTHER, True)), ("end", (PID, True))], 9, set()),
], ids=["pending", "commit", "abort", "other-producer", "later-plain-wins", "later-plain-pending",
        "earlier-plain-loses", "tombstone", "two-producers", "retried-marker", "later-txn-committed-first-wins",
        "later-txn-committed-last-wins"])
def test_markers_end_pending_offsets(steps: list[Step], offset: int | None, pending: set) -> None:
    image = run(steps)
    assert committed(image) == offset
    assert image.pending_partitions("g") == pending


def test_any_split_of_the_records_gives_the_same_image() -> None:
    steps: list[Step] = [("plain", rec(1)), ("txn", (PID, rec(4))), ("txn", (OTHER, rec(6, 1))),
                         ("plain", rec(2, 1)), ("end", (PID, True)), ("txn", (PID, rec(8))),
                         ("end", (OTHER, False)), ("plain", rec(None, 1))]
    whole = run(steps)
    for cut in range(len(steps) + 1):
        assert run(steps[cut:], run(steps[:cut])) == whole
    assert committed(whole) == 4 and committed(whole, 1) is None
    assert whole.pending_partitions("g") == {("orders", 0)}


@pytest.mark.parametrize("unstable, wanted, expected", [
    (frozenset(), (("orders", (0,)),), (FetchedOffset("orders", 0, 5, -1, "", E.NONE),)),
    (frozenset({("orders", 0)}), (("orders", (0, 1)),), (
        FetchedOffset("orders", 0, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT),
        FetchedOffset("orders", 1, -1, -1, "", E.NONE))),
    (frozenset({("orders", 0)}), None, (FetchedOffset("orders", 0, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT),)),
], ids=["without-require-stable", "require-stable", "require-stable-all"])
def test_require_stable_answers_unstable_for_pending_partitions(unstable, wanted, expected) -> None:  # noqa: ANN001
    image = run(COMMITTED_5 + [("txn", (PID, rec(9)))])
    assert fetch_offsets(image.offsets.get("g"), wanted, unstable=unstable) == expected


def test_an_offset_with_a_pending_transaction_does_not_expire() -> None:
    """Kafka's cleanupExpiredOffsets keeps a partition whose transactional offset awaits its
    marker (and so the group, which still has an offset)."""
    offsets = {("orders", 0): OffsetCommitValue(1, "", NOW), ("orders", 1): OffsetCommitValue(2, "", NOW)}
    later = NOW + CONFIG.offsets_retention_ms
    out = expire_offsets(EMPTY, offsets, later, CONFIG, pending=frozenset({("orders", 1)}))
    assert out.records == (CoordinatorRecord(OffsetCommitKey("g", "orders", 0), None),)
    assert out.group is not None and out.group.state is S.EMPTY
