"""A userspace hold on one Kafka request: the delayed EndTxn / retried Produce of KIP-890.

    with HoldProxy.open(brokers, gid=HOLD_GID, history=history) as proxy:
        proxy.arm(END_TXN)             # the next EndTxn of a held client is kept back ...
        ...                            # ... until that client's next transaction writes, then sent
        proxy.release()                # at the fault's heal at the latest

Jepsen found (Bufstream, 2024) that Kafka itself lets a late EndTxn or a retried Produce land
in the producer's *next* transaction: the request sits in the network, the client times it
out, retries, commits and begins anew, and then the old request arrives. The kernel here has
no netem to delay one request, and a delay must pick one request, not a link: so the
transactional clients named in the scenario (`txn_held`) run with their own group id, an
iptables nat rule sends their connections to the brokers' Kafka ports (and only theirs:
`-m owner --gid-owner`) to this proxy, which learns the broker each was meant for
(SO_ORIGINAL_DST) and relays the bytes both ways. It frames the client's requests to read
their API key; an armed hold keeps the next request of that key (the client's connection
carries on without it) and sends it later, on a fresh connection of its own to the same
broker, RELEASE_DELAY_S after the client's next transaction began to write: for EndTxn,
once an AddPartitionsToTxn and then a Produce passed; for a Produce, once an EndTxn, an
AddPartitionsToTxn and a Produce passed (`NEXT_TRANSACTION`). So the late request lands while
some of the next transaction's writes are appended and others may still be on their way:
the moment a late commit would tear it.
The late request's answer is recorded (`note` what=hold-released, with its error code).
"""

from __future__ import annotations

from common.limits import COMMAND_TIMEOUT_S, PROXY_CONNECT_TIMEOUT
import logging
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Final

from chaos.history import History

log = logging.getLogger(__name__)

NAT_CHAIN: Final = "TIDELOG-HOLD"  # each proxy's chain is NAT_CHAIN-<pid> in the nat table
PROXY_HOST: Final = "127.0.0.251"  # no node of a local cluster uses it (nodes are 127.0.0.1..N)
SO_ORIGINAL_DST: Final = 80  # linux/netfilter_ipv4.h
MAX_FRAME_BYTES: Final = 64 * 1024 * 1024  # a request larger than this is a broken stream: the connection closes
RELAY_CHUNK_BYTES: Final = 64 * 1024
RELEASE_DELAY_S: Final = 0.02  # the next transaction's first Produce is appended, its others may not be
LATE_ANSWER_S: Final = 10.0  # how long the released request's answer is awaited
ADD_PARTITIONS_TO_TXN: Final = 24
END_TXN: Final = 26
PRODUCE: Final = 0
# the requests that, in this order after the hold began, show the client's next transaction writing
NEXT_TRANSACTION: Final = {END_TXN: (ADD_PARTITIONS_TO_TXN, PRODUCE),
                           PRODUCE: (END_TXN, ADD_PARTITIONS_TO_TXN, PRODUCE)}


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["iptables", "-w", "5", "-t", "nat", *args], capture_output=True, text=True,
                            timeout=COMMAND_TIMEOUT_S, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"iptables -t nat {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def nat_chains() -> list[str]:
    listed = _iptables("-S", check=False).stdout.splitlines()
    return sorted(line.split()[1] for line in listed if line.startswith(f"-N {NAT_CHAIN}-"))


def clean_nat(*, everything: bool = False) -> list[str]:
    """Remove the nat chains of proxies whose process is gone (all of them with `everything`)."""
    removed = []
    for chain in nat_chains():
        pid = chain.rsplit("-", 1)[1]
        if not everything and pid.isdigit() and os.path.exists(f"/proc/{pid}"):
            continue
        while _iptables("-D", "OUTPUT", "-j", chain, check=False).returncode == 0:  # one jump per open
            pass
        _iptables("-F", chain, check=False)
        _iptables("-X", chain, check=False)
        removed.append(f"iptables nat chain {chain}")
    return removed


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:  # bounded by size
        chunk = sock.recv(min(RELAY_CHUNK_BYTES, size - len(data)))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed Kafka frame (prefix included), or None at the end of the stream."""
    prefix = _read_exactly(sock, 4)
    if prefix is None:
        return None
    (size,) = struct.unpack(">i", prefix)
    if not 0 <= size <= MAX_FRAME_BYTES:
        raise ConnectionError(f"a frame of {size} bytes: not a Kafka stream")
    body = _read_exactly(sock, size)
    return None if body is None else prefix + body


def request_key(frame: bytes) -> tuple[int, int]:
    """(api_key, api_version) of a request frame."""
    api_key, version = struct.unpack(">hh", frame[4:8])
    return api_key, version


@dataclass(slots=True)
class Held:
    api_key: int
    version: int
    destination: tuple[str, int]
    frame: bytes
    seen: int = 0  # how many of NEXT_TRANSACTION[api_key] passed, in order


class HoldProxy:
    def __init__(self, listener: socket.socket, chain: str, history: History) -> None:
        self._listener, self.chain, self.history = listener, chain, history
        self._lock = threading.Lock()
        self._armed: int | None = None
        self._held: Held | None = None
        self._closed = threading.Event()
        self._sockets: set[socket.socket] = set()
        self.released = 0
        self._accepter = threading.Thread(target=self._accept, name="chaos-hold-accept", daemon=True)
        self._accepter.start()

    @classmethod
    def open(cls, brokers: Sequence[tuple[str, int]], *, gid: int, history: History) -> HoldProxy:
        """Listen on PROXY_HOST and redirect `gid`'s connections to `brokers` (host, Kafka port) here."""
        clean_nat()
        listener = socket.create_server((PROXY_HOST, 0))
        port = listener.getsockname()[1]
        chain = f"{NAT_CHAIN}-{os.getpid()}"
        try:
            _iptables("-N", chain)
            _iptables("-I", "OUTPUT", "1", "-j", chain)
            for host, kafka_port in brokers:
                _iptables("-A", chain, "-p", "tcp", "-d", f"{host}/32", "--dport", str(kafka_port), "-m", "owner",
                          "--gid-owner", str(gid), "-j", "DNAT", "--to-destination", f"{PROXY_HOST}:{port}")
        except Exception:
            listener.close()
            clean_nat(everything=False)
            raise
        log.info("chaos: hold proxy on %s:%d for group %d (chain %s)", PROXY_HOST, port, gid, chain)
        history.record("note", what="hold-proxy", port=port, gid=gid, brokers=[f"{h}:{p}" for h, p in brokers])
        return cls(listener, chain, history)

    def arm(self, api_key: int) -> None:
        with self._lock:
            self._armed, self._held = api_key, None
        self.history.record("note", what="hold-armed", api_key=api_key)

    def holding(self) -> bool:
        """Whether a request is held right now."""
        with self._lock:
            return self._held is not None

    def _accept(self) -> None:
        while not self._closed.is_set():  # until close()
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener closed
            try:
                raw = client.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
                port, address = struct.unpack(">H", raw[2:4])[0], socket.inet_ntoa(raw[4:8])
                upstream = socket.create_connection((address, port), timeout=PROXY_CONNECT_TIMEOUT)
                upstream.settimeout(None)
            except OSError as exc:
                log.info("hold proxy: cannot reach the original destination: %s", exc)
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            threading.Thread(target=self._requests, args=(client, upstream, (address, port)),
                             name="chaos-hold-requests", daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client), name="chaos-hold-answers",
                             daemon=True).start()

    def _answers(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while chunk := upstream.recv(RELAY_CHUNK_BYTES):  # until either side closes
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            self._close_pair(client, upstream)

    def _requests(self, client: socket.socket, upstream: socket.socket, destination: tuple[str, int]) -> None:
        try:
            while (frame := read_frame(client)) is not None:  # until the client closes
                kept, release = self._hold(frame, destination)
                if not kept:
                    upstream.sendall(frame)
                if release is not None:  # after the request that began the next transaction went on
                    threading.Thread(target=self._send_late, args=(release, RELEASE_DELAY_S), name="chaos-hold-late",
                                     daemon=True).start()
        except (OSError, ConnectionError) as exc:
            log.info("hold proxy: connection to %s:%d ended: %s", *destination, exc)
        finally:
            self._close_pair(client, upstream)

    def _hold(self, frame: bytes, destination: tuple[str, int]) -> tuple[bool, Held | None]:
        """Whether this request is kept back, and the held request it releases (it begins the next transaction)."""
        api_key, version = request_key(frame)
        release: Held | None = None
        with self._lock:
            held = self._held
            if self._armed == api_key and held is None:
                self._held = Held(api_key, version, destination, frame)
                self._armed = None
                kept = True
            else:
                kept = False
                steps = NEXT_TRANSACTION.get(held.api_key, ()) if held is not None else ()
                if held is not None and held.seen < len(steps) and api_key == steps[held.seen]:
                    held.seen += 1
                    if held.seen == len(steps):
                        release, self._held = held, None
        if kept:
            self.history.record("note", what="hold-start", api_key=api_key, version=version,
                                broker=f"{destination[0]}:{destination[1]}")
        if release is not None:
            self.history.record("note", what="hold-next-transaction", api_key=api_key)
        return kept, release

    def release(self) -> None:
        """Send a request still held now (the fault's heal), and disarm."""
        with self._lock:
            held, self._held, self._armed = self._held, None, None
        if held is not None:
            self._send_late(held)

    def _send_late(self, held: Held, delay_s: float = 0.0) -> None:
        """The held request, alone on a fresh connection; its answer's error code recorded."""
        self._closed.wait(delay_s)
        error: int | None = None
        why = ""
        try:
            with socket.create_connection(held.destination, timeout=PROXY_CONNECT_TIMEOUT) as late:
                late.settimeout(LATE_ANSWER_S)
                late.sendall(held.frame)
                answer = read_frame(late)
                error = None if answer is None else _answer_error(held, answer)
        except (OSError, ConnectionError) as exc:
            why = str(exc)
        self.released += 1
        self.history.record("note", what="hold-released", api_key=held.api_key, version=held.version,
                            error_code=error, why=why)

    def _close_pair(self, a: socket.socket, b: socket.socket) -> None:
        for sock in (a, b):
            try:
                sock.close()
            except OSError:
                pass
        with self._lock:
            self._sockets.difference_update((a, b))

    def close(self) -> None:
        self.release()
        self._closed.set()
        _close_listener(self._listener)
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass
        while _iptables("-D", "OUTPUT", "-j", self.chain, check=False).returncode == 0:  # one jump
            pass
        _iptables("-F", self.chain, check=False)
        _iptables("-X", self.chain, check=False)

    def __enter__(self) -> HoldProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def _close_listener(listener: socket.socket) -> None:
    """Wake the accepting thread before closing: a bare close leaves it blocked in accept() on a
    file descriptor number the next socket opened may reuse (it would accept that one's connections)."""
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected in the kernel's view on some systems; close still follows
    listener.close()


def _answer_error(held: Held, answer: bytes) -> int | None:
    """The top-level error code of a late EndTxn's answer (Produce answers carry one per partition:
    the first), from kio's generated response; None when it cannot be read."""
    from common.protocol import messages
    from common.protocol.frame import strip_response_header

    try:
        body = strip_response_header(held.api_key, held.version, memoryview(answer)[8:])
        decoded = messages.decode_response(held.api_key, held.version, body)
    except Exception as exc:  # an unreadable answer is recorded as unknown
        log.info("hold proxy: the late answer could not be read: %s", exc)
        return None
    if hasattr(decoded, "error_code"):
        return int(decoded.error_code)
    for topic in getattr(decoded, "responses", ()):
        for partition in getattr(topic, "partition_responses", ()):
            return int(partition.error_code)
    return None
