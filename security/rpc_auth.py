"""Broker <-> controller RPC authentication (issue 29): a per-broker key proven per request.

    signer = RpcSigner(node_id=4, secret=broker_key(master, 4))   # or RpcSigner.from_master(4, master)
    headers = {"Authorization": signer.authorization("POST", "127.0.0.1:9094", "/rpc/broker-heartbeat",
                                                     body, now_ms=now, nonce=os.urandom(16).hex())}
    verifier = RpcVerifier(master)
    node_id = verifier.verify(headers.get("Authorization"), "POST", host, path, body, now_ms=now)  # or RpcAuthError

Why keys derived from one secret and not mutual TLS: tidelog's controllers and brokers already
share files a `tidelog up` data dir holds (the quorum password, meta.properties), pysyncobj's Raft
port is protected the same way, and a secret needs no CA, certificate rotation or TLS stack, so
every caller (brokers, the pytest plugin, the chaos engine, an operator's curl) keeps working with
one file. The controllers (and combined nodes) hold the cluster's master secret; a broker holds
only its own key, K_N = HMAC-SHA256(master, "tidelog-broker-rpc-key-v1" || N), which `tidelog up`
and `tidelog format` write into that broker's directory (0600). The controller derives K_N for the
node id a request's header names, so a request signed with K_4 verifies as broker 4 only: a
compromised broker can speak for itself and no other broker, and a process holding no key cannot
register, heartbeat, fence, alter an ISR, allocate producer ids or follow the metadata log. (Kafka
itself does not bind a broker id to its controller-listener principal, so this is stronger than
Kafka's KRaft there.) The derivation is one-way: K_4 reveals neither the master nor K_5.

The proof: `Authorization: TIDELOG-HMAC-SHA256 node=<id>,ts=<ms>,nonce=<hex>,sig=<hex>`, sig being
HMAC-SHA256(K_node, version, method, host, path, node id, timestamp, nonce, SHA-256 of the body).
The node id picks the key and is in the MAC, binding the request to one node: the controller
checks that a request speaking for broker B was signed as B. The timestamp bounds replays to `REPLAY_WINDOW_MS` either
side of the controller's clock, and within it a nonce is accepted once (`RpcVerifier` remembers
the nonces of the window; at most `MAX_REMEMBERED_NONCES`, beyond which the oldest are forgotten
and the window's floor rises past them, so a forgotten nonce can never be replayed). The host
binds a request to the controller it was sent to.

Pure: no sockets, clocks or files; the time and the nonce are the caller's.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Final

from common.units import INT_MAX

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

SCHEME: Final = "TIDELOG-HMAC-SHA256"
VERSION: Final = "tidelog-rpc-v1"  # in the MAC: a later format cannot be confused with this one
BROKER_KEY_LABEL: Final = "tidelog-broker-rpc-key-v1"  # the derivation's label: K_N is for this use only
SECRET_FILE_KEY: Final = "controller.rpc.secret.file"  # tidelog's own key (Kafka has no equivalent)
MIN_SECRET_BYTES: Final = 32  # what the secret file must hold at least (256 bits, HMAC-SHA256's key size)
REPLAY_WINDOW_MS: Final = 30_000  # a request's timestamp may differ from the controller's clock by this much
MAX_REMEMBERED_NONCES: Final = 200_000  # nonces of the window kept (about 6,600 RPCs/s over 30 s)
NONCE_HEX_CHARS: Final = 32  # 128 random bits, as hex
MAX_AUTHORIZATION_CHARS: Final = 256  # the header; a longer one is refused before parsing
UNAUTHENTICATED: Final = 401
FORBIDDEN: Final = 403

_HEADER: Final = re.compile(SCHEME + r" node=(\d{1,10}),ts=(\d{1,15}),nonce=([0-9a-f]{%d}),sig=([0-9a-f]{64})"
                            % NONCE_HEX_CHARS)


class RpcAuthError(Exception):
    """A request without a valid proof (401), or one speaking for a node it did not prove (403)."""

    def __init__(self, message: str, status: int = UNAUTHENTICATED) -> None:
        super().__init__(message)
        self.status = status


def _check_secret(secret: bytes) -> bytes:
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the RPC secret must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
    return secret


def _mac(secret: bytes, method: str, host: str, path: str, node_id: int, timestamp_ms: int, nonce: str,
         body: bytes) -> str:
    host = host.lower().removesuffix(":80")  # HTTP clients leave the default port out of Host
    text = "\n".join((VERSION, method.upper(), host, path, str(node_id), str(timestamp_ms), nonce,
                      hashlib.sha256(body).hexdigest()))
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def _check_node_id(node_id: int) -> int:
    if not 0 <= node_id <= INT_MAX:
        raise ValueError(f"node id {node_id} is not in [0, {INT_MAX}]")
    return node_id


def broker_key(master: bytes, node_id: int) -> bytes:
    """K_N: the key node `node_id` signs its RPCs with, derived from the cluster's master secret.
    The node id is written as decimal after the label and a NUL, so no two ids share an input."""
    message = f"{BROKER_KEY_LABEL}\0{_check_node_id(node_id)}".encode()
    return hmac.new(_check_secret(master), message, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class RpcSigner:
    """A node's side: the Authorization header of one request, signed with that node's own key
    (`broker_key`). repr hides the key."""

    node_id: int
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        _check_node_id(self.node_id)
        _check_secret(self.secret)

    @classmethod
    def from_master(cls, node_id: int, master: bytes) -> RpcSigner:
        """The signer of node `node_id` for a holder of the master secret (a combined node, the
        operator's tools): it signs with K_N, exactly as that broker would."""
        return cls(node_id, broker_key(master, node_id))

    def authorization(self, method: str, host: str, path: str, body: bytes, *, now_ms: int, nonce: str) -> str:
        if not re.fullmatch(f"[0-9a-f]{{{NONCE_HEX_CHARS}}}", nonce):
            raise ValueError(f"a nonce is {NONCE_HEX_CHARS} lowercase hex characters")
        sig = _mac(self.secret, method, host, path, self.node_id, now_ms, nonce, body)
        return f"{SCHEME} node={self.node_id},ts={now_ms},nonce={nonce},sig={sig}"


class RpcVerifier:
    """The controller's side: one request's proof in, the node id it proves out (or RpcAuthError).
    It holds the master secret and checks each proof with the key of the node its header names.

    Holds soft state only: the nonces seen within the replay window (a restarted controller
    forgets them, and refuses nothing older than its window anyway)."""

    def __init__(self, secret: bytes, *, window_ms: int = REPLAY_WINDOW_MS,
                 max_nonces: int = MAX_REMEMBERED_NONCES) -> None:
        self._secret = _check_secret(secret)
        self._window_ms, self._max_nonces = window_ms, max_nonces
        self._seen: set[str] = set()
        self._by_time: list[tuple[int, str]] = []  # a heap of (timestamp, nonce) of `_seen`
        self._floor_ms = -1  # requests at or before this may carry a forgotten nonce: refused

    def check_header(self, header: str | None, *, now_ms: int) -> tuple[int, int, str, str]:
        """(node id, timestamp, nonce, sig) of a well-formed header within the window; before the
        body is read, so a stranger's request costs no body read."""
        if not header:
            raise RpcAuthError(f"this RPC needs an 'Authorization: {SCHEME} ...' header (see {SECRET_FILE_KEY})")
        match = _HEADER.fullmatch(header) if len(header) <= MAX_AUTHORIZATION_CHARS else None
        if match is None:
            raise RpcAuthError(f"the Authorization header is not '{SCHEME} node=<id>,ts=<ms>,"
                               f"nonce=<{NONCE_HEX_CHARS} hex>,sig=<64 hex>'")
        node_id, timestamp_ms = int(match[1]), int(match[2])
        if node_id > INT_MAX:
            raise RpcAuthError(f"node id {node_id} is not in [0, {INT_MAX}]")
        if abs(timestamp_ms - now_ms) > self._window_ms:
            raise RpcAuthError(f"the request's timestamp {timestamp_ms} is {timestamp_ms - now_ms:+d} ms from this "
                               f"controller's clock, outside the {self._window_ms} ms replay window "
                               "(a replayed request, or clocks apart)")
        return node_id, timestamp_ms, match[3], match[4]

    def verify(self, header: str | None, method: str, host: str, path: str, body: bytes, *, now_ms: int) -> int:
        """The node id the request proves; RpcAuthError (401) for no proof, a wrong one, or a replay."""
        node_id, timestamp_ms, nonce, sig = self.check_header(header, now_ms=now_ms)
        expected = _mac(broker_key(self._secret, node_id), method, host, path, node_id, timestamp_ms, nonce, body)
        if not hmac.compare_digest(expected, sig):
            raise RpcAuthError(f"the request's signature does not match: not signed with node {node_id}'s RPC key "
                               f"(derived from this cluster's {SECRET_FILE_KEY}), or changed on the way")
        self._forget(now_ms)
        if nonce in self._seen or timestamp_ms <= self._floor_ms:
            raise RpcAuthError(f"a replayed request (nonce {nonce} of node {node_id} was already used)")
        self._seen.add(nonce)
        heapq.heappush(self._by_time, (timestamp_ms, nonce))
        self._forget(now_ms)
        return node_id

    def _forget(self, now_ms: int) -> None:
        """Drop the nonces whose timestamps left the window, then the oldest beyond the bound
        (raising the floor past them). Bounded by the heap's size."""
        while self._by_time and (self._by_time[0][0] < now_ms - self._window_ms
                                 or len(self._by_time) > self._max_nonces):
            timestamp_ms, nonce = heapq.heappop(self._by_time)
            self._seen.discard(nonce)
            if len(self._by_time) >= self._max_nonces:
                self._floor_ms = max(self._floor_ms, timestamp_ms)

    @property
    def remembered(self) -> int:
        """How many nonces are remembered now (a gauge for tests and metrics)."""
        return len(self._seen)


def check_speaks_for(proven: int, claimed: int, what: str) -> None:
    """A request speaking for broker `claimed` must be signed as that broker: RpcAuthError(403)."""
    if proven != claimed:
        raise RpcAuthError(f"{what} speaks for broker {claimed} but was signed as node {proven}: one node "
                           "cannot speak for another", FORBIDDEN)


def is_loopback(host: str) -> bool:
    """Whether a listener bound to `host` is reachable from this machine only (127.0.0.0/8, ::1,
    localhost). An empty host, 0.0.0.0, :: and any other name or address are beyond loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve to anything
