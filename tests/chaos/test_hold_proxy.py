"""The hold proxy (chaos.nemeses.hold) on real sockets and real iptables nat rules: a client
process of the held group talks to a stand-in broker; the armed EndTxn is kept back while the
client's other requests pass, and reaches the broker alone, on a connection of its own, only
after the client's next AddPartitionsToTxn and Produce. Processes of other groups are not redirected, and
closing the proxy leaves no nat chain behind. Needs root and iptables (skipped otherwise)."""

from __future__ import annotations

import io
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from chaos.engine.txn_workload import HOLD_GID
from chaos.history import History
from chaos.nemeses.firewall import iptables_missing
from chaos.nemeses.hold import ADD_PARTITIONS_TO_TXN, END_TXN, PRODUCE, HoldProxy, nat_chains, read_frame
from common.waiting import wait_until

pytestmark = pytest.mark.skipif(iptables_missing() is not None, reason=str(iptables_missing()))

BROKER_HOST = "127.0.0.252"
METADATA = 3

# the client: three requests on one connection (api key, version 0, correlation id), one answer each awaited
# but the held one's; prints the correlation ids answered
CLIENT = r"""
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=5)
answered = []
for corr, key in enumerate([int(k) for k in sys.argv[3].split(",")]):
    body = struct.pack(">hhi", key, 0, corr) + struct.pack(">h", -1)
    s.sendall(struct.pack(">i", len(body)) + body)
    if key != int(sys.argv[4]):
        size = struct.unpack(">i", s.recv(4))[0]
        answered.append(struct.unpack(">i", s.recv(size)[:4])[0])
print(",".join(map(str, answered)))
"""


class StandInBroker:
    """Answers every request frame with its correlation id; remembers (connection, api key) in order."""

    def __init__(self) -> None:
        self.listener = socket.create_server((BROKER_HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.seen: list[tuple[int, int]] = []
        self._connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self._connections += 1
            threading.Thread(target=self._serve, args=(conn, self._connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn:
            while (frame := read_frame(conn)) is not None:
                key, _, corr = struct.unpack(">hhi", frame[4:12])
                self.seen.append((number, key))
                conn.sendall(struct.pack(">ii", 6, corr) + struct.pack(">h", 0))


@pytest.fixture
def broker() -> Iterator[StandInBroker]:
    b = StandInBroker()
    yield b
    b.listener.shutdown(socket.SHUT_RDWR)  # wakes its accept(): its fd number may be reused by the next test
    b.listener.close()


def run_client(broker: StandInBroker, keys: list[int], held: int, *, group: int | None) -> str:
    result = subprocess.run([sys.executable, "-c", CLIENT, BROKER_HOST, str(broker.port),
                             ",".join(map(str, keys)), str(held)], capture_output=True, text=True, timeout=20,
                            group=group, check=True)
    return result.stdout.strip()


def test_an_armed_end_txn_is_held_until_the_next_transaction_began(broker: StandInBroker) -> None:
    out = io.StringIO()
    history = History(out)
    with HoldProxy.open([(BROKER_HOST, broker.port)], gid=HOLD_GID, history=history) as proxy:
        proxy.arm(END_TXN)
        answered = run_client(broker, [METADATA, END_TXN, METADATA, ADD_PARTITIONS_TO_TXN, PRODUCE], END_TXN,
                              group=HOLD_GID)
        assert answered == "0,2,3,4"  # the EndTxn (correlation 1) never answered to the client
        wait_until("the held EndTxn delivered", lambda: proxy.released == 1, 10)
    assert [key for _, key in broker.seen] == [METADATA, METADATA, ADD_PARTITIONS_TO_TXN, PRODUCE, END_TXN]
    first = broker.seen[0][0]
    assert [c for c, _ in broker.seen[:4]] == [first] * 4 and broker.seen[4][0] != first  # alone, later
    notes = [line for line in out.getvalue().splitlines() if "hold-" in line]
    assert any('"hold-start"' in n for n in notes) and any('"hold-released"' in n for n in notes)
    assert not any(chain.endswith(f"-{os.getpid()}") for chain in nat_chains())  # closing removed it


def test_other_processes_are_not_redirected_and_heal_releases(broker: StandInBroker) -> None:
    history = History(io.StringIO())
    with HoldProxy.open([(BROKER_HOST, broker.port)], gid=HOLD_GID, history=history) as proxy:
        proxy.arm(END_TXN)
        # not of the held group: straight to the broker, the EndTxn answered
        assert run_client(broker, [END_TXN], -1, group=None) == "0"
        assert broker.seen == [(1, END_TXN)]
        run_client(broker, [END_TXN, ADD_PARTITIONS_TO_TXN], END_TXN, group=HOLD_GID)  # no Produce follows
        wait_until("the EndTxn held", proxy.holding, 10)
        wait_until("the AddPartitionsToTxn passed", lambda: len(broker.seen) == 2, 10)
        assert proxy.holding()  # the next transaction began but wrote nothing yet
        proxy.release()  # the fault's heal
        assert proxy.released == 1 and [k for _, k in broker.seen] == [END_TXN, ADD_PARTITIONS_TO_TXN, END_TXN]
