"""Dynamic controllers (KIP-853, issue 28) with real pysyncobj voters in this process: a quorum
grown from 3 to 5 keeps its membership across a restart of every voter (and the added ones
count toward its majority), and every refused change leaves the voter set as it was, with
Kafka's error. Then with real processes: a 3-controller cluster grown to 5 and shrunk to 3
through the admin API and the CLI while topics are created and broker 4 heartbeats; and
`tidelog up --controllers 4` growing a running 3-controller data dir, which restarts grown.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from common.config_schema import Password
from common.errors import ErrorCode
from common.kafka_client import KafkaClient
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.properties import load_properties, set_entries
from common.waiting import wait_until_async
from localcluster.cluster_layout import CONTROLLER, NodeSpec
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess
from quorum.metadata_log import MetadataLog
from quorum.quorum_settings import QuorumSettings
from quorum.voter_set import (
    OBSERVER_SESSION_TIMEOUT,
    ZERO_DIRECTORY_ID,
    VoterChangeError,
    VoterEntry,
    directory_id_bytes,
)
from quorum.voters import Voter
from tests.integration.cli_cluster import CliCluster
from tests.integration.cluster_fixtures import BROKER_ID, http, running_cluster, spawn_node, wait_until
from tests.integration.test_describe_quorum import describe_through_broker
from tidelog.cli_common import parse_bootstrap_servers

HOSTS = tuple(f"127.0.0.{i}" for i in range(1, 7))
STATIC = (1, 2, 3)
WAIT_S = 15.0
CHANGE_S = 5.0


async def until(what: str, condition: Callable[[], Any]) -> Any:
    return await wait_until_async(what, condition, WAIT_S, poll_s=0.05)


class Quorum:
    """Voters 1..6 on 127.0.0.N, one port; 1-3 static, the others join. Every voter closed on exit."""

    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.logs: dict[int, MetadataLog] = {}

    def start(self, node_id: int, password: str = "s3cret", *,
              observer_session_timeout: float = OBSERVER_SESSION_TIMEOUT) -> MetadataLog:
        static = {i: Voter(i, HOSTS[i - 1], self.port) for i in STATIC}
        listener = None if node_id in static else Voter(node_id, HOSTS[node_id - 1], self.port)
        log = MetadataLog(QuorumSettings(node_id, static, self.root / f"controller-{node_id}", Password(password),
                                         listener=listener, observer_session_timeout=observer_session_timeout))
        self.logs[node_id] = log
        return log

    def stop(self, node_id: int) -> None:
        self.logs.pop(node_id).close()

    def entry(self, node_id: int) -> VoterEntry:
        return VoterEntry(node_id, self.logs[node_id].directory_id, f"{HOSTS[node_id - 1]}:{self.port}")

    async def leader(self) -> MetadataLog:
        """The leader once it committed an entry of its term: before that it answers a voter change
        REQUEST_TIMED_OUT, a retriable error (Kafka's "waiting for leader to establish HWM"), which
        a test asking right after an election or a handover got at load 12."""
        found: MetadataLog = await until("a leader that committed an entry of its term", lambda: next(
            (log for log in self.logs.values() if log.is_voter() and ready(log)), None))
        return found

    def views(self) -> dict[int, list[int]]:
        return {i: log.voter_set().ids for i, log in sorted(self.logs.items())}


@pytest.fixture
async def quorum(tmp_path: Path) -> AsyncIterator[Quorum]:
    [port] = free_ports(HOSTS, 1)
    started = Quorum(tmp_path, port)
    try:
        yield started
    finally:
        for node_id in list(started.logs):  # even when the test failed half-way
            started.stop(node_id)


async def grow(quorum: Quorum, *node_ids: int) -> MetadataLog:
    leader = await quorum.leader()
    for node_id in node_ids:
        quorum.start(node_id)
        assert not quorum.logs[node_id].is_voter()  # an observer until added
        await leader.add_voter(quorum.entry(node_id), timeout_s=CHANGE_S)
    return leader


async def test_a_grown_quorum_keeps_its_membership_across_a_restart(quorum: Quorum) -> None:
    for node_id in STATIC:
        quorum.start(node_id)
    leader = await grow(quorum, 4, 5)
    assert leader.voter_set().ids == [1, 2, 3, 4, 5]
    await until("every voter holds the grown set", lambda: set(map(tuple, quorum.views().values())) == {(1, 2, 3, 4, 5)})
    quorum.logs[4].forceLogCompaction()  # one voter restarts from a dump, the others from their journal
    await until("voter 4 wrote a dump", lambda: (quorum.root / "controller-4" / "quorum.dump").exists())
    for node_id in list(quorum.logs):
        quorum.stop(node_id)
    for node_id in (1, 2, 3, 4, 5):  # the static config still names 1-3 only
        quorum.start(node_id)
    assert quorum.views() == {i: [1, 2, 3, 4, 5] for i in (1, 2, 3, 4, 5)}
    await quorum.leader()
    quorum.stop(1)
    quorum.stop(2)
    # 3, 4 and 5 are a majority of five only if 4 and 5 count as voters after the restart
    await until("a leader among 3, 4 and 5", lambda: next(
        (i for i, log in quorum.logs.items() if log.leadership()[0]), None))


async def test_refused_changes_leave_the_voter_set_as_it_was(quorum: Quorum) -> None:
    for node_id in STATIC:
        quorum.start(node_id)
    leader = await grow(quorum, 4, 5)
    leader_id = next(i for i, log in quorum.logs.items() if log is leader)
    follower = next(log for i, log in quorum.logs.items() if log is not leader and i in STATIC)
    before = [1, 2, 3, 4, 5]
    await until("every voter holds the grown set", lambda: set(map(tuple, quorum.views().values())) == {tuple(before)})

    async def refused(change: Any) -> VoterChangeError:
        with pytest.raises(VoterChangeError) as caught:
            await change
        assert leader.voter_set().ids == before
        return caught.value

    # an observer that never catches up (it cannot read the quorum: another password)
    quorum.start(6, password="not-the-quorum's")
    error = await refused(leader.add_voter(quorum.entry(6), timeout_s=1.5))
    assert error.error == "REQUEST_TIMED_OUT" and "lagging behind" in error.message
    quorum.stop(6)
    # voter id 4 again, from another disk (another directory id)
    other_disk = VoterEntry(4, "AQIDBAUGBwgJCgsMDQ4PEA", f"{HOSTS[5]}:{quorum.port}")
    assert (await refused(leader.add_voter(other_disk, timeout_s=1.0))).error == "DUPLICATE_VOTER"
    # removing voter 4 under another directory id, or a voter that does not exist
    assert (await refused(leader.remove_voter(4, "AQIDBAUGBwgJCgsMDQ4PEA", timeout_s=1.0))).error == "VOTER_NOT_FOUND"
    assert (await refused(leader.remove_voter(9, ZERO_DIRECTORY_ID, timeout_s=1.0))).error == "VOTER_NOT_FOUND"
    # asked of a follower
    assert (await refused(follower.add_voter(quorum.entry(4), timeout_s=1.0))).error == "NOT_LEADER_OR_FOLLOWER"
    # two of five down (the leader keeps its majority): removing a third that is up would leave
    # two reachable of four
    others = [i for i in before if i != leader_id]
    down, survivor = others[:2], others[2]
    for node_id in down:
        quorum.stop(node_id)
    await until("the leader no longer hears from the stopped voters", lambda: not set(down) & live(leader))
    entry = leader.voter_set().get(survivor)
    assert entry is not None
    error = await refused(leader.remove_voter(survivor, entry.directory_id, timeout_s=1.0))
    assert error.error == "REQUEST_TIMED_OUT" and "majority" in error.message


# past pysyncobj's longest election timeout (1.4 s), short of its connection timeout (3.5 s)
META_STALL_S = 1.6


async def test_a_new_voter_stalled_in_its_journal_meta_write_does_not_depose_the_leader(quorum: Quorum) -> None:
    """Issue 35: pysyncobj looks at its election deadline after its journal's once-a-second meta
    write (the commit index, fsynced). A newly added voter gets a commit index to write at once
    (it has just replicated the log), and under other I/O that fsync can take seconds: its
    deadline expired inside it, pysyncobj stood at term 2 without a pre-vote or a look at its
    socket, and the leader, told of term 2, stepped down (3 of 3 on 2514d38; seen in CI at load
    9-10 as NOT_LEADER_OR_FOLLOWER in test_refused_changes_leave_the_voter_set_as_it_was)."""
    for node_id in STATIC:
        quorum.start(node_id)
    leader = await grow(quorum, 4)
    new = quorum.logs[4]
    await until("controller 4 learns it is a voter", new.is_voter)
    term = leader.leadership()[1]
    journal = new._journal
    store = journal._store_meta
    stalled = threading.Event()

    def slow_store() -> None:  # the fault is a span of time: an fsync held up by other I/O
        journal._store_meta = store  # type: ignore[method-assign]  # once
        time.sleep(META_STALL_S)
        store()
        stalled.set()

    def arm() -> None:
        journal._store_meta = slow_store  # type: ignore[method-assign]
        journal._meta_saved = False  # a commit index to write at the next one-second timer

    await new.on_tick(arm)
    await until("controller 4's meta write stalled", stalled.is_set)
    for log in (new, new, leader, leader):  # 4's candidacy, if any, and the leader hearing of its term
        await log.on_tick(lambda: None)
    assert {i: log.leadership() for i, log in quorum.logs.items()} == \
        {i: (log is leader, term) for i, log in quorum.logs.items()}


def ready(log: MetadataLog) -> bool:
    """Leads and committed an entry of its term (read off its tick thread: a test's approximation)."""
    return log.leadership()[0] and log._leader_view().committed_in_term


def live(log: MetadataLog) -> set[int]:
    """The voters the leader heard from lately (read off its tick thread: a test's approximation)."""
    return log._live_voters()


async def test_an_observer_joins_through_a_leader_its_config_does_not_name(quorum: Quorum) -> None:
    for node_id in STATIC:
        quorum.start(node_id)
    leader = await grow(quorum, 4, 5)
    for node_id in STATIC:  # down to voters 4 and 5: none of the static config is left
        leader = await remove(quorum, leader, node_id)
    assert leader.voter_set().ids == [4, 5]
    observer = quorum.start(6)  # its config names 1-3 only
    # what the admin API's add tells it first (POST /v1/quorum/replica): the current voters
    assert await observer.on_tick(lambda: observer.learn_peers([v.raft_address for v in leader.voter_set()])) \
        == [quorum.entry(4).raft_address, quorum.entry(5).raft_address]
    await leader.add_voter(quorum.entry(6), timeout_s=CHANGE_S)
    await until("controller 6 learns it is a voter", quorum.logs[6].is_voter)
    assert quorum.logs[6].voter_set().ids == [4, 5, 6]


async def remove(quorum: Quorum, leader: MetadataLog, node_id: int) -> MetadataLog:
    """Remove `node_id`; when it leads, it hands over and the next leader is asked. The leader after."""
    for _ in range(3):  # bounded: a handover, then the removal at the next leader
        try:
            await leader.remove_voter(node_id, ZERO_DIRECTORY_ID, timeout_s=CHANGE_S)
            return leader
        except VoterChangeError as exc:
            assert exc.error == "NOT_LEADER_OR_FOLLOWER", exc.message
            leader = await quorum.leader()
    raise AssertionError(f"voter {node_id} was not removed")


def replicates_to(leader: MetadataLog, address: str) -> bool:
    """Whether the leader still holds `address` as an observer anywhere: a learner, a pysyncobj
    read-only node, or a node its transport connects to (read off its tick thread: a test's
    approximation)."""
    transport = leader._SyncObj__transport
    return (address in {o.raft_address for o in leader.learners()}
            or address in {n.address for n in leader._SyncObj__readonlyNodes}
            or address in transport._nodeAddrToNode)


SHORT_SESSION_S = 1.0  # the observer session timeout of the test's leader (Kafka's is 300 s)


async def test_a_gone_observer_is_forgotten_and_can_be_added_again(quorum: Quorum) -> None:
    """Kafka's leader forgets an observer that stopped fetching (its observer session timeout):
    a removed voter, fed as an observer while it answers, is forgotten once it is stopped, and
    added again once it is back."""
    for node_id in STATIC:
        quorum.start(node_id, observer_session_timeout=SHORT_SESSION_S)
    leader = await grow(quorum, 4)
    await leader.remove_voter(4, quorum.entry(4).directory_id, timeout_s=CHANGE_S)  # 4 never leads: no handover
    address = quorum.entry(4).raft_address
    assert [o.node_id for o in leader.learners()] == [4]  # kept as an observer
    await asyncio.sleep(2 * SHORT_SESSION_S)
    assert [o.node_id for o in leader.learners()] == [4]  # it answers: kept past the session timeout
    quorum.stop(4)
    await until("the leader forgets the stopped observer", lambda: not replicates_to(leader, address))
    quorum.start(4)
    await leader.add_voter(quorum.entry(4), timeout_s=CHANGE_S)
    await until("controller 4 learns it is a voter again", quorum.logs[4].is_voter)
    assert leader.voter_set().ids == [1, 2, 3, 4]


async def test_the_last_voter_is_never_removed(quorum: Quorum) -> None:
    quorum.start(1)
    quorum.start(2)
    quorum.start(3)
    leader = await quorum.leader()
    leader_id = next(i for i, log in quorum.logs.items() if log is leader)
    for node_id in [i for i in STATIC if i != leader_id]:  # shrink to the leader alone
        await leader.remove_voter(node_id, ZERO_DIRECTORY_ID, timeout_s=CHANGE_S)
    assert leader.voter_set().ids == [leader_id]
    with pytest.raises(VoterChangeError) as caught:
        await leader.remove_voter(leader_id, ZERO_DIRECTORY_ID, timeout_s=1.0)
    assert caught.value.error == "VOTER_NOT_FOUND" and leader.voter_set().ids == [leader_id]


# --- the same with real processes, through the admin API, the CLI and a broker ---------------

NEW_CONTROLLERS = (5, 6)  # 127.0.0.4 is broker 4
WORKLOAD_MAX_S = 300.0  # the workload's bound; it stops when the test does
FAILED_PAUSE_S = 0.05  # after a refused create (a handover), so retries do not spin


def start_controller(cluster: LocalCluster, node_id: int, raft_port: int, admin_port: int,
                     extra: Mapping[str, str] | None = None) -> NodeProcess:
    """Controller `node_id` on 127.0.0.N, configured like controller 1 (with `extra` entries) but
    not among the static voters: it starts as an observer (controller.quorum.listener). Forked
    from the test zygote like the cluster's own nodes (a real node process; ~2 s instead of a
    fresh Python's ~12 s loaded)."""
    base = cluster.node(1).spec
    host = f"127.0.0.{node_id}"
    spec = NodeSpec(node_id, CONTROLLER, host, raft_port, admin_port, base.directory.parent / f"controller-{node_id}")
    spec.directory.mkdir(mode=0o700)
    text = set_entries(base.properties_path.read_text(encoding="utf-8"), {
        "node.id": str(node_id), "controller.listener": spec.admin_address,
        "controller.quorum.listener": spec.quorum_address, "metadata.log.dir": str(spec.directory), **(extra or {})},
        str(spec.properties_path), "A controller joining the running quorum (test_dynamic_controllers).")
    spec.properties_path.write_text(text, encoding="utf-8")
    spec.properties_path.chmod(0o600)
    return spawn_node(spec)


def voter_ids(url: str) -> list[int] | None:
    status, body = http(f"{url}/v1/quorum/voters")
    return [v["node_id"] for v in json.loads(body)["voters"]] if status == 200 else None


def kafka_call(cluster: LocalCluster, api_key: ApiKey, version: int, request: Any) -> Any:
    assert cluster.bootstrap_servers is not None
    with KafkaClient(parse_bootstrap_servers(cluster.bootstrap_servers)) as client:
        return client.call(None, api_key, version, request, messages.encode_request,
                           messages.response_decoder(api_key))


def add_raft_voter(cluster: LocalCluster, node_id: int, api: str) -> Any:
    """AddRaftVoter v1 through broker 4, as a Kafka admin client sends it (raw kio request)."""
    replica = json.loads(http(f"http://{api}/v1/quorum/replica")[1])
    m = messages.request_module(ApiKey.ADD_RAFT_VOTER, 1)
    host, port = api.split(":")
    request = m.AddRaftVoterRequest(
        cluster_id=None, timeout=datetime.timedelta(seconds=10), voter_id=node_id,
        voter_directory_id=uuid.UUID(bytes=directory_id_bytes(replica["directory_id"])),
        listeners=(m.Listener(name="CONTROLLER", host=host, port=int(port)),), ack_when_committed=True)
    return kafka_call(cluster, ApiKey.ADD_RAFT_VOTER, 1, request)


def test_an_add_that_timed_out_leaves_no_observer_behind_and_a_later_add_works(tmp_path: Path) -> None:
    """AddRaftVoter for a controller that never answers the leader (another quorum password)
    times out; Kafka's leader never knew such a replica (it never fetched), so ours stops
    replicating to it at once: no observer listed, no connection kept. Restarted with the
    quorum's password, the same controller is added."""
    [raft_port, admin_port] = free_ports(["127.0.0.5"], 2)
    started: list[NodeProcess] = []
    try:  # controller 5 stops after the cluster, as in the test above
        with running_cluster(tmp_path / "cluster") as cluster:
            active = json.loads(http(f"{cluster.admin_url}/v1/cluster")[1])["active_controller"]
            leader_url = cluster.node(active).spec.admin_url
            api = f"127.0.0.5:{admin_port}"
            started.append(start_controller(cluster, 5, raft_port, admin_port,
                                            {"controller.cluster.password": "not-the-quorum's"}))
            wait_until("controller 5 answers", lambda: http(f"http://{api}/v1/quorum/replica")[0] == 200)
            assert add_raft_voter(cluster, 5, api).error_code == ErrorCode.REQUEST_TIMED_OUT
            assert voter_ids(leader_url) == [1, 2, 3]
            # the broker's forwarded call may give up before the controller's add (its own deadline)
            # ends; from that end, the leader's next tick drops the observer (c8ad164 listed it, and
            # replicated to it, for ever)
            wait_until("the leader lists no observer", lambda: json.loads(
                http(f"{leader_url}/v1/quorum/voters")[1])["observers"] == [])
            assert started[0].stop().exit_status == 0
            properties = started[0].spec.properties_path
            properties.write_text(set_entries(properties.read_text(encoding="utf-8"), {
                "controller.cluster.password": load_properties(cluster.node(1).spec.properties_path)[
                    "controller.cluster.password"]}, str(properties),
                "(test: the quorum's password this time)"), encoding="utf-8")
            started.append(spawn_node(started[0].spec))
            wait_until("controller 5 answers", lambda: http(f"http://{api}/v1/quorum/replica")[0] == 200)
            status, body = http(f"{leader_url}/v1/quorum/voters", "POST", {"voter_id": 5, "api_address": api})
            assert status == 200, body
            assert voter_ids(leader_url) == [1, 2, 3, 5]
            wait_until("controller 5 lists itself a voter", lambda: voter_ids(f"http://{api}") == [1, 2, 3, 5])
    finally:
        for node in started:
            node.stop()


def remove_raft_voter(cluster: LocalCluster, node_id: int, directory: uuid.UUID) -> Any:
    m = messages.request_module(ApiKey.REMOVE_RAFT_VOTER, 0)
    return kafka_call(cluster, ApiKey.REMOVE_RAFT_VOTER, 0, m.RemoveRaftVoterRequest(
        cluster_id=None, voter_id=node_id, voter_directory_id=directory))


class Workload:
    """Creates topics through one controller and watches broker 4, on a thread, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fenced_seen = False
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self.created: list[str] = []
        self.failed: list[tuple[str, int, bytes]] = []
        self.epochs: set[int] = set()

    def _run(self) -> None:
        # bounded by time, not by a count: a fast machine must not run out of topics before the
        # test's last phase waits for ten more
        deadline = time.monotonic() + WORKLOAD_MAX_S
        i = 0
        while not self.stopped.is_set() and time.monotonic() < deadline:
            name = f"grow-{i}"
            i += 1
            status, body = http(f"{self.url}/v1/topics", "POST", {"name": name, "partitions": 1,
                                                                 "replication_factor": 1})
            if status == 201:
                self.created.append(name)
            else:
                self.failed.append((name, status, body[:200]))
                self.stopped.wait(FAILED_PAUSE_S)
            status, body = http(f"{self.url}/v1/brokers/{BROKER_ID}")
            if status == 200:
                broker = json.loads(body)
                self.fenced_seen |= bool(broker["fenced"])
                self.epochs.add(broker["broker_epoch"])

    def __enter__(self) -> Workload:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


def test_grow_to_five_and_shrink_to_three_while_topics_are_created(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from tidelog.cli import main

    raft_port, admin_port = free_ports([f"127.0.0.{i}" for i in NEW_CONTROLLERS], 2)
    started: list[NodeProcess] = []
    # the controllers it started stop after the cluster: broker 4's controlled shutdown needs them
    # (they are the quorum by then; without one it waits out its shutdown timeout, ~30 s)
    try:
        with running_cluster(tmp_path / "cluster") as cluster:
            urls = {n.spec.node_id: n.spec.admin_url for n in cluster.controllers}
            active = json.loads(http(f"{urls[1]}/v1/cluster")[1])["active_controller"]
            removed = [active, next(i for i in (1, 2, 3) if i != active)]
            kept = next(i for i in (1, 2, 3) if i not in removed)
            with Workload(urls[kept]) as workload:
                wait_until("the workload created topics", lambda: len(workload.created) >= 5)
                for node_id in NEW_CONTROLLERS:  # the first through the admin API, the second with AddRaftVoter
                    started.append(start_controller(cluster, node_id, raft_port, admin_port))
                    api = f"127.0.0.{node_id}:{admin_port}"
                    wait_until(f"controller {node_id} answers", lambda: http(f"http://{api}/v1/quorum/replica")[0] == 200)
                    if node_id == NEW_CONTROLLERS[0]:
                        status, body = http(f"{urls[kept]}/v1/quorum/voters", "POST",
                                            {"voter_id": node_id, "api_address": api})
                        assert status == 200, body
                    else:
                        assert add_raft_voter(cluster, node_id, api).error_code == ErrorCode.NONE
                    urls[node_id] = f"http://{api}"
                # bad input through the Kafka API: Kafka's errors, the set unchanged
                assert add_raft_voter(cluster, NEW_CONTROLLERS[0], urls[NEW_CONTROLLERS[0]].removeprefix("http://"),
                                      ).error_code == ErrorCode.DUPLICATE_VOTER
                assert remove_raft_voter(cluster, 9, uuid.UUID(int=0)).error_code == ErrorCode.VOTER_NOT_FOUND
                # and through the admin API: 4xx JSON naming the field
                for bad, expected in [
                    ({"voter_id": 7, "api_address": f"127.0.0.7:{admin_port}"}, (504, "REQUEST_TIMED_OUT", "api_address")),
                    ({"api_address": f"127.0.0.7:{admin_port}"}, (400, "INVALID_REQUEST", "voter_id")),
                    ({"voter_id": 7, "api_address": "nowhere"}, (400, "INVALID_REQUEST", "api_address")),
                    ({"voter_id": 7, "api_address": "127.0.0.7:1", "extra": 1}, (400, "INVALID_REQUEST", "extra")),
                ]:
                    status, answer = http(f"{urls[kept]}/v1/quorum/voters", "POST", bad)
                    error = json.loads(answer)
                    assert (status, error["error"], error["field"]) == expected, answer
                status, answer = http(f"{urls[kept]}/v1/quorum/voters/{kept}", "DELETE")
                assert (status, json.loads(answer)["field"]) == (400, "directory_id"), answer
                assert voter_ids(urls[kept]) == [1, 2, 3, *NEW_CONTROLLERS]
                grown = [1, 2, 3, *NEW_CONTROLLERS]
                for url in urls.values():
                    wait_until(f"{url} lists five voters", lambda: voter_ids(url) == grown)
                described = describe_through_broker(cluster, 2)
                assert sorted(v.replica_id for v in described.topics[0].partitions[0].current_voters) == grown
                directories = {v.replica_id: v.replica_directory_id for v in described.topics[0].partitions[0].current_voters}
                for node_id in NEW_CONTROLLERS:  # an added controller's directory id; the static ones have none
                    replica = json.loads(http(f"{urls[node_id]}/v1/quorum/replica")[1])
                    assert directories[node_id] == uuid.UUID(bytes=directory_id_bytes(replica["directory_id"]))
                assert directories[kept] is None  # Kafka's zero Uuid, which kio reads as null
                # the active controller first (it hands over), through the CLI; then another, through the API
                assert main(["quorum", "remove-controller", "--admin-url", urls[kept],
                             "--controller-id", str(removed[0])]) == 0
                assert f"Removed controller {removed[0]}" in capsys.readouterr().out
                status, body = http(f"{urls[kept]}/v1/quorum/voters")
                entry = next(v for v in json.loads(body)["voters"] if v["node_id"] == removed[1])
                status, body = http(f"{urls[kept]}/v1/quorum/voters/{removed[1]}?directory_id={entry['directory_id']}",
                                    "DELETE")
                assert status == 200, body
                shrunk = sorted([kept, *NEW_CONTROLLERS])
                assert voter_ids(urls[kept]) == shrunk
                for node_id in removed:  # the operator stops what it removed
                    assert cluster.node(node_id).stop().exit_status == 0
                count = len(workload.created)
                try:
                    wait_until("topics are created with the shrunk quorum", lambda: len(workload.created) >= count + 10)
                except AssertionError as exc:  # WaitTimeout: say what the workload saw
                    raise AssertionError(f"{exc}; created {len(workload.created)} (was {count}), last refusals "
                                         f"{workload.failed[-3:]}, workload running: {workload.thread.is_alive()}"
                                         ) from exc
            assert not workload.fenced_seen and len(workload.epochs) == 1, (workload.fenced_seen, workload.epochs)
            topics = {t["name"] for t in json.loads(http(f"{urls[kept]}/v1/topics")[1])}
            assert set(workload.created) <= topics  # no acknowledged write lost
            assert len(workload.failed) <= 2, workload.failed  # the handover may refuse one or two (retriable)
            for node_id in shrunk:  # every remaining voter agrees, the new ones included
                wait_until(f"controller {node_id} holds every topic", lambda: set(workload.created) <= {
                    t["name"] for t in json.loads(http(f"{urls[node_id]}/v1/topics")[1])})
            # broker 4 follows the voter set: with every controller of its static config stopped, it
            # still reaches the quorum (its RPCs, DescribeQuorum forwarded) and stays unfenced
            broker_log = cluster.brokers[0].spec.log_path
            apis = ", ".join(sorted(urls[i].removeprefix("http://") for i in shrunk))
            wait_until("broker 4 follows the shrunk voter set", lambda: f"voters are now at {apis}" in
                       broker_log.read_text(errors="replace"))
            assert cluster.node(kept).stop().exit_status == 0
            new = urls[NEW_CONTROLLERS[0]]
            status, body = http(f"{new}/v1/topics", "POST", {"name": "after-shrink", "partitions": 1,
                                                             "replication_factor": 1})
            assert status == 201, body
            described = wait_until("DescribeQuorum through broker 4", lambda: describe_through_broker(cluster, 2))
            assert sorted(v.replica_id for v in described.topics[0].partitions[0].current_voters) == shrunk
            broker = json.loads(http(f"{new}/v1/brokers/{BROKER_ID}")[1])
            assert not broker["fenced"] and {broker["broker_epoch"]} == workload.epochs
    finally:
        for node in started:
            node.stop()


# --- tidelog up --controllers N on an existing data dir --------------------------------------


def test_tidelog_up_grows_an_existing_cluster_and_it_restarts_grown(tmp_path: Path) -> None:
    cluster = CliCluster(tmp_path / "up", HOSTS[:4])
    try:
        base = (*cluster.up_args(), "--brokers", "0", "--detach")
        first = cluster.run(*base, "--controllers", "3")
        assert first.returncode == 0, first.stdout + first.stderr
        grown = cluster.run(*base, "--controllers", "4")  # running in full: it grows as it runs
        assert grown.returncode == 0, grown.stdout + grown.stderr
        assert "controller 4 joined the quorum" in grown.stdout, grown.stdout
        nodes = cluster.layout()["nodes"]
        assert [(n["id"], n["role"]) for n in nodes] == [(i, "controller") for i in (1, 2, 3, 4)]
        fewer = cluster.run(*base, "--controllers", "3")
        assert fewer.returncode == 1 and "remove-controller" in fewer.stderr, fewer.stderr
        assert cluster.run("down").returncode == 0
        again = cluster.run(*base)  # the shape as stored: 4 controllers, controller 4 a voter from its log
        assert again.returncode == 0, again.stdout + again.stderr
        for node in cluster.layout()["nodes"]:
            url = f"http://127.0.0.{node['id']}:{cluster.admin_port}"
            wait_until(f"controller {node['id']} lists 4 voters", lambda: voter_ids(url) == [1, 2, 3, 4])
        assert cluster.run("down").returncode == 0
    finally:
        cluster.cleanup()
