"""Finalized features (KIP-584) end to end (issue 28).

- A real voter in this process: a new log is finalized with Kafka 4.1's defaults right after the
  first BeginEpoch; a log written without feature records (as a build from before them wrote it)
  gets the levels it behaved as (transaction.version 2, no ELR) on its next activation, and an
  upgrade then turns ELR on with the cluster-level min.insync.replicas.
- A real cluster (3 controllers, broker 4): ApiVersions through the broker finalizes ELR 1 with
  the image's offset as epoch; kafka-python's describe_features agrees; UpdateFeatures through
  the broker (raw kio requests, every version) refuses a downgrade without its type, validates
  without writing, and downgrades; `tidelog features` describes, disables and upgrades again;
  DescribeConfigs names min.insync.replicas a DYNAMIC_DEFAULT_BROKER_CONFIG (confluent-kafka).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from common.config_schema import Password
from common.errors import ErrorCode
from common.kafka_client import KafkaClient
from common.metadata_version import METADATA_VERSION
from common.protocol import api_versions, messages
from common.protocol.api_keys import ApiKey
from common.waiting import wait_until_async
from localcluster.cluster_layout import NodeSpec, load_or_create_secrets, resolve_layout
from localcluster.launcher import LocalCluster, free_ports
from metadata.records import (
    NO_LEADER,
    BeginEpoch,
    Config,
    ConfigResourceType,
    FeatureLevel,
    NoOp,
    Partition,
    PartitionChange,
    Topic,
)
from quorum.active_controller import ActiveController
from quorum.controller_runtime import decide_result
from quorum.feature_bootstrap import FeatureBootstrapLog
from quorum.feature_control import FeatureUpdate, update_features
from quorum.metadata_log import MetadataLog
from quorum.quorum_settings import METADATA_DIR_NAME, QuorumSettings
from quorum.voters import Voter
from tests.integration.cluster_fixtures import HOSTS, READY_S, running_cluster, spawn_node, wait_until
from tidelog.cli_common import parse_bootstrap_servers

ELR, TV, MV = api_versions.ELR_VERSION, api_versions.TRANSACTION_VERSION_FEATURE, METADATA_VERSION
MIN_ISR = "min.insync.replicas"
TOPIC_ID = "dG9waWMtb3JkZXJzLWFhYQ"
WAIT_S = 10.0


# --- one real voter in this process ------------------------------------------------------------


class Voter1:
    """A MetadataLog and its ActiveController, with (this build) or without (an older build) the
    feature bootstrap; stopped on exit."""

    def __init__(self, data_dir: Path, port: int, *, with_features: bool) -> None:
        self.log = MetadataLog(QuorumSettings(1, {1: Voter(1, "127.0.0.1", port)}, data_dir, Password("s3cret")))
        self.controller = ActiveController(FeatureBootstrapLog(self.log) if with_features else self.log)
        self.task = asyncio.create_task(self.controller.run())

    async def active(self) -> None:
        await wait_until_async("an active controller", lambda: self.controller.is_active, WAIT_S, poll_s=0.02)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.log.close()


@pytest.fixture
async def voters() -> AsyncIterator[list[Voter1]]:
    started: list[Voter1] = []
    try:
        yield started
    finally:
        for voter in started:  # even when the test failed half-way
            await voter.close()


async def test_a_new_log_is_finalized_with_its_first_epoch(tmp_path: Path, voters: list[Voter1]) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    voters.append(voter := Voter1(tmp_path, port, with_features=True))
    await voter.active()
    records = [r for _, r in voter.log.records_from(0, 100)]
    assert records == [BeginEpoch(voter.controller.epoch), FeatureLevel(ELR, 1), FeatureLevel(MV, 2),
                       FeatureLevel(TV, 2), Config(ConfigResourceType.BROKER, "", MIN_ISR, "1")]


async def test_an_old_log_keeps_its_behaviour_until_upgraded(tmp_path: Path, voters: list[Voter1]) -> None:
    (port,) = free_ports(("127.0.0.1",), 1)
    voters.append(old := Voter1(tmp_path, port, with_features=False))  # as a build without features wrote it
    await old.active()
    assert (await old.controller.append([Topic("orders", "dG9waWMtb3JkZXJzLWFhYQ"), NoOp()], 2.0)).committed
    assert old.log.image().features.levels == {}
    voters.remove(old)
    await old.close()

    voters.append(new := Voter1(tmp_path, port, with_features=True))
    await new.active()
    image = new.log.image()
    assert image.features.levels == {MV: 1, TV: 2}  # what it answered before: TV 2, and no ELR
    assert image.config(ConfigResourceType.BROKER, "") == {}
    assert image.topic("orders") is not None

    answer, outcome = await decide_result(new.controller, lambda i: update_features(i, [FeatureUpdate(ELR, 1)]), 5.0)
    assert outcome is not None and outcome.committed and dict(answer.levels) == {MV: 1, TV: 2, ELR: 1}
    image = new.log.image()
    assert image.features.levels == {MV: 1, TV: 2, ELR: 1}
    assert image.config(ConfigResourceType.BROKER, "") == {MIN_ISR: "1"}

    voters.remove(new)
    await new.close()
    voters.append(again := Voter1(tmp_path, port, with_features=True))
    await again.active()
    last = again.log.records_from(image.offset + 1, 100)
    assert [r for _, r in last] == [BeginEpoch(again.controller.epoch)]  # nothing more to finalize


async def test_an_old_log_writes_partition_changes_short_once_upgraded(tmp_path: Path, voters: list[Voter1]) -> None:
    """metadata.version 1 (a log of the builds before) keeps the full PartitionChange the builds
    before read; the first append after the upgrade to 2 commits is short (MetadataLog.append)."""
    (port,) = free_ports(("127.0.0.1",), 1)
    voters.append(old := Voter1(tmp_path, port, with_features=False))
    await old.active()
    assert (await old.controller.append([Topic("orders", TOPIC_ID), Partition(TOPIC_ID, 0, (1,), (1,), leader=1),
                                          NoOp()], 2.0)).committed
    voters.remove(old)
    await old.close()
    voters.append(new := Voter1(tmp_path, port, with_features=True))
    await new.active()
    assert new.log.image().feature_level(MV) == 1

    def moved(leader: int) -> dict[str, object]:  # the map of a leadership change as the log holds it
        return [m for _, m in new.log.record_maps_from(0, 1000) if m["type"] == 5 and m.get("leader") == leader][-1]

    assert (await new.controller.append([PartitionChange(TOPIC_ID, 0, leader=NO_LEADER)], 2.0)).committed
    assert set(moved(NO_LEADER)) == {"type", "version", "topic_id", "partition_id", "isr", "elr", "leader",
                                     "replicas", "leader_recovery_state"}
    upgrade = update_features(new.log.image(), [FeatureUpdate(MV, 2)])
    assert (await new.controller.append(upgrade.records, 2.0)).committed and new.log.image().feature_level(MV) == 2
    assert (await new.controller.append([PartitionChange(TOPIC_ID, 0, leader=1)], 2.0)).committed
    assert set(moved(1)) == {"type", "version", "topic_id", "partition_id", "leader"}
    partition = new.log.image().topic("orders").partitions[0]  # type: ignore[union-attr]
    assert (partition.leader, partition.isr, partition.replicas) == (1, (1,), (1,))


# --- a real cluster ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("features") / "cluster") as started:
        # the broker closes connections until it serves clients ("still starting"): raw requests wait
        wait_until("the broker serving clients", lambda: finalized(started))
        yield started


def call(cluster: LocalCluster, api_key: ApiKey, version: int, request: Any) -> Any:
    assert cluster.bootstrap_servers is not None
    with KafkaClient(parse_bootstrap_servers(cluster.bootstrap_servers)) as client:
        return client.call(None, api_key, version, request, messages.encode_request,
                           messages.response_decoder(api_key))


def finalized(cluster: LocalCluster) -> tuple[dict[str, int], int]:
    """ApiVersions v3 through the broker: the finalized levels and their epoch."""
    answer = call(cluster, ApiKey.API_VERSIONS, 3, api_versions.request(3, "tidelog-test", "1.0"))
    return {f.name: f.max_version_level for f in answer.finalized_features}, answer.finalized_features_epoch


def update(cluster: LocalCluster, version: int, *updates: tuple[str, int, int], validate_only: bool = False) -> Any:
    m = messages.request_module(ApiKey.UPDATE_FEATURES, version)
    keys = tuple(messages.build(m.FeatureUpdateKey, feature=name, max_version_level=level, upgrade_type=kind,
                                allow_downgrade=kind != 1) for name, level, kind in updates)
    request = messages.build(m.UpdateFeaturesRequest, feature_updates=keys, validate_only=validate_only)
    return call(cluster, ApiKey.UPDATE_FEATURES, version, request)


def cli(cluster: LocalCluster, *args: str) -> tuple[int, str]:
    from tidelog.cli import main
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["features", *args, "--admin-url", cluster.admin_url])
    return code, out.getvalue()


def test_a_new_cluster_finalizes_elr_in_api_versions(cluster: LocalCluster) -> None:
    levels, epoch = finalized(cluster)
    assert levels == {MV: 2, TV: 2, ELR: 1} and epoch > 0

    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=10_000)
    try:
        described = admin.describe_features()
        assert {n: d["finalized"][1] for n, d in described.items() if "finalized" in d} == levels
        assert described[ELR]["supported"] == (0, 1) and described[ELR]["finalized_epoch"] == epoch
        # kafka-python's update_features, to the "controller" Metadata names (the broker)
        assert admin.update_features({TV: ("SAFE_DOWNGRADE", 2)}, validate_only=True) == {TV: "OK"}
    finally:
        admin.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_update_features_through_the_broker(cluster: LocalCluster, version: int) -> None:
    refused = update(cluster, version, (TV, 1, 1))  # a downgrade sent as an upgrade
    assert refused.error_code == ErrorCode.INVALID_UPDATE_VERSION, refused
    assert "without setting the upgrade type" in refused.error_message
    if version >= 1:  # v0 has no validate_only
        dry = update(cluster, version, (TV, 1, 2), validate_only=True)
        assert dry.error_code == ErrorCode.NONE and finalized(cluster)[0][TV] == 2, dry
    down = update(cluster, version, (TV, 1, 2))
    assert down.error_code == ErrorCode.NONE, down
    if version <= 1:
        assert [(r.feature, r.error_code) for r in down.results] == [(TV, ErrorCode.NONE)]
    levels, epoch = finalized(cluster)  # answered once the broker applied it: read-your-writes
    assert levels[TV] == 1
    up = update(cluster, version, (TV, 2, 1))
    assert up.error_code == ErrorCode.NONE and finalized(cluster)[0][TV] == 2 and finalized(cluster)[1] > epoch


def test_the_cli_disables_and_upgrades_elr(cluster: LocalCluster) -> None:
    code, out = cli(cluster, "describe")
    assert code == 0 and f"Feature: {ELR}\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1" \
        in out, out
    code, out = cli(cluster, "disable", "--feature", ELR, "--dry-run")
    assert (code, out) == (0, f"{ELR} can be disabled.\n") and finalized(cluster)[0][ELR] == 1
    code, out = cli(cluster, "upgrade", "--feature", f"{ELR}=0")
    assert code == 1 and out.startswith(f"Could not upgrade {ELR} to 0. Invalid update version 0"), out
    code, out = cli(cluster, "disable", "--feature", ELR)
    assert (code, out) == (0, f"{ELR} was disabled.\n")
    wait_until("the broker without ELR", lambda: ELR not in finalized(cluster)[0])
    code, out = cli(cluster, "describe")
    assert f"Feature: {ELR}\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: -\tEpoch: -" \
        in out, out
    code, out = cli(cluster, "upgrade", "--release-version", "4.1")
    assert (code, out) == (0, f"{TV} was upgraded to 2.\n{ELR} was upgraded to 1.\n")
    wait_until("the broker with ELR", lambda: finalized(cluster)[0].get(ELR) == 1)


def test_min_insync_replicas_is_a_cluster_level_dynamic_default(cluster: LocalCluster) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    broker = ConfigResource(ConfigResource.Type.BROKER, "4")
    entries = admin.describe_configs([broker])[broker].result(timeout=10)
    entry = entries[MIN_ISR]
    assert (entry.value, entry.source) == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    topic = ConfigResource(ConfigResource.Type.TOPIC, "described")
    admin.create_topics([NewTopic("described", 1, 1)])["described"].result(timeout=10)
    entry = admin.describe_configs([topic])[topic].result(timeout=10)[MIN_ISR]
    assert (entry.value, entry.source) == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


def test_the_cli_shows_metadata_version_2_and_refuses_its_downgrade(cluster: LocalCluster) -> None:
    code, out = cli(cluster, "describe")
    assert code == 0 and f"Feature: {MV}\tSupportedMinVersion: 1\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 2" \
        in out, out
    for unsafe, why in (((), "Refusing to perform the requested downgrade because it might delete metadata "
                             "information. Retry using UNSAFE_DOWNGRADE if you want to force the downgrade to proceed."),
                        (("--unsafe",), "Unsafe metadata downgrade is not supported in this version.")):
        code, out = cli(cluster, "downgrade", "--feature", f"{MV}=1", *unsafe)
        assert (code, out) == (1, f"Could not downgrade {MV} to 1. Invalid metadata.version 1. {why} (field: "
                                  "feature_updates)\n1 out of 1 operation(s) failed.\n"), out
    assert finalized(cluster)[0][MV] == 2


# --- a real cluster upgraded from a log of the builds before --------------------------------------


def seed_old_log(spec: NodeSpec, password: str) -> None:
    """What a build from before feature records left in controller `spec`'s metadata dir: a log
    without metadata.version (a cluster-level config, so it is no new cluster)."""

    async def seed() -> None:
        voter = Voter(spec.node_id, spec.host, spec.raft_port)
        log = MetadataLog(QuorumSettings(spec.node_id, {spec.node_id: voter}, spec.directory / METADATA_DIR_NAME,
                                         Password(password)))
        controller = ActiveController(log)  # no FeatureBootstrapLog: the older build
        task = asyncio.create_task(controller.run())
        try:
            await wait_until_async("an active controller", lambda: controller.is_active, WAIT_S, poll_s=0.02)
            assert (await controller.append([Config(ConfigResourceType.BROKER, "", MIN_ISR, "1")], 2.0)).committed
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            log.close()

    asyncio.run(seed())


def metadata_maps(spec: NodeSpec, password: str) -> list[dict[str, Any]]:
    """Every record of the stopped controller's metadata log, as the map its chunk holds."""

    async def read() -> list[dict[str, Any]]:
        voter = Voter(spec.node_id, spec.host, spec.raft_port)
        log = MetadataLog(QuorumSettings(spec.node_id, {spec.node_id: voter}, spec.directory / METADATA_DIR_NAME,
                                         Password(password)))
        try:
            await wait_until_async("the log loaded", lambda: log.image().offset > 0, WAIT_S, poll_s=0.02)
            return [m for _, m in log.record_maps_from(0, 100_000)]
        finally:
            log.close()

    return asyncio.run(read())


def test_an_upgraded_cluster_writes_a_leadership_move_short(tmp_path: Path) -> None:
    """A controller whose log a build before feature records wrote finalizes metadata.version 1
    (PartitionChange in full, which that build reads); `tidelog features upgrade` to 2, and the
    leadership moves of a broker's controlled shutdown are written short."""
    root = (tmp_path / "cluster").resolve()
    root.mkdir()
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    ports = {"raft_port": raft_port, "admin_port": admin_port, "kafka_port": kafka_port, "metrics_port": metrics_port}
    specs = resolve_layout(root, controllers=1, brokers=2, **ports)
    controller = next(s for s in specs if s.role == "controller")
    password = load_or_create_secrets(root).password
    seed_old_log(controller, password)
    with LocalCluster.start(root, controllers=1, brokers=2, ready_timeout=READY_S, spawn=spawn_node,
                            extra_properties={"broker.heartbeat.interval.ms": "200",
                                              "broker.session.timeout.ms": "3000"}, **ports) as cluster:
        try:
            wait_until("the brokers serving clients", lambda: finalized(cluster)[0].get(MV) == 1)
            code, out = cli(cluster, "upgrade", "--feature", f"{MV}=2")
            assert (code, out) == (0, f"{MV} was upgraded to 2.\n"), out
            wait_until("the broker at metadata.version 2", lambda: finalized(cluster)[0].get(MV) == 2)
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
            admin.create_topics([NewTopic("moved", 4, 2)])["moved"].result(timeout=10)
            brokers = [s for s in specs if s.role == "broker"]
            leaving = brokers[0]
            wait_until("every partition with both replicas in sync", lambda: all(
                len(p.isrs) == 2 for p in admin.list_topics("moved", timeout=5).topics["moved"].partitions.values()))
            assert cluster.node(leaving.node_id).stop().outcome == "stopped"  # a controlled shutdown
        finally:
            cluster.stop()
    maps = metadata_maps(controller, password)
    features = [(m["name"], m["level"]) for m in maps if m["type"] == 12]
    assert features[-1] == (MV, 2) and (MV, 1) in features, features
    moves = [m for m in maps if m["type"] == 5 and "leader" in m]
    assert moves and all(set(m) <= {"type", "version", "topic_id", "partition_id", "isr", "leader"} for m in moves), moves
