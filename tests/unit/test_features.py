"""Finalized features (quorum/feature_control.py) and ApiVersions' feature fields: the bootstrap of a
new cluster, the legacy levels of an old log, UpdateFeatures' checks and KIP-966's side effects."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode as E
from common.protocol import api_versions, messages
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import (
    NO_LEADER,
    BeginEpoch,
    Config,
    ConfigResourceType,
    FeatureLevel,
    Partition,
    PartitionChange,
    Record,
    RegisterBroker,
    Topic,
)
from quorum.controller_result import ControllerApiError
from quorum.feature_control import (
    FeatureUpdate,
    UpgradeType,
    activation_records,
    is_new_cluster,
    update_features,
)

ELR = "eligible.leader.replicas.version"
TV = "transaction.version"
MV = "metadata.version"
UP, SAFE, UNSAFE = UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE
MIN_ISR_DEFAULT = Config(ConfigResourceType.BROKER, "", "min.insync.replicas", "1")


def image(*records: Record, base: MetadataImage = EMPTY_IMAGE) -> MetadataImage:
    return apply(base, ((base.offset + 1 + i, r) for i, r in enumerate(records)))


EPOCH_ONLY = image(BeginEpoch(1))
OLD_CLUSTER = image(BeginEpoch(1), RegisterBroker(1, "incarnation-1", ()))  # a log from before feature records
NEW_CLUSTER = image(BeginEpoch(1), *activation_records(EPOCH_ONLY))
TOPIC_ID = "dG9waWMtaWQtYWFhYWFhYQ"
# a partition whose whole ISR is gone, ELR [2, 3] (KIP-966), and one with ISR [1] and ELR [2]
WITH_ELR = image(Topic("t", TOPIC_ID), Partition(TOPIC_ID, 0, (1, 2, 3), (1, 2, 3), leader=1),
                 Partition(TOPIC_ID, 1, (1, 2, 3), (1, 2, 3), leader=1),
                 PartitionChange(TOPIC_ID, 0, isr=(), elr=(2, 3), leader=NO_LEADER),
                 PartitionChange(TOPIC_ID, 1, isr=(1,), elr=(2,)), base=NEW_CLUSTER)


@pytest.mark.parametrize(("given", "expected"), [
    # a new cluster at this build's latest metadata.version: PartitionChange written short
    (EPOCH_ONLY, (FeatureLevel(ELR, 1), FeatureLevel(MV, 2), FeatureLevel(TV, 2), MIN_ISR_DEFAULT)),
    # as it behaved: no ELR, the records the builds before read (metadata.version 1)
    (OLD_CLUSTER, (FeatureLevel(MV, 1), FeatureLevel(TV, 2))),
    (NEW_CLUSTER, ()),  # finalized already
])
def test_activation_records(given: MetadataImage, expected: tuple[Record, ...]) -> None:
    assert activation_records(given) == expected


def test_a_new_cluster_keeps_a_min_insync_replicas_it_already_has() -> None:
    assert is_new_cluster(EMPTY_IMAGE) and not is_new_cluster(OLD_CLUSTER)
    configured = image(Config(ConfigResourceType.BROKER, "", "min.insync.replicas", "2"))
    assert MIN_ISR_DEFAULT not in activation_records(configured)


def test_new_cluster_levels_and_their_epoch_in_api_versions() -> None:
    features = api_versions.broker_features(NEW_CLUSTER.features.levels)
    answer = api_versions.response(3, E.NONE, (), features, NEW_CLUSTER.offset)
    decoded = messages.decode(type(answer), bytes(messages.encode(answer)))
    assert {(f.name, f.min_version, f.max_version) for f in decoded.supported_features} == {
        (MV, 1, 2), (TV, 0, 2), (ELR, 0, 1)}
    assert {(f.name, f.max_version_level) for f in decoded.finalized_features} == {(MV, 2), (TV, 2), (ELR, 1)}
    assert decoded.finalized_features_epoch == NEW_CLUSTER.offset
    legacy = api_versions.broker_features(OLD_CLUSTER.features.levels)
    assert {f.name: f.finalized for f in legacy} == {MV: 1, TV: 2, ELR: 0}


# (given image, updates, the error, the words it must contain)
REFUSED = [
    (NEW_CLUSTER, [FeatureUpdate(ELR, 0)], E.INVALID_UPDATE_VERSION, "without setting the upgrade type"),
    (NEW_CLUSTER, [FeatureUpdate(ELR, 2)], E.INVALID_UPDATE_VERSION, "only supports versions 0-1"),
    (NEW_CLUSTER, [FeatureUpdate(TV, 3)], E.INVALID_UPDATE_VERSION, "only supports versions 0-2"),
    (NEW_CLUSTER, [FeatureUpdate(MV, 0, SAFE)], E.INVALID_UPDATE_VERSION, "only supports versions 1-2"),
    (NEW_CLUSTER, [FeatureUpdate(MV, 3)], E.INVALID_UPDATE_VERSION, "only supports versions 1-2"),
    # FeatureControlManager.updateMetadataVersion's refusals of a downgrade across a format change
    (NEW_CLUSTER, [FeatureUpdate(MV, 1, SAFE)], E.INVALID_UPDATE_VERSION, "Invalid metadata.version 1. Refusing "
     "to perform the requested downgrade because it might delete metadata information. Retry using "
     "UNSAFE_DOWNGRADE if you want to force the downgrade to proceed."),
    (NEW_CLUSTER, [FeatureUpdate(MV, 1, UNSAFE)], E.INVALID_UPDATE_VERSION, "Invalid metadata.version 1. Unsafe "
     "metadata downgrade is not supported in this version."),
    (NEW_CLUSTER, [FeatureUpdate(MV, 1)], E.INVALID_UPDATE_VERSION, "without setting the upgrade type"),
    (NEW_CLUSTER, [FeatureUpdate("group.version", 1)], E.INVALID_UPDATE_VERSION, "does not support this feature"),
    (OLD_CLUSTER, [FeatureUpdate(ELR, 1, SAFE)], E.INVALID_UPDATE_VERSION, "Can't downgrade to a newer version"),
    (NEW_CLUSTER, [FeatureUpdate(TV, -1, UNSAFE)], E.INVALID_UPDATE_VERSION, "cannot be less than 0"),
    (NEW_CLUSTER, [FeatureUpdate(TV, 1, UpgradeType.UNKNOWN)], E.INVALID_UPDATE_VERSION, "upgrade type"),
    (NEW_CLUSTER, [FeatureUpdate(TV, 1, SAFE), FeatureUpdate(TV, 0, SAFE)], E.INVALID_REQUEST, "Duplicate"),
    (NEW_CLUSTER, [], E.INVALID_REQUEST, "No feature updates"),
    # the first refusal refuses the whole request: the valid TV downgrade is not written either
    (NEW_CLUSTER, [FeatureUpdate(TV, 1, SAFE), FeatureUpdate(ELR, 5)], E.INVALID_UPDATE_VERSION, "feature "
     "eligible.leader.replicas.version"),
]


@pytest.mark.parametrize(("given", "updates", "code", "words"), REFUSED)
def test_refused_updates_write_nothing(given: MetadataImage, updates: list[FeatureUpdate], code: E,
                                       words: str) -> None:
    with pytest.raises(ControllerApiError) as refused:
        update_features(given, updates, node_id=1)
    assert refused.value.code is code and words in refused.value.message, refused.value


def test_upgrading_an_old_cluster_to_elr_writes_min_insync_replicas() -> None:
    activated = image(*activation_records(OLD_CLUSTER), base=OLD_CLUSTER)
    result = update_features(activated, [FeatureUpdate(ELR, 1)])
    assert result.records == (FeatureLevel(ELR, 1), MIN_ISR_DEFAULT)
    assert dict(result.response.levels) == {MV: 1, TV: 2, ELR: 1}
    after = image(*result.records, base=activated)
    assert after.features.levels == {MV: 1, TV: 2, ELR: 1}
    assert after.config(ConfigResourceType.BROKER, "") == {"min.insync.replicas": "1"}


def test_an_upgrade_of_an_old_log_writes_its_metadata_version_first() -> None:
    unactivated = OLD_CLUSTER  # no BeginEpoch chunk of this build yet
    result = update_features(unactivated, [FeatureUpdate(ELR, 1)])
    assert result.records[:2] == (FeatureLevel(MV, 1), FeatureLevel(TV, 2))
    assert image(*result.records, base=unactivated).features.levels == {MV: 1, TV: 2, ELR: 1}


def test_validate_only_answers_the_levels_and_writes_nothing() -> None:
    result = update_features(NEW_CLUSTER, [FeatureUpdate(TV, 0, SAFE)], validate_only=True)
    assert result.records == () and dict(result.response.levels) == {MV: 2, ELR: 1}


def test_disabling_elr_clears_every_elr_and_refills_an_empty_isr() -> None:
    result = update_features(WITH_ELR, [FeatureUpdate(ELR, 0, SAFE)])
    assert result.records == (FeatureLevel(ELR, 0), PartitionChange(TOPIC_ID, 0, isr=(2, 3), elr=()),
                              PartitionChange(TOPIC_ID, 1, elr=()))
    after = image(*result.records, base=WITH_ELR)
    partitions = after.topic("t").partitions  # type: ignore[union-attr]
    assert [(p.isr, p.elr) for p in partitions.values()] == [((2, 3), ()), ((1,), ())]
    assert after.feature_level(ELR) == 0 and ELR not in after.features.levels


def test_unsafe_downgrade_and_reupgrade_of_transaction_version() -> None:
    down = update_features(NEW_CLUSTER, [FeatureUpdate(TV, 0, UNSAFE)])
    assert down.records == (FeatureLevel(TV, 0),)
    after = image(*down.records, base=NEW_CLUSTER)
    assert update_features(after, [FeatureUpdate(TV, 2)]).records == (FeatureLevel(TV, 2),)
    assert update_features(NEW_CLUSTER, [FeatureUpdate(TV, 2)]).records == (FeatureLevel(TV, 2),)  # same level


def test_elr_writes_the_controllers_static_min_insync_replicas() -> None:
    """Kafka writes its controller's static value, so brokers configured alike keep their durability."""
    two = Config(ConfigResourceType.BROKER, "", "min.insync.replicas", "2")
    assert activation_records(EPOCH_ONLY, min_insync_replicas=2)[-1] == two
    activated = image(*activation_records(OLD_CLUSTER), base=OLD_CLUSTER)
    assert update_features(activated, [FeatureUpdate(ELR, 1)], min_insync_replicas=2).records[-1] == two


def test_an_old_log_upgrades_metadata_version_to_2() -> None:
    """The operator's `tidelog features upgrade --feature metadata.version=2` on a log of the builds
    before: refused by none of the checks, and then the same level again is a no-op update."""
    activated = image(*activation_records(OLD_CLUSTER), base=OLD_CLUSTER)
    result = update_features(activated, [FeatureUpdate(MV, 2)])
    assert result.records == (FeatureLevel(MV, 2),) and dict(result.response.levels) == {MV: 2, TV: 2}
    upgraded = image(*result.records, base=activated)
    assert upgraded.feature_level(MV) == 2
    assert update_features(upgraded, [FeatureUpdate(MV, 2)]).records == (FeatureLevel(MV, 2),)
    # not yet activated (no BeginEpoch of this build): its levels are written first, then the upgrade
    assert update_features(OLD_CLUSTER, [FeatureUpdate(MV, 2)]).records == (FeatureLevel(TV, 2), FeatureLevel(MV, 2))
