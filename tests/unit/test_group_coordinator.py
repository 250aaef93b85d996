"""broker/group_coordinator: the group APIs through the broker's RequestHandler over a real
ReplicaManager and log (no processes): FindCoordinator, a whole group life cycle, offsets
written to `__consumer_offsets` in Kafka's format and loaded back by a fresh coordinator,
NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS, and bad input stored nowhere."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.group_coordinator.runtime import CoordinatorSettings
from broker.timers import TimerService
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from common.topic_partition import TopicPartition
from common.errors import ErrorCode as E
from common.prometheus import exposition, samples
from common.protocol.api_keys import ApiKey
from common.record_batch import iter_batches
from common.records import decode_records
from common.log_config import LogConfig
from groups.group import GroupConfig
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from groups.records import OffsetCommitKey, OffsetCommitValue, decode_record
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import Partition, Topic
from tests import group_wire as gw
from tests.log_helpers import NOW
from tests.unit.test_request_handler import (
    ADVERTISED,
    CLUSTER,
    ME,
    FakeAdmin,
    call,
    kio_call,
    replay,
)

HERE, ELSEWHERE = "g1", "g0"  # offsets partitions 0 (led here) and 1 (led by broker 2)
assert coordinator_partition(HERE, 2) == 0 and coordinator_partition(ELSEWHERE, 2) == 1
IMAGE = replay(CLUSTER, Topic(GROUP_METADATA_TOPIC_NAME, "OFFSETS"),
               Partition("OFFSETS", 0, (1,), (1,), leader=1), Partition("OFFSETS", 1, (2,), (2,), leader=2),
               Topic("orders", "ORDERS"), Partition("ORDERS", 0, (1,), (1,), leader=1))
OFFSETS_TP = TopicPartition(GROUP_METADATA_TOPIC_NAME, 0)
SETTINGS = CoordinatorSettings(GroupConfig(initial_rebalance_delay_ms=0))  # Kafka's dev config
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff"


@pytest.fixture
def broker(tmp_path):
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)

    def new_handler() -> RequestHandler:  # each test closes the handlers it makes
        return RequestHandler(ME, replicas, lambda: IMAGE, ADVERTISED, None, topic_admin=FakeAdmin(),
                              group_settings=SETTINGS)

    yield new_handler, replicas
    log_manager.shutdown()


async def loaded(handler: RequestHandler, group: str = HERE) -> None:
    """Ask until the coordinator has loaded the group's partition (bounded)."""
    for _ in range(100):
        if (await heartbeat(handler, group, "nobody", 0)).error_code != E.COORDINATOR_LOAD_IN_PROGRESS:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the offsets partition never loaded")


async def join(handler: RequestHandler, member_id: str = "", group: str = HERE, version: int = 5,
               protocols: tuple = (("range", SUBSCRIPTION),)) -> Any:
    request = gw.join(version, group, 10000, 30000, member_id, None, "consumer", protocols)
    return await call(handler, ApiKey.JOIN_GROUP, version, request, *gw.codec(ApiKey.JOIN_GROUP))


async def heartbeat(handler: RequestHandler, group: str, member: str, generation: int) -> Any:
    return await call(handler, ApiKey.HEARTBEAT, 3, gw.heartbeat(3, group, generation, member),
                      *gw.codec(ApiKey.HEARTBEAT))


async def commit(handler: RequestHandler, member: str, generation: int, *parts: tuple[str, int, int, str]
                 ) -> dict[tuple[str, int], int]:
    request = gw.commit(7, HERE, generation, member, [(t, p, o, 4, m) for t, p, o, m in parts])
    response = await call(handler, ApiKey.OFFSET_COMMIT, 7, request, *gw.codec(ApiKey.OFFSET_COMMIT))
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def fetch_offsets(handler: RequestHandler) -> Any:
    return await call(handler, ApiKey.OFFSET_FETCH, 5, gw.fetch(5, HERE, None), *gw.codec(ApiKey.OFFSET_FETCH))


def stored_records(replicas: ReplicaManager) -> list:
    data = replicas.get_partition(OFFSETS_TP).log.read(0, 1 << 20).read_bytes()
    return [decode_record(r.key, r.value) for pos, h in iter_batches(data) for r in decode_records(data, pos, h)]


async def test_find_coordinator_names_the_offsets_partition_leader(broker) -> None:
    new_handler, _ = broker
    handler = new_handler()
    for group, expected in ((HERE, (1, *ADVERTISED)), (ELSEWHERE, (2, "127.0.0.2", 9092))):
        response = await kio_call(handler, ApiKey.FIND_COORDINATOR, 2, key=group)
        assert (response.error_code, response.node_id, response.host, response.port) == (0, *expected)
    # v4+ batches keys (KIP-699): one answer per key, each found as above
    batched = await kio_call(handler, ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=(HERE, ELSEWHERE, HERE))
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in batched.coordinators] == [
        (HERE, 0, 1, *ADVERTISED), (ELSEWHERE, 0, 2, "127.0.0.2", 9092)]
    transactions = await kio_call(handler, ApiKey.FIND_COORDINATOR, 5, key_type=1, coordinator_keys=("tx",))
    assert [(c.key, c.error_code) for c in transactions.coordinators] == [("tx", E.COORDINATOR_NOT_AVAILABLE)]
    await handler.close()


async def test_a_whole_group_life_and_a_reload(broker) -> None:
    new_handler, replicas = broker
    handler = new_handler()
    assert (await heartbeat(handler, HERE, "m", 0)).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert (await heartbeat(handler, ELSEWHERE, "m", 0)).error_code == E.NOT_COORDINATOR
    await loaded(handler)
    first = await join(handler)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("test-")
    joined = await join(handler, first.member_id)
    assert (joined.error_code, joined.generation_id, joined.leader, joined.protocol_name) == (
        0, 1, first.member_id, "range")
    assert [m.metadata for m in joined.members] == [SUBSCRIPTION]
    member, generation = joined.member_id, joined.generation_id
    sync = await call(handler, ApiKey.SYNC_GROUP, 3, gw.sync(3, HERE, generation, member, None, (
        (member, b"all of orders"),)), *gw.codec(ApiKey.SYNC_GROUP))
    assert (sync.error_code, sync.assignment) == (0, b"all of orders")
    assert (await heartbeat(handler, HERE, member, generation)).error_code == 0
    assert (await heartbeat(handler, HERE, member, generation + 1)).error_code == E.ILLEGAL_GENERATION

    end_before = replicas.get_partition(OFFSETS_TP).log.log_end_offset
    assert await commit(handler, member, generation, ("orders", 0, 5, "x" * 5000), ("nope", 0, 1, "")) == {
        ("orders", 0): E.OFFSET_METADATA_TOO_LARGE, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert replicas.get_partition(OFFSETS_TP).log.log_end_offset == end_before  # nothing stored
    assert await commit(handler, member, generation, ("orders", 0, 42, "meta")) == {("orders", 0): 0}
    fetched = await fetch_offsets(handler)
    assert [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
            for t in fetched.topics for p in t.partitions] == [("orders", 0, 42, 4, "meta")]
    described = await call(handler, ApiKey.DESCRIBE_GROUPS, 4, gw.describe(4, (HERE, "unknown")),
                           *gw.codec(ApiKey.DESCRIBE_GROUPS))
    assert [(g.group_id, g.group_state, g.protocol_data, len(g.members)) for g in described.groups] == [
        (HERE, "Stable", "range", 1), ("unknown", "Dead", "", 0)]
    assert described.groups[0].members[0].member_assignment == b"all of orders"
    asked = await call(handler, ApiKey.DESCRIBE_GROUPS, 5, gw.describe(5, (HERE, "unknown"), True),
                       *gw.codec(ApiKey.DESCRIBE_GROUPS))
    assert [g.authorized_operations for g in asked.groups] == [0b1_0100_1000] * 2  # READ, DELETE, DESCRIBE
    assert [g.authorized_operations for g in described.groups] == [-2147483648] * 2  # Kafka's "not asked for"
    deleted = await call(handler, ApiKey.DELETE_GROUPS, 1, gw.delete(1, (HERE,)), *gw.codec(ApiKey.DELETE_GROUPS))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [(HERE, E.NON_EMPTY_GROUP)]

    # What the log holds is Kafka's records; a fresh coordinator (a new leader) loads them.
    records = stored_records(replicas)
    assert records[-1].key == OffsetCommitKey(HERE, "orders", 0)
    assert records[-1].value.offset == 42 and isinstance(records[-1].value, OffsetCommitValue)
    await handler.close()
    again = new_handler()
    assert (await heartbeat(again, HERE, member, generation)).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    await loaded(again)
    assert (await heartbeat(again, HERE, member, generation)).error_code == 0  # Stable, loaded with its member
    assert (await fetch_offsets(again)).topics == fetched.topics

    left = await call(again, ApiKey.LEAVE_GROUP, 3, gw.leave(3, HERE, (member, None, None)),
                      *gw.codec(ApiKey.LEAVE_GROUP))
    assert left.error_code == 0 and [m.error_code for m in left.members] == [0]
    listed = await call(again, ApiKey.LIST_GROUPS, 2, gw.list_groups(2), *gw.codec(ApiKey.LIST_GROUPS))
    assert [(g.group_id, g.protocol_type) for g in listed.groups] == [(HERE, "consumer")]
    for states, expected in (((), [(HERE, "consumer", "Empty")]),
                             (("EMPTY", "Dead"), [(HERE, "consumer", "Empty")]),
                             (("Stable",), [])):  # v4 (KIP-518): case-insensitive state filter
        filtered = await call(again, ApiKey.LIST_GROUPS, 4, gw.list_groups(4, states), *gw.codec(ApiKey.LIST_GROUPS))
        assert [(g.group_id, g.protocol_type, g.group_state) for g in filtered.groups] == expected, states
    deleted = await call(again, ApiKey.DELETE_GROUPS, 1, gw.delete(1, (HERE,)), *gw.codec(ApiKey.DELETE_GROUPS))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [(HERE, 0)]
    assert (await fetch_offsets(again)).topics == ()
    await again.close()


async def test_bad_joins_get_kafkas_errors(broker) -> None:
    new_handler, replicas = broker
    handler = new_handler()
    await loaded(handler)
    assert (await join(handler, group="")).error_code == E.INVALID_GROUP_ID
    assert (await join(handler, protocols=())).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(handler, "ghost")).error_code == E.UNKNOWN_MEMBER_ID
    assert (await heartbeat(handler, "", "m", 1)).error_code == E.INVALID_GROUP_ID
    assert (await call(handler, ApiKey.OFFSET_FETCH, 5, gw.fetch(5, "", None),
                       *gw.codec(ApiKey.OFFSET_FETCH))).error_code == E.INVALID_GROUP_ID
    assert replicas.get_partition(OFFSETS_TP).log.log_end_offset == 0
    await handler.close()


# ---- the runtime's timers and leadership, on an injected clock ------------------------------


async def test_sessions_expire_on_the_coordinators_clock_and_leadership_loss_answers_parked_joins(broker) -> None:
    from broker.handlers import groups as handlers
    from broker.group_coordinator.runtime import GroupCoordinator
    from broker.handlers.context import ClientInfo
    from groups.state import GroupState
    from metadata.records import PartitionChange

    _, replicas = broker
    clock = [NOW]
    image = [IMAGE]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    coord = GroupCoordinator(ME, replicas, lambda: image[0], SETTINGS, now_ms=lambda: clock[0], timers=timers)
    try:
        coord.ensure_started()  # loads the partitions led here
        await coord.runtime.idle()
        protocols = (("range", SUBSCRIPTION),)

        async def join_v3(member: str = "") -> Any:
            return await handlers.join(coord, gw.join(3, HERE, 10000, 30000, member, None, "consumer", protocols), 3,
                                       ClientInfo("client", "/127.0.0.1"))

        a = await join_v3()
        sync = await handlers.sync(coord, gw.sync(3, HERE, a.generation_id, a.member_id, None), 3,
                                   ClientInfo("c", "/127.0.0.1"))
        assert sync.error_code == 0 and coord.groups(0).groups[HERE].state is GroupState.STABLE

        # The session's deadline is one timer, exact to the millisecond (not a polling tick).
        assert coord.runtime.timer_deadline(0, ("expire", HERE)) == clock[0] + 10_000
        clock[0] += 9_999  # a heartbeat one ms before the session ends keeps the member
        beat = await handlers.heartbeat_(coord, gw.heartbeat(3, HERE, a.generation_id, a.member_id), 3,
                                         ClientInfo("c", "/127.0.0.1"))
        assert beat.error_code == 0
        clock[0] += 1
        timers.run_due()  # what is due at the clock: nothing any more
        await coord.runtime.idle()
        assert list(coord.groups(0).groups[HERE].members) == [a.member_id]
        clock[0] += 9_998  # one ms before the new deadline: nothing happens
        timers.run_due()
        await coord.runtime.idle()
        assert list(coord.groups(0).groups[HERE].members) == [a.member_id]
        clock[0] += 1  # at the deadline: expired then
        timers.run_due()
        await coord.runtime.idle()  # the expiry appends the empty group's record, then applies
        group = coord.groups(0).groups[HERE]
        assert group.state is GroupState.EMPTY and not group.members

        a = await join_v3()  # a new generation with one member...
        waiting = asyncio.ensure_future(join_v3())  # ... and a second one waits for it to rejoin
        await asyncio.sleep(0)  # the join runs up to its parking
        await coord.runtime.idle()
        assert not waiting.done()
        image[0] = replay(IMAGE, PartitionChange("OFFSETS", 0, leader=2, isr=(1, 2), replicas=(1, 2)))
        replicas.apply_changes(changes_for_broker(IMAGE, image[0], ME), image[0])
        # leadership moved: the replica manager's change listener unloads the partition at once
        assert (await asyncio.wait_for(waiting, 1)).error_code == E.NOT_COORDINATOR
        assert (await handlers.heartbeat_(coord, gw.heartbeat(3, HERE, 1, a.member_id), 3, ClientInfo("c", "/127.0.0.1"))
                ).error_code == E.NOT_COORDINATOR
        assert samples(exposition(coord.metric_families("x_")))['x_groups{state="Stable"}'] == 0
    finally:
        await coord.close()


async def test_a_member_that_never_syncs_is_removed_on_the_coordinators_clock(broker) -> None:
    """KIP-814: the leader assigns, a follower keeps heartbeating but never sends SyncGroup;
    one rebalance timeout after the join phase the coordinator drops it and rebalances."""
    from broker.handlers import groups as handlers
    from broker.group_coordinator.runtime import GroupCoordinator
    from broker.handlers.context import ClientInfo
    from groups.state import GroupState

    _, replicas = broker
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    coord = GroupCoordinator(ME, replicas, lambda: IMAGE, SETTINGS, now_ms=lambda: clock[0], timers=timers)
    client = ClientInfo("client", "/127.0.0.1")
    try:
        coord.ensure_started()
        await coord.runtime.idle()
        protocols = (("range", SUBSCRIPTION),)

        async def join_v3(member: str = "") -> Any:
            return await handlers.join(coord, gw.join(3, HERE, 10000, 30000, member, None, "consumer", protocols), 3,
                                       client)

        async def sync(member: str, generation: int, assignments: tuple = ()) -> Any:
            return await handlers.sync(coord, gw.sync(3, HERE, generation, member, None, assignments), 3, client)

        async def beat(member: str, generation: int) -> int:
            return (await handlers.heartbeat_(coord, gw.heartbeat(3, HERE, generation, member), 3, client)
                    ).error_code

        a = await join_v3()
        assert (await sync(a.member_id, a.generation_id)).error_code == 0
        b_join = asyncio.ensure_future(join_v3())  # b joins: the group waits for a to rejoin
        await asyncio.sleep(0)  # the join runs up to its parking
        await coord.runtime.idle()
        a = await asyncio.wait_for(join_v3(a.member_id), 1)
        b = await asyncio.wait_for(b_join, 1)
        assert a.generation_id == b.generation_id == 2 and a.leader == a.member_id
        assignments = ((a.member_id, b"a"), (b.member_id, b"b"))
        assert (await sync(a.member_id, 2, assignments)).error_code == 0
        assert coord.groups(0).groups[HERE].pending_sync == {b.member_id}

        for _ in range(3):  # b's heartbeats keep its session alive, not its place in the group
            clock[0] += 9_999
            assert await beat(b.member_id, 2) == 0
            assert await beat(a.member_id, 2) == 0
            timers.run_due()  # what is due at the clock
            await coord.runtime.idle()
        assert clock[0] < NOW + 30_000 and set(coord.groups(0).groups[HERE].members) == {a.member_id, b.member_id}
        clock[0] = NOW + 30_000  # the rebalance timeout after the join phase completed
        timers.run_due()  # what is due at the clock
        await coord.runtime.idle()
        group = coord.groups(0).groups[HERE]
        assert list(group.members) == [a.member_id] and group.state is GroupState.PREPARING_REBALANCE
        assert await beat(a.member_id, 2) == E.REBALANCE_IN_PROGRESS
        assert await beat(b.member_id, 2) == E.UNKNOWN_MEMBER_ID
    finally:
        await coord.close()


async def test_a_new_member_whose_join_never_completes_is_answered_unknown_member(broker) -> None:
    """KAFKA-7610: a new member waits in JoinGroup while the group waits for an old member
    (a 10-minute rebalance timeout); at the new member join timeout the coordinator answers
    its JoinGroup UNKNOWN_MEMBER_ID and removes it."""
    from broker.handlers import groups as handlers
    from broker.group_coordinator.runtime import GroupCoordinator
    from broker.handlers.context import ClientInfo

    _, replicas = broker
    clock = [NOW]
    settings = CoordinatorSettings(GroupConfig(initial_rebalance_delay_ms=0, new_member_join_timeout_ms=2_000))
    timers = TimerService(clock=lambda: clock[0], driven=False)
    coord = GroupCoordinator(ME, replicas, lambda: IMAGE, settings, now_ms=lambda: clock[0], timers=timers)
    client = ClientInfo("client", "/127.0.0.1")
    try:
        coord.ensure_started()
        await coord.runtime.idle()
        protocols = (("range", SUBSCRIPTION),)

        def join_v3(rebalance_ms: int) -> asyncio.Future[Any]:
            return asyncio.ensure_future(handlers.join(coord, gw.join(
                3, HERE, 10000, rebalance_ms, "", None, "consumer", protocols), 3, client))

        a = await asyncio.wait_for(join_v3(30_000), 1)
        assert (await handlers.sync(coord, gw.sync(3, HERE, a.generation_id, a.member_id, None),
                                    3, client)).error_code == 0
        waiting = join_v3(600_000)  # the group now waits for a to rejoin, up to 10 minutes
        await asyncio.sleep(0)  # the join runs up to its parking
        await coord.runtime.idle()
        clock[0] += 1_999
        timers.run_due()  # what is due at the clock
        await coord.runtime.idle()
        assert not waiting.done() and len(coord.groups(0).groups[HERE].members) == 2
        clock[0] += 1
        timers.run_due()
        answer = await asyncio.wait_for(waiting, 1)
        assert answer.error_code == E.UNKNOWN_MEMBER_ID and answer.member_id == ""
        assert list(coord.groups(0).groups[HERE].members) == [a.member_id]
    finally:
        await coord.close()


async def test_a_failed_append_returns_the_group_to_its_committed_state(broker) -> None:
    """The runtime keeps a rule's new state pending until its records commit: when the append
    is refused the commit is answered with the mapped error and the offsets stay as they were."""
    from broker.handlers import groups as handlers
    from broker.group_coordinator.runtime import GroupCoordinator
    from broker.handlers.context import ClientInfo
    from common.errors import KafkaStorageError

    _, replicas = broker
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    coord = GroupCoordinator(ME, replicas, lambda: IMAGE, SETTINGS, now_ms=lambda: clock[0], timers=timers)
    client = ClientInfo("client", "/127.0.0.1")

    async def commit_v7(offset: int) -> int:
        request = gw.commit(7, HERE, -1, "", [("orders", 0, offset, 4, "")])
        response = await handlers.commit(coord, request, 7, client)
        return response.topics[0].partitions[0].error_code

    try:
        coord.ensure_started()
        await coord.runtime.idle()
        assert await commit_v7(42) == 0
        append = coord.writer.append

        def refuse(*args: object, **kwargs: object) -> int:
            raise KafkaStorageError("the log directory failed")

        coord.writer.append = refuse  # type: ignore[method-assign]
        assert await commit_v7(43) == E.NOT_COORDINATOR  # Kafka maps KAFKA_STORAGE_ERROR so
        assert coord.groups(0).offsets[HERE][("orders", 0)].offset == 42  # reverted, not kept
        coord.writer.append = append  # type: ignore[method-assign]
        commits = [asyncio.ensure_future(commit_v7(offset)) for offset in (44, 45, 46)]
        appends = coord.runtime.appends_total
        assert await asyncio.gather(*commits) == [0, 0, 0]
        assert coord.runtime.appends_total == appends + 2  # the first at once, the other two together
        assert coord.committed_offsets(0).offsets[HERE][("orders", 0)].offset == 46
    finally:
        await coord.close()


async def test_a_session_expires_at_its_deadline_on_the_real_clock(broker) -> None:
    """A client that waits exactly its session timeout (plus 2 ms of clock truncation) finds its
    member gone: the deadline is a timer of its own, not the next 50 ms tick of a loop. A
    heartbeat just before the deadline keeps the member."""
    from broker.handlers import groups as handlers
    from broker.group_coordinator.runtime import GroupCoordinator
    from broker.handlers.context import ClientInfo
    from groups.state import GroupState

    _, replicas = broker
    session_ms = 200
    settings = CoordinatorSettings(GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10))
    coord = GroupCoordinator(ME, replicas, lambda: IMAGE, settings)  # wall-clock rules, monotonic driven timers
    client = ClientInfo("client", "/127.0.0.1")
    try:
        coord.ensure_started()
        await coord.runtime.idle()
        a = await handlers.join(coord, gw.join(3, HERE, session_ms, 30000, "", None, "consumer", (
            ("range", SUBSCRIPTION),)), 3, client)
        assert (await handlers.sync(coord, gw.sync(3, HERE, a.generation_id, a.member_id, None),
                                    3, client)).error_code == 0
        first = coord.runtime.timer_deadline(0, ("expire", HERE))
        await asyncio.sleep(session_ms / 2 / 1000)  # a heartbeat before the deadline keeps the member
        assert (await handlers.heartbeat_(coord, gw.heartbeat(3, HERE, a.generation_id, a.member_id), 3,
                                          client)).error_code == 0
        deadline = coord.runtime.timer_deadline(0, ("expire", HERE))
        assert first is not None and deadline is not None and deadline > first
        await asyncio.sleep((deadline + 2 - coord.timers.now_ms()) / 1000)  # its session timeout, + 2 ms (monotonic)
        group = coord.groups(0).groups[HERE]
        assert group.state is GroupState.EMPTY and not group.members
    finally:
        await coord.close()


async def test_the_periodic_passes_are_timers_of_the_shared_service_and_go_on_close(broker) -> None:
    """The offsets-retention and deleted-topics passes run at their intervals on the timer
    service handed in (the broker's, shared with the purgatories), and close takes them off
    it without closing it."""
    from broker.group_coordinator.runtime import (
        RETENTION_TIMER,
        TOPICS_CHECK_INTERVAL_MS,
        TOPICS_TIMER,
        GroupCoordinator,
    )

    _, replicas = broker
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    settings = CoordinatorSettings(GroupConfig(initial_rebalance_delay_ms=0), retention_check_interval_ms=60_000)
    coord = GroupCoordinator(ME, replicas, lambda: IMAGE, settings, now_ms=lambda: clock[0], timers=timers)
    retention: list[int] = []
    coord._retention_pass = retention.append  # type: ignore[method-assign]
    coord.ensure_started()
    await coord.runtime.idle()
    timers.run_due()  # the pass a load asks for at once
    assert timers.deadline((coord, RETENTION_TIMER)) == NOW + 60_000
    assert timers.deadline((coord, TOPICS_TIMER)) == NOW + TOPICS_CHECK_INTERVAL_MS
    for ms in range(0, 180_001, 1_000):
        clock[0] = NOW + ms
        timers.run_due()
    assert retention == [NOW + 60_000, NOW + 120_000, NOW + 180_000]
    assert timers.deadline((coord, TOPICS_TIMER)) == NOW + 180_000 + TOPICS_CHECK_INTERVAL_MS
    await coord.close()
    assert (coord, RETENTION_TIMER) not in timers and (coord, TOPICS_TIMER) not in timers
    timers.schedule_in("still open", 1, lambda now: None)  # not closed: it is the broker's
    assert "still open" in timers
