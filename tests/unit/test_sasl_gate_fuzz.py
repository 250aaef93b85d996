"""h11's fuzz invariant for a SASL connection's gate (broker.listener_security.SaslGate, over
security.sasl_server and security.scram): any sequence of frames, random or mutated from a real
PLAIN or SCRAM exchange, either goes through (Serve / Answer) or raises ProtocolError or
AuthenticationFailed, which close that one connection; never IndexError, UnicodeDecodeError,
struct.error, ... The same attacks run against a real broker in bench/fuzz_sasl.py."""

from __future__ import annotations

import functools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.listener_security import Answer, AuthenticationFailed, ListenerSecurity, Serve
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import ProtocolError
from security.sasl_server import SaslSettings
from security.scram import SCRAM_SHA_512, ScramClient, ScramCredential, ScramMechanism
from tests.unit.test_sasl_listener import sasl_request

NONCE = "fyko+d2lbbFgONRv9qkxdawL"  # RFC 5802's example client nonce
ALICE = ScramCredential.from_password(SCRAM_SHA_512, "alice-secret", salt=b"s" * 32, iterations=4096)


def scram(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
    return ALICE if user == "alice" else None


SECURITY = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT",
                            SaslSettings(("PLAIN", "SCRAM-SHA-512"), {"bob": "bob-secret"}, scram))


def _unframed(data: bytes) -> bytes:
    return data[4:]  # the gate sees frames without their size prefix (FrameDecoder strips it)


@functools.cache  # the client's final runs PBKDF2: once per version
def real_frames(version: int) -> list[bytes]:
    """A real SCRAM exchange's frames (handshake, client-first, client-final) and a PLAIN token."""
    client = ScramClient(SCRAM_SHA_512, "alice", "alice-secret", NONCE)
    first = client.first()
    server_first = f"r={NONCE}3rfcNHYJY1ZVvWVs7j,s={'c' * 44},i=4096".encode()
    try:
        final = client.final(server_first)
    except Exception:  # noqa: BLE001 - a made-up server-first the client refuses: a plausible final
        final = b"c=biws,r=" + NONCE.encode() + b",p=" + b"A" * 88
    return [_unframed(sasl_request(ApiKey.SASL_HANDSHAKE, version, 1, mechanism="SCRAM-SHA-512")),
            _unframed(sasl_request(ApiKey.SASL_AUTHENTICATE, 2, 2, auth_bytes=first)),
            _unframed(sasl_request(ApiKey.SASL_AUTHENTICATE, 2, 3, auth_bytes=final)),
            _unframed(sasl_request(ApiKey.SASL_HANDSHAKE, 1, 4, mechanism="PLAIN")),
            _unframed(sasl_request(ApiKey.SASL_AUTHENTICATE, 1, 5, auth_bytes=b"\0bob\0bob-secret")),
            first, final]


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(4)
        if not b or kind == 0:
            b[len(b):] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        elif kind == 1:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif kind == 2:
            del b[rng.randrange(len(b)):]
        else:
            i = rng.randrange(len(b))
            b[i:i] = b[i:i + rng.randrange(1, 16)]
    return bytes(b)


def feed(frames: list[bytes]) -> None:
    gate = SECURITY.gate()
    assert gate is not None
    for i, frame in enumerate(frames):
        try:
            verdict = gate.frame(frame, now_ms=1_000 + i)
        except (ProtocolError, AuthenticationFailed):
            return  # the connection closes: the invariant holds
        assert isinstance(verdict, (Serve, Answer))
        if isinstance(verdict, Answer) and verdict.close is not None:
            return


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([0, 1]), st.integers(1, 6))
def test_mutated_real_exchanges(seed: int, version: int, length: int) -> None:
    rng = random.Random(seed)
    frames = list(real_frames(version))
    sequence = [rng.choice(frames) for _ in range(length)]
    sequence[rng.randrange(length)] = mutate(rng, sequence[rng.randrange(length)])
    feed(sequence)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_random_frames(frames: list[bytes]) -> None:
    feed(frames)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.binary(max_size=200))
def test_a_valid_handshake_then_anything(seed: int, token: bytes) -> None:
    for version in (0, 1):
        feed([real_frames(version)[0], token])  # v0: a raw token; v1: a frame
