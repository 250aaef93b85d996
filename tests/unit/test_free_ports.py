"""free_ports draws test ports from below the kernel's ephemeral range.

A port the kernel hands out for bind-to-0 can be taken again, before the node binds it, by any
outgoing socket bound to the node's address (quorum/bound_transport.py binds a controller's Raft
connections to its own host): broker 2 of a CI run died with EADDRINUSE on such a port.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from localcluster.launcher import (FREE_PORT_FLOOR, LauncherError, ephemeral_port_range,
                                   free_ports)

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
RANGE = (40000, 60999)


def test_ports_come_from_below_the_ephemeral_range_and_bind_on_every_host() -> None:
    ports = free_ports(HOSTS, 4, rng=random.Random(7), port_range=RANGE)
    assert len(set(ports)) == 4
    assert all(FREE_PORT_FLOOR <= port < RANGE[0] for port in ports)
    for host in HOSTS:
        for port in ports:
            with socket.socket() as probe:
                probe.bind((host, port))


def test_the_machines_own_range_is_kept_clear_of() -> None:
    kernel = ephemeral_port_range()
    if kernel is None:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range on this machine")
    assert all(port < kernel[0] for port in free_ports(HOSTS, 4))


def test_a_port_taken_at_any_host_is_drawn_again() -> None:
    first = random.Random(11).randrange(FREE_PORT_FLOOR, RANGE[0])
    with socket.create_server(("127.0.0.2", first)):
        (port,) = free_ports(HOSTS, 1, rng=random.Random(11), port_range=RANGE)
    assert port != first


def test_a_port_taken_at_the_first_host_is_drawn_again() -> None:
    first = random.Random(5).randrange(FREE_PORT_FLOOR, RANGE[0])
    with socket.create_server(("127.0.0.1", first)):
        (port,) = free_ports(HOSTS, 1, rng=random.Random(5), port_range=RANGE)
    assert port != first


def test_a_range_with_no_band_below_it_leaves_the_choice_to_the_kernel() -> None:
    (port,) = free_ports(HOSTS[:1], 1, port_range=(FREE_PORT_FLOOR + 10, 60999))
    assert port > 0


def test_every_try_taken_is_a_launcher_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        held_port = held.getsockname()[1]

        class Taken(random.Random):  # draws the one port a listener holds, every time
            def randrange(self, *_args: object, **_kwargs: object) -> int:
                return held_port

        with pytest.raises(LauncherError, match="no 1 ports free"):
            free_ports(HOSTS[:1], 1, rng=Taken(), port_range=(60000, 60999))


@pytest.mark.parametrize(("text", "expected"), [("32768\t60999\n", (32768, 60999)),
                                                ("garbage", None), ("1 2 3", None)])
def test_the_range_file_is_read_or_ignored(tmp_path: Path, text: str, expected: object) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    assert ephemeral_port_range(path) == expected
    assert ephemeral_port_range(tmp_path / "missing") is None
