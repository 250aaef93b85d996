"""KIP-966 on the broker (broker/replication/partition.py): below min.insync.replicas the leader's high
watermark stands still, so an ELR member elected after the leader dies has every record a consumer could
read; and the controller's account of an election from the ELR (quorum/replication_control.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.replication.partition import Partition
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from common.errors import ErrorCode
from common.protocol.api_versions import ELR_VERSION
from common.topic_config import MIN_INSYNC_REPLICAS
from metadata.image import MetadataImage
from metadata.records import (
    NO_LEADER,
    Config,
    ConfigResourceType,
    FeatureLevel,
    PartitionChange,
    Record,
    Topic,
)
from metadata.records import Partition as PartitionRecord
from quorum.config_control import alter_broker_configs
from quorum.controller_result import ControllerApiError
from quorum.topic_control import alter_topic_configs
from metadata.partition_change import elect_leader
from quorum.replication_control import unclean_elections
from tests.log_helpers import NOW, batch, open_log

ME = 1
LAG = 1000


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[Partition]:
    log = open_log(tmp_path)
    p = Partition(TopicPartition("t", 0), "T", log, ME, 3, 7, (1, 2, 3), (1, 2, 3), min_insync_replicas=2)
    log.append(batch(4), now_ms=NOW, leader_epoch=3)
    p.become_leader(ME, NOW)
    yield p
    log.close()


def everyone(_replica: int) -> bool:
    return True


def test_the_hw_stands_still_below_min_insync_replicas(partition: Partition) -> None:
    partition.isr = (1, 2)  # at min ISR: the HW follows the ISR's smallest log end offset
    partition.record_follower_fetch(2, 3, NOW)
    hw = partition.next_high_watermark(ME, NOW, LAG, everyone)
    assert (hw.offset, hw.advanced) == (3, True)
    partition.log.update_high_watermark(hw.offset)
    partition.isr = (1,)  # follower 2 left (it joins the ELR): offset 3 is only on this leader
    assert not partition.next_high_watermark(ME, NOW, LAG, everyone).advanced
    partition.record_follower_fetch(2, 4, NOW)
    partition.record_follower_fetch(3, 4, NOW)  # caught up, but outside the ISR: still below min ISR
    assert not partition.next_high_watermark(ME, NOW, LAG, everyone).advanced
    partition.min_insync_replicas = 1
    assert partition.next_high_watermark(ME, NOW, LAG, everyone).offset == 4


TOPIC_ID = "dG9waWMtaWQtYWFhYWFhYQ"


def test_an_election_from_the_elr_is_told_as_clean() -> None:
    image = apply(EMPTY_IMAGE, enumerate([
        Topic("t", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (1, 2, 3), (1, 2, 3), leader=1),
        PartitionChange(TOPIC_ID, 0, isr=(), elr=(1, 2), leader=NO_LEADER)]))
    before = image.topic("t").partitions[0]  # type: ignore[union-attr]
    change = elect_leader(before, is_acceptable=lambda r: r == 2, elr_enabled=True, min_insync_replicas=2)
    assert change is not None and change.leader == 2 and change.isr == (2,)
    (line,) = unclean_elections(image, [change])
    assert line.startswith("Leader election from the ELR for t-0: broker 2 leads at leader epoch 2;")
    assert "ELR [1, 2]" in line and "a clean election" in line


ELR_LINE = ("2026-11-29 08:00:04,985 WARNING [controller-2] quorum.active_controller: Leader election from the ELR "
            "for chaos-0: broker 6 leads at leader epoch 2; the ISR [] had no live member and broker 6 is an "
            "eligible leader replica (ELR [5, 6]), which has every committed record (KIP-966): a clean election")


def test_the_checker_tells_elections_apart() -> None:
    from chaos.checkers.unclean import check_expected_loss, classify_elections
    from chaos.engine.harvest import parse_controller_log

    (note,) = parse_controller_log([ELR_LINE])
    assert {k: note[k] for k in ("kind", "what", "topic", "partition", "leader", "leader_epoch", "how")} == {
        "kind": "note", "what": "leader-election", "topic": "chaos", "partition": 0, "leader": 6,
        "leader_epoch": 2, "how": "elr"}
    note = {**note, "t": 9.5}
    del note["wall"]
    elections = [{"kind": "election", "t": 1.0, "partition": 0, "leader": 4, "leader_epoch": 0, "start_offset": 0,
                  "unclean": False},
                 {"kind": "election", "t": 10.0, "partition": 0, "leader": 6, "leader_epoch": 2,
                  "start_offset": 900, "unclean": False},
                 {"kind": "election", "t": 20.0, "partition": 0, "leader": 5, "leader_epoch": 3,
                  "start_offset": 950, "unclean": True}]
    kinds = classify_elections([*elections, note])
    assert [(k.leader, k.how) for k in kinds] == [(4, "isr"), (6, "elr"), (5, "unclean")]
    assert "eligible leader replica (ELR [5, 6])" in kinds[1].why
    result, _ = check_expected_loss([*elections, note])
    assert result.summary.endswith("elections: 1 clean from the ISR, 1 clean from the ELR, 1 unclean")


def _elr_image(*, elr_on: bool) -> MetadataImage:
    records: list[Record] = [Topic("t", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (1, 2, 3), (1, 2, 3), leader=1),
                             PartitionChange(TOPIC_ID, 0, isr=(1,), elr=(2,)),
                             Topic("u", OTHER_ID), PartitionRecord(OTHER_ID, 0, (1, 2, 3), (1, 2, 3), leader=1),
                             PartitionChange(OTHER_ID, 0, isr=(), elr=(2, 3), leader=NO_LEADER),
                             Config(ConfigResourceType.BROKER, "", MIN_INSYNC_REPLICAS, "2")]
    if elr_on:
        records.append(FeatureLevel(ELR_VERSION, 1))
    return apply(EMPTY_IMAGE, enumerate(records))


OTHER_ID = "dG9waWMtaWQtYmJiYmJiYg"


def test_the_cluster_min_isr_cannot_be_removed_while_elr_is_on() -> None:
    with pytest.raises(ControllerApiError) as refused:
        alter_broker_configs(_elr_image(elr_on=True), "", {MIN_INSYNC_REPLICAS: None})
    assert (refused.value.code, refused.value.field) == (ErrorCode.INVALID_CONFIG, MIN_INSYNC_REPLICAS)
    off = alter_broker_configs(_elr_image(elr_on=False), "", {MIN_INSYNC_REPLICAS: None})
    assert list(off.records) == [Config(ConfigResourceType.BROKER, "", MIN_INSYNC_REPLICAS, None)]


def test_setting_the_cluster_min_isr_clears_every_elr_even_unchanged() -> None:
    result = alter_broker_configs(_elr_image(elr_on=True), "", {MIN_INSYNC_REPLICAS: "2"})
    assert list(result.records) == [PartitionChange(TOPIC_ID, 0, elr=()),
                              PartitionChange(OTHER_ID, 0, isr=(2, 3), elr=())]  # an empty ISR refilled
    assert not alter_broker_configs(_elr_image(elr_on=False), "", {MIN_INSYNC_REPLICAS: "2"}).records


def test_setting_a_topics_min_isr_clears_that_topics_elr_only() -> None:
    result = alter_topic_configs(_elr_image(elr_on=True), "u", {MIN_INSYNC_REPLICAS: "1"})
    assert list(result.records) == [Config(ConfigResourceType.TOPIC, "u", MIN_INSYNC_REPLICAS, "1"),
                              PartitionChange(OTHER_ID, 0, isr=(2, 3), elr=())]
