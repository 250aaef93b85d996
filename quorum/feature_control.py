"""Finalized features: the bootstrap levels of a new cluster and UpdateFeatures (KIP-584, KIP-778).

Kafka's FeatureControlManager and ActivationRecordsGenerator as plain functions over the
committed image. The levels live in the metadata log as FeatureLevel records; ApiVersions
answers them from the image (common.protocol.api_versions has the one table of supported
ranges, the bootstrap and the legacy levels).

Activation (`activation_records`), as Kafka's ActivationRecordsGenerator: the active controller
adds these records to its BeginEpoch chunk whenever the log holds no metadata.version -
- an empty log (a new cluster: no broker, topic, config or producer-id block yet) gets Kafka 4.1's
  defaults for what tidelog implements: transaction.version 2 and eligible.leader.replicas.version
  1, with the cluster-level `min.insync.replicas` ELR needs (below);
- a log written by a build from before feature records gets the levels it behaved as
  (`LEGACY_LEVELS`: transaction.version 2, no ELR), as Kafka writes metadata.version 3.0-IV1 for a
  log without one; ELR then needs `tidelog features upgrade --feature eligible.leader.replicas.version=1`.

UpdateFeatures (`update_features`), as FeatureControlManager.updateFeatures: every update is
checked before anything is written; the first refusal is the answer (INVALID_UPDATE_VERSION with
Kafka's "Invalid update version V for feature F. ..." message) and nothing is appended; a
downgrade needs SAFE_DOWNGRADE or UNSAFE_DOWNGRADE, an upgrade UPGRADE; validate_only writes
nothing. What KIP-966 ties to its feature, as Kafka 4.1 does:
- enabling ELR writes the cluster-level dynamic `min.insync.replicas` (broker "") if none is set,
  at the controller's static value (ConfigurationControlManager.maybeGenerateElrSafetyRecords):
  the election rules read it, a broker's static value no longer differs from what the
  controller's ELR assumes, and DescribeConfigs names it DYNAMIC_DEFAULT_BROKER_CONFIG;
- disabling it clears every partition's ELR (ReplicationControlManager's ELR clearing); a
  partition whose ISR is empty gets its ELR members back as its ISR, the KIP-841 state it would
  have without ELR (the last members that had every committed record), so it can elect again.

metadata.version (common.metadata_version) gates what the controllers write: a new cluster starts
at this build's latest level, a log of the builds before at 1 until an operator upgrades it, which
is safe once every node (broker and controller) runs a build that supports the level: the nodes
do not register their ranges (see `_check_update`), so this controller checks its own only. A
downgrade across a level that changed the records is refused, as Kafka refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from common.errors import ErrorCode
from common.limits import MAX_RECORDS_PER_USER_OP
from common.metadata_version import METADATA_VERSION, SHORT_PARTITION_CHANGE_LEVEL
from common.protocol.api_versions import (
    BOOTSTRAP_LEVELS,
    ELR_VERSION,
    LEGACY_LEVELS,
    finalized_levels,
)
from common.topic_config import MIN_INSYNC_REPLICAS, default_int
from metadata.feature_support import reason_not_supported
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType, FeatureLevel, PartitionChange, Record
from quorum.controller_result import ControllerApiError, ControllerResult

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

MAX_FEATURE_UPDATES: Final = 64  # features in one UpdateFeatures; tidelog supports 3
CLUSTER_DEFAULT: Final = ""  # the BROKER config resource of the cluster-wide dynamic default
DEFAULT_MIN_INSYNC_REPLICAS: Final = default_int(MIN_INSYNC_REPLICAS)  # Kafka's default: 1 replica


class UpgradeType(IntEnum):
    """FeatureUpdate.UpgradeType, as UpdateFeaturesRequest v1+ carries it."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One FeatureUpdateKey: the new level (0 removes the feature) and how it may move."""

    feature: str
    max_version_level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


@dataclass(frozen=True, slots=True)
class FeaturesUpdated:
    """UpdateFeatures' answer: the finalized levels once the records commit (or would, validate_only)."""

    levels: Mapping[str, int]
    validate_only: bool


def is_new_cluster(image: MetadataImage) -> bool:
    """Nothing but epochs in the log: no broker registered, no topic, config, feature or producer id."""
    return (not image.cluster.brokers and not image.topics.by_id and not image.configs.resources
            and not image.features.levels and image.producer_ids.next_producer_id_block_start < 0)


def activation_records(image: MetadataImage, *,
                       min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS) -> tuple[Record, ...]:
    """What an activating controller writes with its BeginEpoch (see the module doc); () once the
    log holds a metadata.version."""
    if METADATA_VERSION in image.features.levels:
        return ()
    new = is_new_cluster(image)
    levels = BOOTSTRAP_LEVELS if new else LEGACY_LEVELS
    records: list[Record] = [FeatureLevel(name, level) for name, level in sorted(levels.items())]
    if levels.get(ELR_VERSION, 0) >= 1:
        records.extend(elr_safety_records(image, min_insync_replicas))
    return tuple(records)


def elr_safety_records(image: MetadataImage, min_insync_replicas: int) -> tuple[Record, ...]:
    """KIP-966 needs a cluster-wide min.insync.replicas, so that the controller's ELR and the brokers'
    acks=all agree: write the controller's static value (Kafka's) if none is set."""
    if MIN_INSYNC_REPLICAS in image.config(ConfigResourceType.BROKER, CLUSTER_DEFAULT):
        return ()
    return (Config(ConfigResourceType.BROKER, CLUSTER_DEFAULT, MIN_INSYNC_REPLICAS, str(min_insync_replicas)),)


def elr_clearing_records(image: MetadataImage, *, topic_names: Sequence[str] | None = None,
                         error: ErrorCode = ErrorCode.FEATURE_UPDATE_FAILED,
                         field: str = "feature_updates", why: str = f"Disabling {ELR_VERSION}") -> tuple[Record, ...]:
    """One PartitionChange per partition with an ELR (of `topic_names`' topics, else of every topic):
    the ELR emptied, an empty ISR refilled from it (its members have every committed record).
    Kafka clears ELRs so when ELR is disabled and whenever a min.insync.replicas the partitions
    follow is set (KIP-966): an ELR chosen under the old minimum may not satisfy the new one."""
    if topic_names is None:
        topics = sorted(image.topics.by_id.values(), key=lambda t: t.name)  # stable order
    else:
        topics = [image.topics.by_name[n] for n in sorted(set(topic_names)) if n in image.topics.by_name]
    records: list[Record] = []
    for topic in topics:
        for partition_id in sorted(topic.partitions):
            partition = topic.partitions[partition_id]
            if not partition.elr:
                continue
            if len(records) >= MAX_RECORDS_PER_USER_OP:
                raise ControllerApiError(error, (
                    f"{why} would clear the ELR of more than {MAX_RECORDS_PER_USER_OP} "
                    "partitions in one operation"), field=field)
            isr = None if partition.isr else partition.elr
            records.append(PartitionChange(partition.topic_id, partition_id, isr=isr, elr=()))
    return tuple(records)


def _invalid(feature: str, level: int, why: str) -> ControllerApiError:
    return ControllerApiError(ErrorCode.INVALID_UPDATE_VERSION,
                              f"Invalid update version {level} for feature {feature}. {why}", field="feature_updates")


def _check_update(update: FeatureUpdate, current: int, node_id: int) -> None:
    """FeatureControlManager.updateFeature's checks, in its order; raises the refusal."""
    name, level = update.feature, update.max_version_level
    if update.upgrade_type is UpgradeType.UNKNOWN:
        raise _invalid(name, level, "The controller does not support the given upgrade type.")
    if level < 0:
        raise _invalid(name, level, "A feature version cannot be less than 0.")
    reason = reason_not_supported(name, level, f"Local controller {node_id}")  # the one rule replay uses too
    if reason is not None:
        raise _invalid(name, level, reason)
    # Kafka also checks each registered broker's and controller's ranges (they differ during a
    # rolling upgrade). tidelog's registrations carry none, and the RegisterBroker record and the
    # registration RPC refuse a field they do not know, so the build before could not read one
    # added: the operator upgrades metadata.version once every node runs this build.
    if level < current and update.upgrade_type is UpgradeType.UPGRADE:
        raise _invalid(name, level, "Can't downgrade the version of this feature without setting the "
                                    "upgrade type to either safe or unsafe downgrade.")
    if level > current and update.upgrade_type is not UpgradeType.UPGRADE:
        raise _invalid(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION and level < current and _format_changed(level, current):
        # FeatureControlManager.updateMetadataVersion: a downgrade across a level that changed what
        # the log holds is refused, safe or unsafe (records written at `current` could be left
        # that a node of `level` cannot read: a short PartitionChange)
        why = ("Unsafe metadata downgrade is not supported in this version."
               if update.upgrade_type is UpgradeType.UNSAFE_DOWNGRADE else
               "Refusing to perform the requested downgrade because it might delete metadata information. "
               "Retry using UNSAFE_DOWNGRADE if you want to force the downgrade to proceed.")
        raise ControllerApiError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. {why}",
                                 field="feature_updates")


def _format_changed(lower: int, higher: int) -> bool:
    """MetadataVersion.checkIfMetadataChanged: whether a level in (lower, higher] changed the log's
    records (every tidelog level above the legacy one does so far)."""
    return lower < SHORT_PARTITION_CHANGE_LEVEL <= higher


def update_features(image: MetadataImage, updates: Sequence[FeatureUpdate], *, validate_only: bool = False,
                    node_id: int = -1, min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS,
                    ) -> ControllerResult[FeaturesUpdated]:
    """UpdateFeatures on the active controller's image (see the module doc)."""
    if not updates:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, "No feature updates were given.", field="feature_updates")
    if len(updates) > MAX_FEATURE_UPDATES:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, f"{len(updates)} feature updates, more than "
                                 f"{MAX_FEATURE_UPDATES}", field="feature_updates")
    names = [u.feature for u in updates]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:  # KafkaApis / ControllerApis refuse the whole request
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, f"Duplicate feature update(s): {', '.join(duplicates)}",
                                 field="feature_updates")
    before = finalized_levels(image.features.levels)
    for update in updates:
        _check_update(update, before.get(update.feature, 0), node_id)
    after = dict(before)
    records: list[Record] = []
    if METADATA_VERSION not in image.features.levels:  # a legacy log not yet activated: write what it is
        records.extend(FeatureLevel(n, v) for n, v in sorted(before.items()) if n not in names)
    for update in updates:
        records.append(FeatureLevel(update.feature, update.max_version_level))
        if update.max_version_level == 0:
            after.pop(update.feature, None)
        else:
            after[update.feature] = update.max_version_level
    elr_before, elr_after = before.get(ELR_VERSION, 0) >= 1, after.get(ELR_VERSION, 0) >= 1
    if elr_after and not elr_before:
        records.extend(elr_safety_records(image, min_insync_replicas))
    elif elr_before and not elr_after:
        records.extend(elr_clearing_records(image))
    answer = FeaturesUpdated(dict(sorted(after.items())), validate_only)
    return ControllerResult(() if validate_only else records, answer, atomic=True)
