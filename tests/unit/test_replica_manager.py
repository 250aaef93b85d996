"""broker/replica_manager.py: hosting partitions from metadata changes, appends, reads, waits."""

from __future__ import annotations

import asyncio

import pytest

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from common.topic_partition import TopicPartition
from common.errors import KafkaError
from common.record_batch import set_partition_leader_epoch
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    Listener,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
)
from tests.log_helpers import NOW, batch

ME = 1
ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)
TRIPLE_0 = TopicPartition("triple", 0)


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


def listeners(b):
    return (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)


CLUSTER = replay(EMPTY_IMAGE, BeginEpoch(1), *(RegisterBroker(b, f"inc-{b}", listeners(b)) for b in (1, 2, 3)),
                 *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3)))
TOPICS = replay(
    CLUSTER,
    Config(ConfigResourceType.TOPIC, "orders", "max.message.bytes", "300"),
    Topic("orders", "ORDERS"),
    Partition("ORDERS", 0, (1,), (1,), leader=1),  # RF=1, led here
    Partition("ORDERS", 1, (2, 1), (2, 1), leader=2),  # followed here
    Topic("triple", "TRIPLE"), Partition("TRIPLE", 0, (1, 2, 3), (1, 2, 3), leader=1),
    Topic("elsewhere", "ELSEWHERE"), Partition("ELSEWHERE", 0, (3,), (3,), leader=3),
)


@pytest.fixture
def replicas(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    yield manager
    log_manager.shutdown()


def error_code(fn, *args, **kwargs):
    with pytest.raises(KafkaError) as info:
        fn(*args, **kwargs)
    return int(info.value.code)


def stamped(data: bytes, epoch: int) -> bytes:
    buf = bytearray(data)
    set_partition_leader_epoch(buf, 0, epoch)
    return bytes(buf)


def test_hosts_only_its_replicas_with_roles_and_epochs(replicas):
    assert sorted(replicas.partitions) == [ORDERS_0, ORDERS_1, TRIPLE_0]
    assert replicas.partitions[ORDERS_0].is_leader(ME)
    assert not replicas.partitions[ORDERS_1].is_leader(ME)
    assert replicas.partitions[ORDERS_0].log.leader_epoch_cache.latest_epoch == 0
    assert replicas.log_manager.get_log(TopicPartition("elsewhere", 0)) is None


def test_topic_configs_reach_the_log(replicas):
    assert replicas.partitions[ORDERS_0].log.config.max_message_bytes == 300
    assert replicas.partitions[TRIPLE_0].log.config == LogConfig()


def test_append_then_read_returns_the_batch_as_stored_and_advances_the_hw(replicas):
    data = batch(3)
    info = replicas.append(ORDERS_0, data, acks=1)
    assert (info.first_offset, info.last_offset) == (0, 2)
    read = replicas.read(ORDERS_0, 0, 1 << 20)
    assert read.records.read_bytes() == stamped(data, 0)
    assert (read.high_watermark, read.log_end_offset, read.log_start_offset) == (3, 3, 0)


def test_acks_all_with_rf1_is_acks_1(replicas):
    assert replicas.append(ORDERS_0, batch(1), acks=-1).first_offset == 0
    assert replicas.partitions[ORDERS_0].log.high_watermark == 1


def test_a_larger_isr_holds_the_hw_until_followers_report(replicas):
    replicas.append(TRIPLE_0, batch(2), acks=1)
    assert replicas.partitions[TRIPLE_0].log.high_watermark == 0
    assert replicas.read(TRIPLE_0, 0, 1 << 20).records.length == 0  # consumers: nothing yet
    assert replicas.read(TRIPLE_0, 0, 1 << 20, up_to_high_watermark=False).records.length > 0


@pytest.mark.parametrize("tp, records, acks, code", [
    (ORDERS_1, batch(1), 1, 6),  # follower: NOT_LEADER_OR_FOLLOWER
    (TopicPartition("orders", 7), batch(1), 1, 3),  # UNKNOWN_TOPIC_OR_PARTITION
    (ORDERS_0, batch(1), 2, 21),  # INVALID_REQUIRED_ACKS
    (ORDERS_0, batch(1)[:-1] + bytes([batch(1)[-1] ^ 0xFF]), 1, 2),  # CRC mismatch: CORRUPT_MESSAGE
    (ORDERS_0, batch(20, tag="x" * 30), 1, 10),  # over max.message.bytes 300: MESSAGE_TOO_LARGE
], ids=["follower", "unknown", "acks", "crc", "too-large"])
def test_append_errors(replicas, tp, records, acks, code):
    assert error_code(replicas.append, tp, records, acks=acks) == code
    assert replicas.partitions[ORDERS_0].log.log_end_offset == 0


def test_read_errors(replicas):
    replicas.append(ORDERS_0, batch(1), acks=1)
    assert error_code(replicas.read, ORDERS_0, 5, 100) == 1  # OFFSET_OUT_OF_RANGE
    assert error_code(replicas.read, ORDERS_1, 0, 100) == 6
    assert error_code(replicas.read, ORDERS_0, 0, 100, current_leader_epoch=1) == 75
    assert replicas.read(ORDERS_0, 1, 100).records.length == 0  # at the end: empty


def test_new_leader_epoch_is_recorded_at_the_log_end_offset(replicas):
    replicas.append(ORDERS_0, batch(2), acks=1)
    moved = replay(TOPICS, PartitionChange("ORDERS", 0, leader=1))  # re-elected: epoch 1
    replicas.apply_changes(changes_for_broker(TOPICS, moved, ME), moved)
    partition = replicas.partitions[ORDERS_0]
    assert partition.leader_epoch == 1
    assert partition.log.leader_epoch_cache.entries[-1] == (1, 2)
    assert error_code(replicas.read, ORDERS_0, 0, 100, current_leader_epoch=0) == 74


def test_becoming_follower_refuses_appends_and_deleting_removes_the_log(replicas):
    follow = replay(TOPICS, PartitionChange("TRIPLE", 0, leader=2))
    replicas.apply_changes(changes_for_broker(TOPICS, follow, ME), follow)
    assert error_code(replicas.append, TRIPLE_0, batch(1), acks=1) == 6
    gone = replay(follow, RemoveTopic("TRIPLE"))
    replicas.apply_changes(changes_for_broker(follow, gone, ME), gone)
    assert TRIPLE_0 not in replicas.partitions
    assert replicas.log_manager.get_log(TRIPLE_0) is None


async def test_a_waiting_fetch_is_woken_by_an_append(replicas):
    waiter = asyncio.create_task(replicas.wait_for_data([ORDERS_0, TRIPLE_0], 5.0))
    await asyncio.sleep(0)
    assert replicas.waiting_count(ORDERS_0) == 1
    replicas.append(ORDERS_0, batch(1), acks=1)
    assert await asyncio.wait_for(waiter, 1.0) is True
    assert replicas.waiting_count(ORDERS_0) == replicas.waiting_count(TRIPLE_0) == 0


async def test_a_wait_times_out_without_appends(replicas):
    assert await replicas.wait_for_data([ORDERS_0], 0.01) is False
    assert replicas.waiting_count(ORDERS_0) == 0


def test_idempotent_producer_duplicates_and_gaps(replicas):
    def idempotent(seq, count=2):
        return batch(count, producer_id=7, producer_epoch=0, base_sequence=seq)

    assert replicas.append(ORDERS_0, idempotent(0), acks=-1).first_offset == 0
    assert replicas.append(ORDERS_0, idempotent(2), acks=-1).first_offset == 2
    again = replicas.append(ORDERS_0, idempotent(2), acks=-1)  # a retry: acknowledged, not appended
    assert (again.first_offset, again.last_offset) == (2, 3)
    assert replicas.partitions[ORDERS_0].log.log_end_offset == 4
    assert error_code(replicas.append, ORDERS_0, idempotent(9), acks=-1) == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


def test_idempotent_state_survives_a_restart(tmp_path):
    def idempotent(seq, count=2):
        return batch(count, producer_id=7, producer_epoch=0, base_sequence=seq)

    def open_manager():
        log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
        manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
        manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
        return log_manager, manager

    log_manager, manager = open_manager()
    manager.append(ORDERS_0, idempotent(0), acks=1)
    manager.append(ORDERS_0, idempotent(2), acks=1)
    log_manager.shutdown()
    log_manager, manager = open_manager()  # the producer state is rebuilt from the log
    again = manager.append(ORDERS_0, idempotent(2), acks=1)  # a retry from before the restart
    assert (again.first_offset, again.last_offset) == (2, 3)
    assert manager.partitions[ORDERS_0].log.log_end_offset == 4
    assert error_code(manager.append, ORDERS_0, idempotent(9), acks=1) == 45
    log_manager.shutdown()


def test_a_new_partition_starts_with_an_empty_producer_state_without_reading_its_directory(
        tmp_path, monkeypatch):
    """A log this broker just created holds no snapshot and no batch: hosting it replays nothing
    and lists no directory; a log found on disk (a restart) is still replayed."""
    import broker.replica_appends

    looked: list[object] = []
    real = broker.replica_appends.latest_snapshot
    monkeypatch.setattr(broker.replica_appends, "latest_snapshot",
                        lambda directory, **kw: looked.append(directory) or real(directory, **kw))
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    assert looked == [] and len(manager.partitions) == 3
    assert manager.append(ORDERS_0, batch(2, producer_id=7, producer_epoch=0, base_sequence=0),
                          acks=1).first_offset == 0
    log_manager.shutdown()
    reopened = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    again = ReplicaManager(ME, reopened, now_ms=lambda: NOW)
    again.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    assert len(looked) == 3  # found on disk: replayed from their snapshots or the log start
    retry = again.append(ORDERS_0, batch(2, producer_id=7, producer_epoch=0, base_sequence=0), acks=1)
    assert retry.first_offset == 0 and again.partitions[ORDERS_0].log.log_end_offset == 2  # a duplicate
    reopened.shutdown()


# ---- replication: leader side ------------------------------------------------------------


def test_follower_fetches_move_the_hw_to_the_smallest_isr_leo(replicas):
    replicas.append(TRIPLE_0, batch(4), acks=1)
    assert replicas.partitions[TRIPLE_0].log.high_watermark == 0
    # A follower's fetch reads up to the LEO (not the HW) and reports where it is.
    first = replicas.read(TRIPLE_0, 0, 1 << 20, replica_id=2)
    assert first.records.length > 0 and first.high_watermark == 0
    replicas.read(TRIPLE_0, 4, 1 << 20, replica_id=2)  # follower 2 has everything
    assert replicas.partitions[TRIPLE_0].log.high_watermark == 0  # 3 has not fetched yet
    replicas.read(TRIPLE_0, 3, 1 << 20, replica_id=3)
    assert replicas.partitions[TRIPLE_0].log.high_watermark == 3
    replicas.read(TRIPLE_0, 4, 1 << 20, replica_id=3)
    assert replicas.read(TRIPLE_0, 0, 1 << 20).high_watermark == 4


def test_follower_fetch_errors(replicas):
    replicas.append(TRIPLE_0, batch(2), acks=1)
    assert error_code(replicas.read, TRIPLE_0, 3, 100, replica_id=2) == 1  # beyond the LEO
    assert error_code(replicas.read, ORDERS_0, 0, 100, replica_id=2) == 6  # not a replica
    assert error_code(replicas.read, TRIPLE_0, 0, 100, replica_id=2, current_leader_epoch=1) == 75
    moved = replay(TOPICS, PartitionChange("TRIPLE", 0, leader=1))
    replicas.apply_changes(changes_for_broker(TOPICS, moved, ME), moved)
    assert error_code(replicas.read, TRIPLE_0, 0, 100, replica_id=2, current_leader_epoch=0) == 74


async def wait_for_hw(replicas, tp, offset, timeout_s):
    return (await replicas.wait_for_replication({tp: offset}, timeout_s))[tp]


async def test_acks_all_waits_for_the_isr_then_answers(replicas):
    info = replicas.append(TRIPLE_0, batch(2), acks=-1)
    waiting = asyncio.create_task(wait_for_hw(replicas, TRIPLE_0, info.last_offset + 1, 5.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    replicas.read(TRIPLE_0, 2, 100, replica_id=2)
    replicas.read(TRIPLE_0, 2, 100, replica_id=3)  # the ISR has it: woken by the HW move
    assert await asyncio.wait_for(waiting, 1.0) == 0


async def test_acks_all_times_out_without_followers(replicas):
    info = replicas.append(TRIPLE_0, batch(1), acks=-1)
    assert await wait_for_hw(replicas, TRIPLE_0, info.last_offset + 1, 0.05) == 7


async def test_an_isr_shrunk_below_min_isr_holds_the_hw_and_times_acks_all_out(replicas):
    # Kafka since 3.7 (KIP-966's strict min ISR): below min.insync.replicas the HW stands still,
    # so a waiting acks=all write is never acknowledged by a leader alone: it times out, and a
    # new one is refused before it is appended.
    config = replay(TOPICS, Config(ConfigResourceType.TOPIC, "triple", "min.insync.replicas", "2"))
    replicas.apply_changes(changes_for_broker(TOPICS, config, ME), config)
    info = replicas.append(TRIPLE_0, batch(1), acks=-1)
    waiting = asyncio.create_task(wait_for_hw(replicas, TRIPLE_0, info.last_offset + 1, 0.3))
    await asyncio.sleep(0)
    shrunk = replay(config, PartitionChange("TRIPLE", 0, isr=(1,)))  # committed by the controller
    replicas.apply_changes(changes_for_broker(config, shrunk, ME), shrunk)
    assert await asyncio.wait_for(waiting, 2.0) == 7  # REQUEST_TIMED_OUT
    assert error_code(replicas.append, TRIPLE_0, batch(1), acks=-1) == 19  # NOT_ENOUGH_REPLICAS


WIDE = replay(TOPICS, Topic("wide", "WIDE"),
              *(Partition("WIDE", p, (1, 2, 3), (1, 2, 3), leader=1) for p in range(8)))
WIDE_TPS = [TopicPartition("wide", p) for p in range(8)]


@pytest.fixture
def wide(replicas):
    replicas.apply_changes(changes_for_broker(TOPICS, WIDE, ME), WIDE)
    return replicas


async def test_acks_all_over_many_partitions_waits_one_timeout_in_all(wide):
    # Kafka's DelayedProduce: one deadline per request. Waiting partition after partition
    # took 8 x 0.25 s = 2 s here; one deadline answers all 8 after 0.25 s.
    required = {tp: wide.append(tp, batch(1), acks=-1).last_offset + 1 for tp in WIDE_TPS}
    loop = asyncio.get_running_loop()
    started = loop.time()
    codes = await wide.wait_for_replication(required, 0.25)
    elapsed = loop.time() - started
    assert codes == {tp: 7 for tp in WIDE_TPS}  # REQUEST_TIMED_OUT, each partition
    # Waiting partition after partition takes at least 8 x 0.25 = 2 s; anything under 7 timeouts
    # is one deadline (the slack is for a loaded machine's late timers, not for the rule).
    assert 0.25 - 0.001 <= elapsed < 7 * 0.25, elapsed  # timeouts are whole ms: up to 1 ms early
    assert all(wide.produce_purgatory.watched(tp) == 0 for tp in WIDE_TPS)


async def test_acks_all_answers_each_partition_when_all_are_decided(wide):
    required = {tp: wide.append(tp, batch(1), acks=-1).last_offset + 1 for tp in WIDE_TPS[:3]}
    waiting = asyncio.create_task(wide.wait_for_replication(required, 5.0))
    await asyncio.sleep(0)
    for follower in (2, 3):
        wide.read(WIDE_TPS[0], 1, 100, replica_id=follower)  # partition 0 replicated
    await asyncio.sleep(0)
    assert not waiting.done() and wide.produce_purgatory.watched(WIDE_TPS[1]) == 1
    moved = replay(WIDE, PartitionChange("WIDE", 1, leader=2))  # partition 1 lost: NOT_LEADER
    wide.apply_changes(changes_for_broker(WIDE, moved, ME), moved)
    await asyncio.sleep(0)
    assert not waiting.done()
    for follower in (2, 3):
        wide.read(WIDE_TPS[2], 1, 100, replica_id=follower)
    assert await asyncio.wait_for(waiting, 1.0) == {WIDE_TPS[0]: 0, WIDE_TPS[1]: 6, WIDE_TPS[2]: 0}
    assert sum(wide.produce_purgatory.watched(tp) for tp in WIDE_TPS) == 0


async def test_acks_all_at_the_deadline_keeps_the_decided_partitions_codes(wide):
    required = {tp: wide.append(tp, batch(1), acks=-1).last_offset + 1 for tp in WIDE_TPS[:2]}
    waiting = asyncio.create_task(wide.wait_for_replication(required, 0.05))
    await asyncio.sleep(0)
    for follower in (2, 3):
        wide.read(WIDE_TPS[0], 1, 100, replica_id=follower)
    assert await asyncio.wait_for(waiting, 1.0) == {WIDE_TPS[0]: 0, WIDE_TPS[1]: 7}


async def test_a_waiting_fetch_ignores_events_that_change_nothing(replicas):
    waiter = asyncio.create_task(replicas.wait_for_data([ORDERS_0], 5.0))
    await asyncio.sleep(0)
    replicas._wake(ORDERS_0)  # e.g. a produce check on the same key: the partition is as read
    await asyncio.sleep(0)
    assert not waiter.done() and replicas.waiting_count(ORDERS_0) == 1
    replicas.append(ORDERS_0, batch(1), acks=1)
    assert await asyncio.wait_for(waiter, 1.0) is True


async def test_a_waiting_fetch_wakes_on_what_it_may_read(replicas):
    """Kafka's DelayedFetch: a follower reads to the log end, so an append wakes it and a HW
    move does not; a consumer reads to the HW, so the HW move wakes it and an append below
    the HW (acks=all, the followers not there yet) does not. Without a replica id, any change."""
    async def woken(replica_id: int | None, change) -> bool:
        waiter = asyncio.create_task(replicas.wait_for_data([TRIPLE_0], 0.2, replica_id=replica_id))
        await asyncio.sleep(0)
        change()
        return await asyncio.wait_for(waiter, 1.0)

    end = replicas.partitions[TRIPLE_0].log.log_end_offset

    def append() -> None:
        replicas.append(TRIPLE_0, batch(1), acks=-1)

    def followers_fetch() -> None:  # both at the log end: the HW moves there
        for follower in (2, 3):
            replicas.read(TRIPLE_0, replicas.partitions[TRIPLE_0].log.log_end_offset, 1 << 20,
                          replica_id=follower, replica_log_start_offset=0)

    assert await woken(-1, append) is False  # timed out: nothing below the HW to read
    assert await woken(2, followers_fetch) is False and replicas.partitions[TRIPLE_0].log.high_watermark == end + 1
    assert await woken(2, append) is True
    assert await woken(-1, followers_fetch) is True
    assert await woken(None, append) is True


# ---- replication: follower side ----------------------------------------------------------


def leader_batches(count: int, *, base_offset: int, epoch: int) -> bytes:
    """Batches as a leader stored them: offsets assigned, leader epoch stamped."""
    from common.record_batch import set_base_offset

    buf = bytearray(batch(count))
    set_base_offset(buf, 0, base_offset)
    set_partition_leader_epoch(buf, 0, epoch)
    return bytes(buf)


def test_a_follower_appends_the_leaders_batches_unchanged_and_caps_its_hw(replicas):
    partition = replicas.follower_partition(ORDERS_1, 0)
    assert partition is not None and replicas.follower_partition(ORDERS_1, 1) is None
    data = leader_batches(3, base_offset=0, epoch=0) + leader_batches(2, base_offset=3, epoch=0)
    info = replicas.append_as_follower(partition, memoryview(data + data[:20]), leader_high_watermark=9)
    assert (info.first_offset, info.last_offset) == (0, 4)  # the partial tail is left for the next fetch
    assert partition.log.read(0, 1 << 20).read_bytes() == data
    assert partition.log.high_watermark == 5  # min(leader HW 9, own LEO 5)
    replicas.append_as_follower(partition, memoryview(b""), leader_high_watermark=4)
    assert partition.log.high_watermark == 4


def test_follower_truncation_rebuilds_producer_state(replicas):
    partition = replicas.follower_partition(ORDERS_1, 0)
    buf = bytearray(batch(2, producer_id=7, producer_epoch=0, base_sequence=0))
    set_partition_leader_epoch(buf, 0, 0)
    second = bytearray(batch(2, producer_id=7, producer_epoch=0, base_sequence=2))
    from common.record_batch import set_base_offset
    set_base_offset(second, 0, 2)
    replicas.append_as_follower(partition, memoryview(bytes(buf) + bytes(second)), leader_high_watermark=0)
    replicas.truncate_follower(partition, 2, "(test)")
    assert partition.log.log_end_offset == 2
    # Sequence 2 is no longer in the log, so the producer state must not call it a duplicate.
    assert partition.producer_state.check(read_header(bytes(second))).outcome.name != "DUPLICATE"


def read_header(data: bytes):
    from common.record_batch import parse_header
    return parse_header(memoryview(data), 0)


def test_a_follower_of_a_compacted_leader_records_producer_batches_at_their_own_offsets(replicas):
    # A compacted leader's log has offset gaps: the follower keeps the leader's offsets, and the
    # idempotent producer state must name where each batch really is (a retried batch is
    # answered with that offset).
    from common.record_batch import set_base_offset

    partition = replicas.follower_partition(ORDERS_1, 0)
    first = bytearray(batch(2, producer_id=7, producer_epoch=0, base_sequence=0))
    second = bytearray(batch(2, producer_id=7, producer_epoch=0, base_sequence=2))
    set_base_offset(second, 0, 10)  # offsets 2..9 were compacted away on the leader
    replicas.append_as_follower(partition, memoryview(bytes(first) + bytes(second)), leader_high_watermark=0)
    retried = read_header(bytes(batch(2, producer_id=7, producer_epoch=0, base_sequence=2)))
    check = partition.producer_state.check(retried)
    assert check.outcome.name == "DUPLICATE"
    assert check.duplicate is not None and check.duplicate.first_offset == 10


# ---- the isr-expiration task on the broker's timer service ------------------------------------


def test_isr_expiration_runs_every_half_lag_time_on_the_timers_and_stops(tmp_path) -> None:
    from broker.purgatory import Purgatory
    from broker.replica_manager import ISR_EXPIRATION_TIMER
    from broker.timers import TimerService

    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    try:
        manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW, replica_lag_time_max_ms=10_000,
                                 timers=timers)
        assert isinstance(manager.produce_purgatory, Purgatory)
        assert manager.produce_purgatory.timers is timers and manager.fetch_purgatory.timers is timers
        checks: list[int] = []
        manager.maybe_shrink_isr = lambda: checks.append(clock[0]) or 0  # type: ignore[method-assign]
        manager.start_isr_expiration()
        for ms in range(0, 20_001, 100):
            clock[0] = NOW + ms
            timers.run_due()
        assert checks == [NOW + 5_000, NOW + 10_000, NOW + 15_000, NOW + 20_000]

        def broken() -> int:
            raise RuntimeError("bug")  # logged; the task keeps its period

        manager.maybe_shrink_isr = broken  # type: ignore[method-assign]
        clock[0] = NOW + 25_000
        timers.run_due()
        assert timers.deadline(ISR_EXPIRATION_TIMER) == NOW + 30_000
        manager.stop_isr_expiration()
        assert ISR_EXPIRATION_TIMER not in timers and len(timers) == 0
    finally:
        log_manager.shutdown()


def test_a_large_change_set_logs_one_summary_line_and_a_small_one_each_partition(replicas, caplog):
    """A broker taking thousands of roles (another broker's controlled shutdown) writes one INFO
    line per change set, the partitions at DEBUG; a few partitions still get a line each."""
    wide = 80  # half of it is more than replica_roles.DETAILED_CHANGES_MAX
    image = replay(TOPICS, Topic("wide", "WIDE"),
                   *(Partition("WIDE", p, (2, 1), (2, 1), leader=2, leader_epoch=1) for p in range(wide)))
    moved = replay(image, *(Partition("WIDE", p, (2, 1), (1,), leader=1, leader_epoch=2, partition_epoch=1)
                            for p in range(wide // 2)))
    replicas.apply_changes(changes_for_broker(TOPICS, image, ME), image)
    caplog.clear()
    with caplog.at_level("INFO", logger="broker.replica_roles"):
        replicas.apply_changes(changes_for_broker(image, moved, ME), moved)
    lines = [r.getMessage() for r in caplog.records if r.name == "broker.replica_roles"]
    assert lines == [f"Broker {ME}: {wide // 2} new leaderships, 0 partitions following a new leader or leader "
                     "epoch, 0 not fetched (without a leader, or out of the ISR in controlled shutdown), 0 no longer "
                     "hosted; 0 other partition changes (ISR, epochs)"]
    assert replicas.get_partition(TopicPartition("wide", 0)).leader_epoch == 2
    one = replay(moved, Partition("WIDE", wide - 1, (2, 1), (2, 1), leader=2, leader_epoch=2, partition_epoch=1))
    caplog.clear()
    with caplog.at_level("INFO", logger="broker.replica_roles"):
        replicas.apply_changes(changes_for_broker(moved, one, ME), one)
    assert [r.getMessage() for r in caplog.records if r.name == "broker.replica_roles"] == [
        f"Follower wide-{wide - 1} of leader 2 with leader epoch 2 (log end offset 0, high watermark 0)"]


def test_a_new_topic_of_a_few_partitions_fsyncs_the_log_dir_once(replicas, tmp_path, monkeypatch):
    """1,000 topics of 10 partitions: each topic's logs are created together, one fsync of the
    log dir (it was one per partition, on the event loop)."""
    import os
    image = replay(TOPICS, Topic("ten", "TEN"), *(Partition("TEN", p, (1, 2), (1, 2), leader=1 + p % 2)
                                                  for p in range(10)))
    synced = []
    real_fsync = os.fsync
    # the log dir's fsync runs on the flusher's thread (c9cbe42), which calls the patched os.fsync;
    # the fixture's topics' own one ends first, uncounted
    replicas.log_manager.flusher.shutdown()
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    replicas.apply_changes(changes_for_broker(TOPICS, image, ME), image)
    replicas.log_manager.flusher.shutdown()  # waits for its work
    assert synced.count(str(tmp_path / "logs")) == 1
    assert {replicas.get_partition(TopicPartition("ten", p)).leader_id for p in range(10)} == {1, 2}


class RecordingFetchers:
    """The replica fetchers' calls, in order (what a change set asks of them)."""

    def __init__(self) -> None:
        self.fetching: dict[TopicPartition, tuple[int, int]] = {}
        self.changed: list[TopicPartition] = []  # registrations_changed's partitions

    def add_partitions(self, partitions):
        self.fetching.update((tp, (leader, epoch)) for tp, leader, epoch in partitions)

    def remove_partitions(self, tps):
        for tp in tps:
            self.fetching.pop(tp, None)

    def registrations_changed(self, tps):
        self.changed.extend(tps)


def test_the_fetchers_hear_of_an_isr_change_only_when_this_brokers_seat_moved(replicas):
    """A fetch entry depends on the leader, the leader epoch and whether this broker is in the
    ISR (an out-of-sync follower names its partition in every fetch): a peer leaving or joining
    the ISR asks nothing of the fetchers (66,000 partitions per surviving broker when a broker
    shuts down at 100,000), this broker leaving or joining it does."""
    fetchers = replicas.fetchers = RecordingFetchers()
    peers = replay(TOPICS, Topic("peers", "PEERS"), Partition("PEERS", 0, (2, 1, 3), (2, 1, 3), leader=2))
    replicas.apply_changes(changes_for_broker(TOPICS, peers, ME), peers)
    fetchers.changed.clear()
    left = replay(peers, PartitionChange("PEERS", 0, isr=(2, 1)), PartitionChange("ORDERS", 1, isr=(2,)))
    replicas.apply_changes(changes_for_broker(peers, left, ME), left)
    assert fetchers.changed == [ORDERS_1]
    back = replay(left, PartitionChange("PEERS", 0, isr=(2, 1, 3)), PartitionChange("ORDERS", 1, isr=(2, 1)))
    replicas.apply_changes(changes_for_broker(left, back, ME), back)
    assert fetchers.changed == [ORDERS_1, ORDERS_1]
    assert ORDERS_1 not in fetchers.fetching  # followed as before: never moved to another fetcher


def test_in_controlled_shutdown_a_follower_out_of_the_isr_stops_fetching(replicas):
    """Kafka's applyLocalFollowersDelta: once this broker is in controlled shutdown, a partition
    whose ISR no longer holds it (the controller moved it out to shut it down) is not fetched;
    one whose ISR still holds it (the last member, KIP-841) goes on."""
    fetchers = replicas.fetchers = RecordingFetchers()
    fetchers.fetching[ORDERS_1] = (2, 0)
    shutting = replay(TOPICS, BrokerRegistrationChange(ME, ME, in_controlled_shutdown=True))
    moved = replay(shutting,
                   PartitionChange("TRIPLE", 0, isr=(2, 3), leader=2),  # led here: moves away, out of the ISR
                   PartitionChange("ORDERS", 1, isr=(2,)))  # followed here: out of the ISR, same leader
    replicas.apply_changes(changes_for_broker(TOPICS, moved, ME), moved)
    assert TRIPLE_0 not in fetchers.fetching and ORDERS_1 not in fetchers.fetching
    assert replicas.get_partition(TRIPLE_0).leader_id == 2  # the role changed all the same
    running = replay(moved, BrokerRegistrationChange(ME, ME, in_controlled_shutdown=False),
                     PartitionChange("TRIPLE", 0, leader=3))  # running again: a new leader is fetched from
    replicas.apply_changes(changes_for_broker(moved, running, ME), running)
    assert fetchers.fetching[TRIPLE_0] == (3, replicas.get_partition(TRIPLE_0).leader_epoch)
