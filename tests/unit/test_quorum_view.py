"""quorum/quorum_view.py `named_leader`: whom a controller that is not active names active."""

from __future__ import annotations

import pytest

from quorum.quorum_view import PARTNER_CONNECTED, named_leader

IDS = {"127.0.0.1:9093": 1, "127.0.0.2:9093": 2, "127.0.0.3:9093": 3}


def raft(*connected: str) -> dict[str, int]:
    return {f"partner_node_status_server_{a}": PARTNER_CONNECTED if a in connected else 0
            for a in IDS if a != "127.0.0.1:9093"}


CASES = [  # (leader address, connected partners, expected (node, reason fragment))
    pytest.param("127.0.0.2:9093", ("127.0.0.2:9093",), (2, None), id="leader-reachable"),
    pytest.param("127.0.0.2:9093", ("127.0.0.2:9093", "127.0.0.3:9093"), (2, None), id="all-reachable"),
    pytest.param("127.0.0.2:9093", (), (None, "1 of 3 voters reachable, 2 needed"), id="alone-names-nobody"),
    pytest.param("127.0.0.2:9093", ("127.0.0.3:9093",), (None, "controller 2, is not reachable"),
                 id="leader-unreachable"),
    pytest.param(None, ("127.0.0.2:9093",), (None, "election is in progress"), id="no-leader-known"),
    pytest.param("127.0.0.1:9093", ("127.0.0.2:9093",), (None, "has not begun its epoch"), id="self-not-active-yet"),
]


@pytest.mark.parametrize(("leader", "connected", "expected"), CASES)
def test_named_leader(leader, connected, expected) -> None:
    node, reason = named_leader(1, IDS, leader, raft(*connected))
    assert node == expected[0]
    if expected[1] is None:
        assert reason is None
    else:
        assert reason is not None and expected[1] in reason
