"""pysyncobj's TCP transport with every outgoing connection leaving from the voter's own address.

pysyncobj's `TcpConnection.connect` creates an unbound socket, so on loopback every peer
connection leaves from 127.0.0.1 whatever voter opens it (measured with `ss -tn`): a
firewall rule on one voter's 127.0.0.N source would match nothing, and chaos could not cut
one voter's links. Binding the socket to the voter's own host (port 0) before `connect` is
what Kafka's `client.dns.lookup`-free setups get from their `local_addr`; nothing else
about the transport changes.

pysyncobj offers no source-address option; its `setSockoptKeepalive` hook runs on the new
socket after creation and before `connect`, the one point where a bind can go without
copying its connect logic.
"""

from __future__ import annotations

import socket
from typing import Any

from quorum.durability_gate import DurabilityGate

from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport


class _BoundTcpConnection(TcpConnection):  # pysyncobj has no type hints
    """A TcpConnection that binds its outgoing socket to `source_host` before connecting."""

    source_host: str | None = None

    def setSockoptKeepalive(self) -> None:  # pysyncobj's name
        # name-mangled private attribute of pysyncobj 0.3.x: the socket connect() just created
        sock: socket.socket | None = getattr(self, "_TcpConnection__socket", None)
        if sock is not None and self.source_host and sock.getsockname()[1] == 0:
            # an incoming connection is already bound (port != 0): only outgoing ones get here
            sock.bind((self.source_host, 0))
        super().setSockoptKeepalive()


class BoundTCPTransport(TCPTransport):
    """TCPTransport whose outgoing connections leave from the host of `selfNode`, and whose
    messages wait for the voter's `DurabilityGate` (issue 28) when its SyncObj has one."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        # read before TCPTransport.__init__: it may already send (connect handshakes do not use send)
        gate = getattr(syncObj, "durability_gate", None)
        self._gate: DurabilityGate | None = gate if isinstance(gate, DurabilityGate) else None
        if self._gate is not None:
            self._gate.attach(super().send)
        super().__init__(syncObj, selfNode, otherNodes)
        if self._gate is not None:
            # pysyncobj runs on-tick callbacks after a tick's commands were appended and just
            # before it polls the sockets: the leader's entries get their fsync there, not one
            # poll (autoTickPeriod) later; quorum.metadata_log flushes after the poll as well
            syncObj.addOnTickCallback(self._gate.flush)

    def setOnMessageReceivedCallback(self, callback: Any) -> None:  # pysyncobj's name
        """Every message goes through the SyncObj's `raft_message_observer(node, message, deliver)`
        when it has one (`quorum.metadata_log`), which calls `deliver` (pysyncobj's handler)."""
        observer = getattr(self._syncObj, "raft_message_observer", None)
        if observer is None:
            super().setOnMessageReceivedCallback(callback)
            return

        def observed(node: Any, message: Any) -> None:
            observer(node, message, callback)

        super().setOnMessageReceivedCallback(observed)

    def send(self, node: Any, message: Any) -> bool:  # pysyncobj's name
        if self._gate is not None and self._gate.hold(node, message):
            return True  # sent at the gate's flush, after the fsync
        return bool(super().send(node, message))

    def addNode(self, node: Any) -> None:  # pysyncobj's name
        if node in self._nodes and node in self._connections:
            # already known (an observer told of the voters before its log named them, KIP-853):
            # pysyncobj would replace the live connection with a new, unconnected one
            return
        super().addNode(node)
        connection = self._connections.get(node)
        if connection is not None and type(connection) is TcpConnection:
            # the class swap adds one overriding method and no state but `source_host`
            connection.__class__ = _BoundTcpConnection
            connection.source_host = self._selfNode.host
