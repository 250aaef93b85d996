"""A broker restarted from its metadata checkpoint resumes fetching after it (broker/metadata_follower.py):
the shell sets the loaded checkpoint as the state's image, as `MetadataFollowerLoop.run` does."""

from __future__ import annotations

from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import RemoveTopic
from broker.metadata_follower import MetadataFollowerState
from tests.unit.test_metadata_follower import BROKER, LATER, LOG, ORDERS, names, page, snapshot_reply


def test_a_checkpoint_set_as_the_image_is_where_the_next_fetch_starts() -> None:
    checkpoint = apply(EMPTY_IMAGE, enumerate(LOG))
    state = MetadataFollowerState(BROKER)
    state.image = checkpoint
    assert state.applied_offset == 7 and state.next_fetch_offset == 8
    later = state.on_fetch_reply(page(LATER, 8))
    assert names(later.leaders) == [("orders", 0), ("orders", 1)]
    assert state.image == apply(EMPTY_IMAGE, enumerate(LOG + LATER))


def test_a_controller_folded_past_the_checkpoint_sends_a_newer_snapshot_and_records_after_it() -> None:
    state = MetadataFollowerState(BROKER)
    state.image = apply(EMPTY_IMAGE, enumerate(LOG[:5]))
    assert state.next_fetch_offset == 5  # behind the controller's log start: it answers its snapshot
    state.on_fetch_reply(snapshot_reply(LOG + LATER))
    assert state.applied_offset == 10 and state.next_fetch_offset == 11
    assert len(state.on_fetch_reply(page([RemoveTopic(ORDERS)], 11)).deletes) == 2
