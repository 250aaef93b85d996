"""The HTTP API's view of the voters, read live from the voter set (KIP-853): a controller added
after this one started is routed to and listed like one of the static `controller.quorum.voters`.

`ApiSettings.api_voters` (node id -> HTTP API address) and `quorum_ids` (quorum address -> node
id) were fixed at start; `live_settings` swaps in mappings that read `MetadataLog.voter_set()`
on every lookup, falling back to the static config for a voter whose entry carries no API
address (one of the voters the cluster was first started with).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, ItemsView, Iterator, Mapping

from quorum.admin_api import ApiSettings
from quorum.voter_set import VoterSet


class ApiAddresses(Mapping[int, str]):
    """node id -> HTTP API address of every current voter (and this controller)."""

    def __init__(self, voters: Callable[[], VoterSet], static: Mapping[int, str], me: int) -> None:
        self._voters, self._static, self._me = voters, dict(static), me

    def _current(self) -> dict[int, str]:
        current = {me: address for me, address in self._static.items() if me == self._me}
        for voter in self._voters():
            address = voter.api_address or self._static.get(voter.node_id)
            if address is not None and voter.node_id != self._me:
                current[voter.node_id] = address
        return dict(sorted(current.items()))

    def __getitem__(self, node_id: int) -> str:
        return self._current()[node_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def items(self) -> ItemsView[int, str]:
        # one read of the voter set: Mapping's own reads it again for every key, and every broker
        # metadata fetch lists the voters (5 % of the active controller's loop in a 1,000-topic create)
        return self._current().items()


class QuorumIds(Mapping[str, int]):
    """quorum address -> node id of every current voter."""

    def __init__(self, voters: Callable[[], VoterSet]) -> None:
        self._voters = voters

    def _current(self) -> dict[str, int]:
        return {v.raft_address: v.node_id for v in self._voters()}

    def __getitem__(self, address: str) -> int:
        return self._current()[address]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def items(self) -> ItemsView[str, int]:
        return self._current().items()  # one read of the voter set (ApiAddresses.items)


def live_settings(api: ApiSettings, voters: Callable[[], VoterSet]) -> ApiSettings:
    return dataclasses.replace(api, api_voters=ApiAddresses(voters, api.api_voters, api.node_id),
                               quorum_ids=QuorumIds(voters))
