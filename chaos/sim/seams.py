"""Planted bugs: the one seam through which a simulation runs a deliberately broken rule.

Each flag replaces one real rule by the classic mistake it guards against, so a test can
show the simulator finds that mistake (issue 15, "Done when"). Everything else stays real.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from metadata.image import ClusterImage, MetadataImage
from metadata.records import BrokerRegistrationChange, PartitionChange, Record


@dataclass(frozen=True, slots=True)
class PlantedBugs:
    """truncate_to_hw: a new follower cuts its log at its own HW (pre-KIP-101) instead of
        asking the leader by leader epoch (broker.replication.truncation);
    skip_isr_eligibility: KIP-841 forgotten: the leader's isReplicaIsrEligible and the
        controller's ineligibleReplicasForIsr both see every broker as active;
    fenced_stays_in_isr: fencing writes the BrokerRegistrationChange but not the partition
        changes that move ISRs and leaders away from the fenced broker."""

    truncate_to_hw: bool = False
    skip_isr_eligibility: bool = False
    fenced_stays_in_isr: bool = False

    @property
    def any(self) -> bool:
        return self.truncate_to_hw or self.skip_isr_eligibility or self.fenced_stays_in_isr


NO_BUGS = PlantedBugs()
BUGS: dict[str, PlantedBugs] = {
    "truncate-to-hw": PlantedBugs(truncate_to_hw=True),
    "skip-isr-eligibility": PlantedBugs(skip_isr_eligibility=True),
    "fenced-stays-in-isr": PlantedBugs(fenced_stays_in_isr=True),
}


def everyone_active(image: MetadataImage) -> MetadataImage:
    """The image as a controller that forgot KIP-841 sees it: every broker active."""
    brokers = {b: replace(r, fenced=False, in_controlled_shutdown=False)
               for b, r in image.cluster.brokers.items()}
    return replace(image, cluster=ClusterImage(MappingProxyType(brokers)))


def without_fencing_moves(records: Sequence[Record]) -> Sequence[Record]:
    """A fencing batch without its partition changes (the ISR keeps the fenced broker)."""
    fences = any(isinstance(r, BrokerRegistrationChange) and r.fenced for r in records)
    if not fences:
        return records
    return tuple(r for r in records if not isinstance(r, PartitionChange))
