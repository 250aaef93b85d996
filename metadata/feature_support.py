"""Whether this build implements a finalized feature level: the rule, and the verdict on an image.

The supported ranges have one home, `common.protocol.api_versions.SUPPORTED_BY_NAME` (read at
each call, never copied); a feature it does not name supports level 0 only (Kafka's
QuorumFeatures.DISABLED). The wording is Kafka's QuorumFeatures.reasonNotSupported: "... does not
support this feature." when the range is 0-0, else "... only supports versions MIN-MAX".

What a node does about a level it does not implement is its shell's, as in Kafka (4.1):
- a controller stops: FeatureControlManager.replay throws ("Tried to apply FeatureLevelRecord ...,
  but this controller only supports versions ...") and the QuorumController hands that to its
  fatal fault handler, which ends the process; its metadata loader's fault handler is fatal too in
  a process with the controller role (SharedServer.metadataLoaderFaultHandler);
- a broker that starts against such a log does not run: the controller refuses its registration
  ("Unable to register because the broker does not support finalized version L of F. The broker
  wants a version between MIN and MAX, inclusive.") and the broker shuts down once
  initial.broker.registration.timeout.ms passed;
- a running broker that replays such a record only logs it: a broker-only process's metadata
  loader fault handler is not fatal (an unknown metadata.version fails MetadataVersion.
  fromFeatureLevel and is logged; any other feature's level is taken as it is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from common.protocol import api_versions

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


def supported_range(feature: str) -> tuple[int, int]:
    """(min, max) level this build implements of `feature`; (0, 0) for a feature it does not know."""
    supported = api_versions.SUPPORTED_BY_NAME.get(feature)
    return (0, 0) if supported is None else (supported.min_version, supported.max_version)


def reason_not_supported(feature: str, level: int, what: str) -> str | None:
    """Why `what` (e.g. "Local controller 1") cannot run `feature` at `level`, or None when it can."""
    low, high = supported_range(feature)
    if low <= level <= high:
        return None
    if high == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {low}-{high}"


@dataclass(frozen=True, slots=True)
class UnsupportedLevel:
    """A finalized level this build does not implement (an entry of Kafka's
    BrokerFeatures.incompatibleFeatures), with the range it does."""

    feature: str
    level: int
    min_version: int
    max_version: int

    def __str__(self) -> str:
        if self.max_version == 0:
            return f"{self.feature} {self.level} (a feature this build does not support)"
        return f"{self.feature} {self.level} (this build supports {self.min_version}-{self.max_version})"


def unsupported_levels(levels: Mapping[str, int]) -> tuple[UnsupportedLevel, ...]:
    """The finalized `levels` (an image's features.levels) this build does not implement, by name."""
    refused = []
    for feature in sorted(levels):
        low, high = supported_range(feature)
        level = levels[feature]
        if not low <= level <= high:
            refused.append(UnsupportedLevel(feature, level, low, high))
    return tuple(refused)


def describe_levels(refused: tuple[UnsupportedLevel, ...]) -> str:
    """The refused levels in one phrase: "transaction.version 3 (this build supports 0-2), ..."."""
    return ", ".join(map(str, refused))
