"""The harness's iptables chain cuts exactly the chosen link and always goes away: at the end
of the block, when the body fails, and through `tidelog chaos clean` after a crash."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.nemeses.firewall import (
    Firewall,
    clean,
    iptables_missing,
    leftovers,
    tc_missing,
)
from chaos.nemeses.links import PacketMatch

pytestmark = pytest.mark.skipif(iptables_missing() is not None, reason=str(iptables_missing()))
SERVER, CLIENT, OTHER = "127.0.0.7", "127.0.0.8", "127.0.0.9"
CONNECT_TIMEOUT_S = 0.5


@pytest.fixture
def server() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind((SERVER, 0))
        listener.listen(8)
        yield listener.getsockname()[1]
    clean()


def connects(source: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(CONNECT_TIMEOUT_S)
        s.bind((source, 0))
        try:
            s.connect((SERVER, port))
            return True
        except OSError:
            return False


def test_a_second_run_leaves_the_first_ones_rules_alone(server: int) -> None:
    with Firewall.open() as first:
        first.drop([PacketMatch(CLIENT, SERVER, server, True)])
        with Firewall.open() as second:
            assert second.chain != first.chain
        assert not connects(CLIENT, server)  # the second's open and close kept the first's rule
    assert connects(CLIENT, server) and leftovers() == []


def test_a_drop_rule_cuts_one_source_only_until_removed(server: int) -> None:
    with Firewall.open() as firewall:
        handle = firewall.drop([PacketMatch(CLIENT, SERVER, server, True)])
        assert not connects(CLIENT, server)
        assert connects(OTHER, server)  # another address, same port: untouched
        firewall.remove(handle)
        assert connects(CLIENT, server)
    assert leftovers() == []


def test_the_chain_goes_away_when_the_body_fails(server: int) -> None:
    with pytest.raises(RuntimeError, match="boom"), Firewall.open() as firewall:
        firewall.drop([PacketMatch(CLIENT, SERVER, server, True)])
        raise RuntimeError("boom")
    assert leftovers() == [] and connects(CLIENT, server)


def test_tidelog_chaos_clean_removes_a_crashed_runs_chain(server: int) -> None:
    crashed = Firewall.open()
    crashed.drop([PacketMatch(CLIENT, SERVER, server, True)])  # never closed: a crash
    assert leftovers() == [f"iptables chain {crashed.chain}"] and not connects(CLIENT, server)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "tidelog", "chaos", "clean"], capture_output=True, text=True,
                          timeout=30, cwd=root, check=True)
    assert "chain" in done.stdout
    assert leftovers() == [] and connects(CLIENT, server)


def test_netem_delays_only_the_chosen_pair(server: int) -> None:
    import time

    if tc_missing() is not None:
        pytest.skip(str(tc_missing()))
    with Firewall.open() as firewall:
        firewall.netem([PacketMatch(CLIENT, SERVER, server, True)], ["delay", "300ms"])
        start = time.monotonic()
        assert connects(CLIENT, server)  # the SYN is delayed 300 ms, within the 0.5 s timeout
        slow = time.monotonic() - start
        start = time.monotonic()
        assert connects(OTHER, server)
        fast = time.monotonic() - start
    assert slow >= 0.25 and fast < 0.1
    assert leftovers() == []
