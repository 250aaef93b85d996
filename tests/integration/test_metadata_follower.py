"""Three real controllers and three metadata followers (brokers 4, 5, 6) in this process.

The followers register, heartbeat until unfenced and long-poll the metadata log; a topic
created through the admin API reaches every follower's image and arrives as the expected
leader/follower changes. SIGKILL of the active controller: the followers heartbeat through
the new active controller and still learn of a later topic. A follower restarted on its
log dir publishes nothing until its image holds its own registration, then every replica it
holds. Every loop is cancelled and every
controller stopped, whatever happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.controller_client import ControllerClient
from broker.follower_settings import FollowerSettings
from broker.metadata_checkpoint import OFFSET_FILE, read_offset_file
from broker.metadata_follower import own_registration_replayed
from broker.metadata_follower_loop import MetadataFollower
from metadata.image import MetadataImage
from metadata.local_changes import LocalReplicaChanges
from metadata.records import Listener
from localcluster.cluster_layout import RPC_SECRET_FILE
from localcluster.launcher import LocalCluster, free_ports
from security.rpc_auth import RpcSigner
from security.rpc_secret import cluster_signer
from common.waiting import wait_until_async
from tests.integration.cluster_fixtures import spawn_node

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
TOKEN = "metadata-follower-test-token"
SESSION_TIMEOUT_MS = 1500
HEARTBEAT_INTERVAL_MS = 200
BROKERS = (4, 5, 6)
WAIT_S = 15.0
POLL_S = 0.05
HTTP_TIMEOUT_S = 15.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    raft_port, admin_port = free_ports(HOSTS)
    with LocalCluster.start(tmp_path / "cluster", controllers=len(HOSTS), raft_port=raft_port,
                            admin_port=admin_port, ready_timeout=WAIT_S,
                            extra_properties={"admin.token": TOKEN,
                                              "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                                              "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS)},
                            spawn=spawn_node) as started:
        yield started  # every controller stopped on exit, even on failure


async def wait_for(what: str, condition: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    return await wait_until_async(what, condition, timeout_s, poll_s=POLL_S)


class Broker:
    """One follower loop and what its callback saw."""

    def __init__(self, broker_id: int, addresses: list[str], log_dir: Path, signer: RpcSigner | None) -> None:
        self.broker_id, self.signer = broker_id, signer  # its RPCs signed with the data dir's secret
        self.settings = FollowerSettings(
            broker_id=broker_id, incarnation_id=f"incarnation-{broker_id}",
            listeners=(Listener("PLAINTEXT", "127.0.0.1", 19000 + broker_id),), log_dir=log_dir,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, fetch_max_wait_ms=500, checkpoint_interval_ms=100)
        self.client = ControllerClient(addresses, request_timeout=5.0, signer=signer)
        self.follower = MetadataFollower(self.settings, self.client, self.on_changes)
        self.published: list[LocalReplicaChanges] = []
        self.images: list[MetadataImage] = []  # the image of each publish
        self.task: asyncio.Task[None] | None = None

    def on_changes(self, changes: LocalReplicaChanges, image: MetadataImage) -> None:
        assert image is self.follower.state.image
        self.published.append(changes)
        self.images.append(image)

    def start(self) -> None:
        self.task = asyncio.create_task(self.follower.run(), name=f"follower-{self.broker_id}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.client.close()

    def check_alive(self) -> None:
        if self.task is not None and self.task.done() and not self.task.cancelled():
            raise AssertionError(f"follower {self.broker_id} stopped: {self.task.exception()!r}")

    def seen(self, kind: str, topic: str) -> dict[int, int]:
        """partition -> leader epoch of every `kind` change of `topic` the callback saw (the last wins)."""
        return {p.partition_id: p.leader_epoch for changes in self.published
                for p in getattr(changes, kind) if p.topic_name == topic}


async def admin(session: aiohttp.ClientSession, address: str, method: str, path: str,
                body: Any = None) -> tuple[int, Any]:
    async with session.request(method, f"http://{address}{path}", json=body,
                               headers={"Authorization": f"Bearer {TOKEN}"},
                               timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as answer:
        return answer.status, await answer.json()


async def active_controller(session: aiohttp.ClientSession, addresses: list[str]) -> str:
    async def agreed() -> str | None:
        views = []
        for address in addresses:
            try:
                views.append((address, (await admin(session, address, "GET", "/v1/cluster"))[1]))
            except (aiohttp.ClientError, TimeoutError):
                return None
        actives = [address for address, view in views if view["is_active"]]
        return actives[0] if len(actives) == 1 and len({v["active_controller"] for _, v in views}) == 1 else None

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:  # bounded by the deadline
        found = await agreed()
        if found:
            return found
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"no agreed active controller among {addresses} in {WAIT_S}s")


async def create_topic(session: aiohttp.ClientSession, address: str, name: str, partitions: int,
                       replication_factor: int) -> dict[str, Any]:
    async def attempt() -> dict[str, Any] | None:
        status, body = await admin(session, address, "POST", "/v1/topics", {
            "name": name, "partitions": partitions, "replication_factor": replication_factor})
        return body if status == 201 else None

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:  # bounded: right after a failover a write may need a retry
        created = await attempt()
        if created is not None:
            return created
        await asyncio.sleep(0.2)
    raise AssertionError(f"could not create topic {name} through {address}")


def check_topic(brokers: list[Broker], created: dict[str, Any]) -> None:
    """Every follower's image holds the topic as created; its callback saw its own roles."""
    name = created["name"]
    for broker in brokers:
        topic = broker.follower.state.image.topic(name)
        assert topic is not None and topic.topic_id == created["topic_id"]
        for view in created["partitions"]:
            partition = topic.partitions[view["partition"]]
            assert (partition.leader, list(partition.replicas), partition.leader_epoch) == (
                view["leader"], view["replicas"], view["leader_epoch"]), (broker.broker_id, view)
        leads = {p["partition"]: p["leader_epoch"] for p in created["partitions"] if p["leader"] == broker.broker_id}
        follows = {p["partition"]: p["leader_epoch"] for p in created["partitions"]
                   if p["leader"] != broker.broker_id and broker.broker_id in p["replicas"]}
        assert broker.seen("leaders", name) == leads and broker.seen("elected_leaders", name) == leads
        assert broker.seen("followers", name) == follows, (broker.broker_id, broker.published)


async def test_followers_track_topics_across_a_controller_failover(cluster: LocalCluster, tmp_path: Path) -> None:
    addresses = [node.spec.admin_address for node in cluster.controllers]
    brokers = [Broker(b, addresses, tmp_path / f"broker-{b}", cluster_signer(cluster.root / RPC_SECRET_FILE, b))
               for b in BROKERS]
    async with aiohttp.ClientSession() as session:
        try:
            for broker in brokers:
                broker.start()

            def unfenced() -> bool:
                for broker in brokers:
                    broker.check_alive()
                return all(b.follower.state.registered and not b.follower.state.fenced for b in brokers)

            await wait_for("brokers 4, 5 and 6 unfenced", unfenced)
            assert len({b.follower.state.broker_epoch for b in brokers}) == 3

            active = await active_controller(session, addresses)
            created = await create_topic(session, active, "orders", partitions=6, replication_factor=2)
            await wait_for("every follower at the topic's offset", lambda: all(
                b.follower.state.applied_offset >= created["metadata_offset"] for b in brokers))
            check_topic(brokers, created)

            # SIGKILL the active controller: heartbeats continue through the new one.
            killed = next(n for n in cluster.controllers if n.spec.admin_address == active)
            killed.kill()
            survivors = [a for a in addresses if a != active]
            new_active = await active_controller(session, survivors)
            beats = {b.broker_id: b.follower.heartbeats_ok for b in brokers}
            await wait_for("three heartbeats of every broker answered by the new active controller", lambda: all(
                b.follower.heartbeats_ok >= beats[b.broker_id] + 3
                and b.follower.heartbeat_targets[-3:] == [new_active] * 3 for b in brokers))
            _, views = await admin(session, new_active, "GET", "/v1/brokers")
            assert {v["broker_id"]: v["state"] for v in views} == {b: "UNFENCED" for b in BROKERS}, views
            assert all(not b.follower.state.fenced for b in brokers)

            later = await create_topic(session, survivors[0], "after-failover", partitions=3, replication_factor=3)
            await wait_for("every follower at the later topic's offset", lambda: all(
                b.follower.state.applied_offset >= later["metadata_offset"] for b in brokers))
            check_topic(brokers, later)
            for broker in brokers:
                broker.check_alive()
        finally:
            await asyncio.gather(*(b.stop() for b in brokers))

        # Stopped: each checkpoint holds the applied offset. A restart publishes only once its image
        # holds this incarnation's registration (found by chaos.sim: before that it could lead an
        # epoch its followers had moved past), and then every replica it holds.
        for broker in brokers:
            assert read_offset_file(broker.settings.log_dir) == broker.follower.state.applied_offset
            assert (broker.settings.log_dir / OFFSET_FILE).read_text() == f"0\n{broker.follower.state.applied_offset}\n"
        old = brokers[0]
        restarted = Broker(old.broker_id, survivors, old.settings.log_dir, old.signer)
        try:
            restarted.start()
            await wait_for("the restarted follower's first publish", lambda: restarted.published)
            first, image = restarted.published[0], restarted.images[0]
            assert own_registration_replayed(image, old.broker_id, restarted.follower.state.broker_epoch)
            expected = sorted((t.name, p) for t in image.topics.by_name.values() for p, reg in t.partitions.items()
                              if old.broker_id in reg.replicas)
            assert expected and sorted((p.topic_name, p.partition_id) for p in first.leaders + first.followers) \
                == expected
            assert {p.partition_id for p in first.leaders if p.topic_name == "orders"} == {
                p for p, reg in image.topic("orders").partitions.items() if reg.leader == old.broker_id}
            await wait_for("the restarted follower unfenced", lambda: (
                restarted.check_alive() or (restarted.follower.state.registered
                                            and not restarted.follower.state.fenced)))
        finally:
            await restarted.stop()
