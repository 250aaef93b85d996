"""Fuzz a real broker's SASL handshake over loopback, as bench/fuzz_broker.py fuzzes its protocol:
the broker never crashes, closes only the connection that sent the bad bytes, and keeps
authenticating real clients.

    .venv/bin/python bench/fuzz_sasl.py                       # 2,000 cases on its own cluster
    .venv/bin/python bench/fuzz_sasl.py --cases 300 --seed 7 --bootstrap 127.0.0.1:9093 \
        --user alice --password alice-secret --log /path/to/broker.log   # an existing listener

Without --bootstrap a one-node cluster (LocalCluster, combined) is started in a temporary
directory with a SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-256/512) and a SCRAM-SHA-512
user, and always stopped. Each case opens a connection and sends one attack, then reads until
the broker closes it or the read times out (a truncated frame: the broker waits for more, and
connections.max.idle.ms would close it). Attacks, from a seeded random.Random:
  - random bytes behind a random (or huge) size prefix;
  - SaslHandshake v0/v1 naming a real, a lower-case or a made-up mechanism, with a mutated
    body (bit flips, truncation, inserted and duplicated bytes);
  - a valid handshake, then SaslAuthenticate v0-v2 (or v0's raw token) carrying a mutation of
    a real PLAIN token or SCRAM client-first message;
  - a valid SCRAM client-first, then a mutated client-final (proof, nonce, channel binding,
    extra attributes, truncation) or a second client-first;
  - a request that is not SASL (Metadata, Produce) before authentication;
  - a header with an api version out of range.
The oracle: every 25 cases, and at the end, a canary logs in with real SCRAM (checking the
server's signature) and gets ApiVersions answered; the broker log holds no "Traceback" or
"unexpected error"; the broker process is alive. Exit status 1 on any failure; every failure
line carries the seed.
"""

from __future__ import annotations

import argparse
import random
import secrets
import socket
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

from common.protocol import messages  # noqa: E402
from common.protocol.api_keys import ApiKey  # noqa: E402
from common.protocol.frame import RequestHeader, encode_request_header, strip_response_header  # noqa: E402
from common.units import KIB  # noqa: E402
from security.scram import MECHANISMS, NONCE_BYTES, ScramClient  # noqa: E402

CASE_TIMEOUT_S: Final = 0.5  # a case's read: the broker answers or closes within it (a failure: 100 ms)
CANARY_EVERY: Final = 25  # cases between two real logins
CANARY_TIMEOUT_S: Final = 10.0
MAX_RANDOM_BYTES: Final = 600
HUGE_FRAME_BYTES: Final = 600 * KIB  # above sasl.server.max.receive.size (512 KiB)
MECHANISM_NAMES: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512", "GSSAPI", "X" * 300, "")
BAD_LOG_LINES: Final = ("Traceback", "unexpected error", "Unhandled")


def frame(api_key: int, version: int, correlation: int, body: bytes, client_id: str | None = "fuzz") -> bytes:
    data = encode_request_header(RequestHeader(api_key, version, correlation, client_id)) + body
    return struct.pack(">i", len(data)) + data


def request_body(api: ApiKey, version: int, **fields: Any) -> bytes:
    entity = messages.build(messages.request_type(api, version), **fields)
    return b"".join(bytes(c) for c in messages.encode_request(entity, version))  # type: ignore[arg-type]


def handshake(version: int, mechanism: str) -> bytes:
    return frame(ApiKey.SASL_HANDSHAKE, version, 1, request_body(ApiKey.SASL_HANDSHAKE, version, mechanism=mechanism))


def authenticate(version: int, token: bytes, correlation: int = 2) -> bytes:
    return frame(ApiKey.SASL_AUTHENTICATE, version, correlation,
                 request_body(ApiKey.SASL_AUTHENTICATE, version, auth_bytes=token))


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One of fuzz_broker's byte mutations."""
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
    b = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0:  # bit flips
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation
        del b[rng.randrange(len(b)):]
    elif kind == 2:  # inserted bytes
        i = rng.randrange(len(b) + 1)
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    elif kind == 3:  # a duplicated run
        i = rng.randrange(len(b))
        b[i:i] = b[i:i + rng.randrange(1, 32)]
    elif kind == 4:  # a byte set to an edge value
        b[rng.randrange(len(b))] = rng.choice((0, 0x7F, 0x80, 0xFF))
    else:  # a deleted run
        i = rng.randrange(len(b))
        del b[i:i + rng.randrange(1, 16)]
    return bytes(b)


def reframe(rng: random.Random, whole: bytes) -> bytes:
    """A mutation of a frame's body, its size prefix fixed (so the broker parses what follows)."""
    body = mutate(rng, whole[4:])
    return struct.pack(">i", len(body)) + body


class Target:
    def __init__(self, host: str, port: int, user: str, password: str, mechanism: str) -> None:
        self.host, self.port, self.user, self.password, self.mechanism = host, port, user, password, mechanism

    def connect(self, timeout_s: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
        sock.settimeout(timeout_s)
        return sock


def read_frame(sock: socket.socket) -> bytes:
    head = _read_exactly(sock, 4)
    return _read_exactly(sock, struct.unpack(">i", head)[0])


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:  # bounded by n and the socket's timeout
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def answer(sock: socket.socket, api: ApiKey, version: int) -> Any:
    data = read_frame(sock)
    return messages.decode_response(api, version, strip_response_header(api, version, memoryview(data)[4:]))


def scram_first(target: Target, mechanism: str) -> tuple[ScramClient, bytes]:
    client = ScramClient(MECHANISMS[mechanism], target.user, target.password, secrets.token_urlsafe(NONCE_BYTES))
    return client, client.first()


# ---- the attacks: each sends its bytes on a fresh connection (after real exchanges, for some) ----

Attack = Callable[[random.Random, Target, socket.socket], None]


def _random_bytes(rng: random.Random, target: Target, sock: socket.socket) -> None:
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(MAX_RANDOM_BYTES)))
    size = rng.choice((len(body), len(body) + rng.randrange(1, 64), HUGE_FRAME_BYTES, -1, 0))
    sock.sendall(struct.pack(">i", size) + body)


def _mutated_handshake(rng: random.Random, target: Target, sock: socket.socket) -> None:
    sock.sendall(reframe(rng, handshake(rng.choice((0, 1)), rng.choice(MECHANISM_NAMES))))


def _mutated_token(rng: random.Random, target: Target, sock: socket.socket) -> None:
    mechanism = rng.choice(("PLAIN", target.mechanism))
    version = rng.choice((0, 1))
    sock.sendall(handshake(version, mechanism))
    answer(sock, ApiKey.SASL_HANDSHAKE, version)
    token = (f"\0{target.user}\0{target.password}".encode() if mechanism == "PLAIN"
             else scram_first(target, mechanism)[1])
    token = mutate(rng, token)
    if version == 0:  # v0: raw tokens behind a size prefix, no Kafka header
        sock.sendall(struct.pack(">i", len(token)) + token)
    else:
        sock.sendall(authenticate(rng.choice((0, 1, 2)), token) if rng.random() < 0.7
                     else reframe(rng, authenticate(2, token)))


def _mutated_final(rng: random.Random, target: Target, sock: socket.socket) -> None:
    sock.sendall(handshake(1, target.mechanism))
    answer(sock, ApiKey.SASL_HANDSHAKE, 1)
    client, first = scram_first(target, target.mechanism)
    sock.sendall(authenticate(2, first))
    server_first = answer(sock, ApiKey.SASL_AUTHENTICATE, 2)
    if int(server_first.error_code):
        return
    final = client.final(bytes(server_first.auth_bytes))
    kind = rng.randrange(4)
    if kind == 0:
        final = mutate(rng, final)
    elif kind == 1:  # a proof of the right length but wrong
        head, _, _ = final.rpartition(b",p=")
        final = head + b",p=" + bytes(rng.randrange(33, 127) for _ in range(88))
    elif kind == 2:  # extra attributes, or a second client-first in place of the final
        final = final + b",x=" + bytes(rng.randrange(33, 127) for _ in range(rng.randrange(1, 64))) \
            if rng.random() < 0.5 else first
    else:  # the final split across two frames (truncated first)
        cut = rng.randrange(1, len(final))
        sock.sendall(authenticate(2, final[:cut], correlation=3))
        final = final[cut:]
    sock.sendall(authenticate(2, final, correlation=4))


def _not_sasl_first(rng: random.Random, target: Target, sock: socket.socket) -> None:
    api = rng.choice((ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FIND_COORDINATOR))
    sock.sendall(frame(api, rng.randrange(0, 9), 1, bytes(rng.randrange(256) for _ in range(rng.randrange(64)))))


def _bad_version(rng: random.Random, target: Target, sock: socket.socket) -> None:
    api = rng.choice((ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))
    sock.sendall(frame(api, rng.choice((-1, 3, 99, 32767)), 1, b"\x00\x05PLAIN"))


ATTACKS: Final[tuple[tuple[str, Attack], ...]] = (
    ("random-bytes", _random_bytes), ("mutated-handshake", _mutated_handshake),
    ("mutated-token", _mutated_token), ("mutated-scram-final", _mutated_final),
    ("request-before-auth", _not_sasl_first), ("bad-version", _bad_version),
)


def run_case(rng: random.Random, target: Target, timeout_s: float = CASE_TIMEOUT_S) -> str:
    """One attack on a fresh connection; its name. Never raises for what the broker does."""
    name, attack = ATTACKS[rng.randrange(len(ATTACKS))]
    try:
        with target.connect(timeout_s) as sock:
            try:
                attack(rng, target, sock)
                while sock.recv(65536):  # until the broker closes it (or the read times out)
                    pass
            except (OSError, ConnectionError, ValueError, struct.error):
                pass  # closed, reset or timed out: all allowed; the canary says if the broker lives
    except OSError as exc:
        raise FuzzFailure(f"cannot connect to {target.host}:{target.port} ({exc})") from None
    return name


class FuzzFailure(Exception):
    pass


def canary(target: Target) -> None:
    """A real SCRAM login (the server's signature checked) and ApiVersions answered."""
    try:
        with target.connect(CANARY_TIMEOUT_S) as sock:
            sock.sendall(handshake(1, target.mechanism))
            if int(answer(sock, ApiKey.SASL_HANDSHAKE, 1).error_code):
                raise FuzzFailure("the canary's SaslHandshake was refused")
            client, first = scram_first(target, target.mechanism)
            sock.sendall(authenticate(2, first))
            server_first = answer(sock, ApiKey.SASL_AUTHENTICATE, 2)
            sock.sendall(authenticate(2, client.final(bytes(server_first.auth_bytes)), correlation=3))
            server_final = answer(sock, ApiKey.SASL_AUTHENTICATE, 2)
            if int(server_final.error_code) or not client.verify(bytes(server_final.auth_bytes)):
                raise FuzzFailure(f"the canary's SCRAM login failed: {server_final.error_message}")
            sock.sendall(frame(ApiKey.API_VERSIONS, 0, 9, b""))
            if int(answer(sock, ApiKey.API_VERSIONS, 0).error_code):
                raise FuzzFailure("the canary's ApiVersions was answered with an error")
    except (OSError, ConnectionError) as exc:
        raise FuzzFailure(f"the canary could not log in: {exc}") from None


def fuzz(target: Target, cases: int, seed: int, log: Path | None, case_timeout_s: float = CASE_TIMEOUT_S) -> list[str]:
    """Run `cases` attacks; the failures (empty: the broker held)."""
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    failures: list[str] = []
    try:
        canary(target)
        for i in range(cases):  # bounded by `cases`
            counts[run_case(rng, target, case_timeout_s)] += 1
            if (i + 1) % CANARY_EVERY == 0:
                canary(target)
        canary(target)
    except FuzzFailure as exc:
        failures.append(f"seed {seed}: {exc}")
    if log is not None:
        text = log.read_text(errors="replace")
        failures += [f"seed {seed}: {line!r} in {log}" for line in BAD_LOG_LINES if line in text]
    print(f"fuzz_sasl: seed {seed}, {sum(counts.values())} cases "
          f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}), {len(failures)} failure(s)")
    return failures


def _own_cluster(cases: int, seed: int) -> list[str]:
    """A one-node cluster with a SASL listener and a SCRAM user, always stopped."""
    import subprocess

    from localcluster.launcher import LocalCluster, free_ports

    host, user, password = "127.0.0.1", "fuzz", "fuzz-secret"
    with tempfile.TemporaryDirectory(prefix="fuzz-sasl-") as tmp:
        raft, admin, kafka, metrics, sasl = free_ports([host], 5)
        listeners = f"PLAINTEXT://{host}:{kafka},SASL_PLAINTEXT://{host}:{sasl}"
        properties = {"listeners": listeners, "advertised.listeners": listeners,
                      "inter.broker.listener.name": "PLAINTEXT",
                      "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                      "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                          f'user_{user}="{password}";',
                      "connections.max.idle.ms": "2000"}
        with LocalCluster.start(Path(tmp), controllers=1, combined=True, raft_port=raft, admin_port=admin,
                                kafka_port=kafka, metrics_port=metrics, extra_properties=properties) as cluster:
            try:
                subprocess.run([sys.executable, "-m", "tidelog", "users", "create", "--user", user, "--password",
                                password, "--bootstrap-server", f"{host}:{kafka}"], check=True, timeout=60,
                               capture_output=True)
                failures = fuzz(Target(host, sasl, user, password, "SCRAM-SHA-512"), cases, seed,
                                cluster.brokers[0].spec.log_path)
            finally:
                reports = cluster.stop()
            failures += [f"seed {seed}: {r.describe()}" for r in reports if r.outcome != "stopped"]
            return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--bootstrap", help="host:port of a SASL_PLAINTEXT listener (default: start a cluster)")
    parser.add_argument("--user", default="fuzz")
    parser.add_argument("--password", default="fuzz-secret")
    parser.add_argument("--mechanism", default="SCRAM-SHA-512", choices=sorted(MECHANISMS))
    parser.add_argument("--log", type=Path, help="the broker's log, checked for tracebacks at the end")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    if args.bootstrap is None:
        failures = _own_cluster(args.cases, seed)
    else:
        host, _, port = args.bootstrap.rpartition(":")
        failures = fuzz(Target(host, int(port), args.user, args.password, args.mechanism), args.cases, seed, args.log)
    for line in failures:
        print(line, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
