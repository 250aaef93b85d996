"""metadata.version: the levels of tidelog's metadata log format, and the level an image finalized.

Kafka gates a change to what its controllers write on this feature: they write the new form only
once the finalized level says every node of the cluster reads it (a rolling upgrade replays one
log on the builds before and after). tidelog's levels are its own (its records are msgpack maps,
not Kafka's schemas), so they are not Kafka's numbers (7 = 3.3-IV3 ... 27 = 4.1-IV1):

- 1: the records of the first build with feature records. A log without metadata.version (written
  before them) is at 1 (`LEGACY_LEVEL`).
- 2: PartitionChange leaves its unchanged fields off (`metadata.records`): a moved leadership is
  77 bytes, not 115. Builds before 2 require those fields, so the short form waits for the level.

No imports: `metadata.records` (the writer), `common.protocol.api_versions` (the supported range
ApiVersions answers) and the controller's encoders read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

METADATA_VERSION: Final = "metadata.version"
LEGACY_LEVEL: Final = 1
SHORT_PARTITION_CHANGE_LEVEL: Final = 2
LATEST_LEVEL: Final = 2  # what this build supports up to, and bootstraps a new cluster at


def metadata_version(levels: Mapping[str, int]) -> int:
    """The finalized metadata.version of an image's feature levels (`image.features.levels`): a log
    without one (written before feature records, or not yet activated) is at LEGACY_LEVEL."""
    return levels.get(METADATA_VERSION, LEGACY_LEVEL)
