"""A FeatureLevel above what this build supports (metadata/feature_support.py, and what the broker's
follower core decides with it: broker/metadata_follower.py refused_at_start, newly_unsupported).

Kafka's behaviour, which these follow: a controller stops on such a record; a broker that starts
against such a log does not run; a running broker that replays one only logs it."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from broker.metadata_follower import newly_unsupported, refused_at_start
from common.metadata_version import LATEST_LEVEL, METADATA_VERSION
from common.protocol import api_versions
from common.protocol.api_versions import ELR_VERSION, TRANSACTION_VERSION_FEATURE, SupportedFeature
from metadata.delta import apply
from metadata.feature_support import UnsupportedLevel, reason_not_supported, unsupported_levels
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import FeatureLevel, NoOp

TV, MV, ELR = TRANSACTION_VERSION_FEATURE, METADATA_VERSION, ELR_VERSION
SUPPORTED = {TV: (0, 2), MV: (1, LATEST_LEVEL), ELR: (0, 1)}  # this build's table, as ApiVersions answers it


def image(*levels: tuple[str, int], base: MetadataImage = EMPTY_IMAGE) -> MetadataImage:
    return apply(base, [(base.offset + 1 + i, FeatureLevel(name, level)) for i, (name, level) in enumerate(levels)])


def test_the_table_is_this_builds() -> None:
    assert {f.name: (f.min_version, f.max_version) for f in api_versions.SUPPORTED_FEATURES} == SUPPORTED


LEVELS = [  # (finalized levels, the levels this build refuses)
    pytest.param({MV: LATEST_LEVEL, TV: 2, ELR: 1}, (), id="a-new-cluster"),
    pytest.param({TV: 2}, (), id="a-legacy-log"),
    pytest.param({MV: LATEST_LEVEL, TV: 3}, (UnsupportedLevel(TV, 3, 0, 2),), id="above-the-max"),
    pytest.param({MV: LATEST_LEVEL + 1, ELR: 2}, (UnsupportedLevel(ELR, 2, 0, 1), UnsupportedLevel(MV, LATEST_LEVEL + 1, 1, LATEST_LEVEL)),
                 id="two-sorted-by-name"),
    pytest.param({"group.version": 1}, (UnsupportedLevel("group.version", 1, 0, 0),), id="an-unknown-feature"),
]


@pytest.mark.parametrize(("levels", "refused"), LEVELS)
def test_unsupported_levels(levels: dict[str, int], refused: tuple[UnsupportedLevel, ...]) -> None:
    assert unsupported_levels(levels) == refused
    assert unsupported_levels(image(*levels.items()).features.levels) == refused


@pytest.mark.parametrize(("feature", "level", "reason"), [
    (TV, 2, None), (TV, 0, None), (TV, 3, "Local controller 1 only supports versions 0-2"),
    (MV, 0, f"Local controller 1 only supports versions 1-{LATEST_LEVEL}"),
    ("group.version", 0, None), ("group.version", 1, "Local controller 1 does not support this feature."),
])
def test_reason_not_supported_in_kafkas_words(feature: str, level: int, reason: str | None) -> None:
    assert reason_not_supported(feature, level, "Local controller 1") == reason


def test_the_rule_reads_the_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """No copy of the ranges: a build supporting transaction.version 3 (the table changed) takes it."""
    newer = {**api_versions.SUPPORTED_BY_NAME, TV: SupportedFeature(TV, 0, 3)}
    monkeypatch.setattr(api_versions, "SUPPORTED_BY_NAME", MappingProxyType(newer))
    assert unsupported_levels({TV: 3}) == ()
    assert reason_not_supported(TV, 3, "Local controller 1") is None


def test_a_broker_does_not_start_on_a_level_it_does_not_implement() -> None:
    refused = refused_at_start(image((MV, LATEST_LEVEL), (TV, 3)), 4)
    assert refused is not None
    assert refused.startswith("Broker 4 cannot run: the metadata log (applied up to offset 1) finalizes "
                              "transaction.version 3 (this build supports 0-2). ")
    assert refused_at_start(image((MV, LATEST_LEVEL), (TV, 2)), 4) is None
    assert refused_at_start(image((TV, 3), (TV, 2)), 4) is None  # lowered again before the broker caught up


def test_a_running_broker_hears_of_each_unsupported_level_once() -> None:
    start = image((MV, LATEST_LEVEL), (TV, 2))
    raised = image((TV, 3), base=start)
    assert newly_unsupported(start, raised) == (UnsupportedLevel(TV, 3, 0, 2),)
    later = apply(raised, [(raised.offset + 1, NoOp())])  # no feature changed: nothing to say
    assert later.features is raised.features and newly_unsupported(raised, later) == ()
    again = image((ELR, 2), base=later)  # another one: only that one
    assert newly_unsupported(later, again) == (UnsupportedLevel(ELR, 2, 0, 1),)
    assert newly_unsupported(again, image((TV, 2), base=again)) == ()  # lowered: nothing new
