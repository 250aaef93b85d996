"""A broker follows the quorum's voter set (KIP-853): broker.controller_client.ControllerClient
takes the voters' API addresses a metadata-fetch reply names, for the newest Raft term only."""

from __future__ import annotations

from typing import Any

import pytest

from broker.controller_client import MAX_VOTER_ADDRESSES, ControllerClient

STATIC = ("127.0.0.1:9080", "127.0.0.2:9080", "127.0.0.3:9080")


def reply(term: int, voters: Any, active: str | None = None) -> dict[str, Any]:
    return {"raft_term": term, "controller_address": active, "controller_voters": voters}


def test_a_new_voter_is_reached_and_a_removed_one_no_longer_tried() -> None:
    client = ControllerClient(STATIC)
    grown = ["127.0.0.2:9080", "127.0.0.3:9080", "127.0.0.5:9080"]
    client.observe_leader(reply(3, grown, active="127.0.0.5:9080"))
    assert client.addresses == tuple(grown) and client.target == "127.0.0.5:9080"
    assert client._fetch_target == "127.0.0.5:9080"  # fetches go to the active one too


def test_fetches_leave_a_removed_voter_while_no_active_controller_is_named() -> None:
    client = ControllerClient(STATIC)
    client.observe_leader(reply(3, ["127.0.0.2:9080", "127.0.0.3:9080", "127.0.0.5:9080"]))
    assert client._fetch_target == "127.0.0.2:9080"  # controller 1 was removed: fetches leave it


@pytest.mark.parametrize("voters", [
    None,  # a controller from before KIP-853 names none
    [],
    ["127.0.0.1:9080", 7],
    ["127.0.0.1:9080", ""],
    [f"127.0.0.{i}:9080" for i in range(1, MAX_VOTER_ADDRESSES + 2)],
])
def test_a_reply_without_a_usable_voter_list_changes_nothing(voters: Any) -> None:
    client = ControllerClient(STATIC)
    client.observe_leader(reply(3, voters))
    assert client.addresses == STATIC


def test_an_older_term_does_not_undo_a_newer_voter_set() -> None:
    client = ControllerClient(STATIC)
    client.observe_leader(reply(5, ["127.0.0.5:9080"]))
    client.observe_leader(reply(4, list(STATIC)))
    assert client.addresses == ("127.0.0.5:9080",)
