"""h11's fuzz invariant for common/protocol/: random bytes and mutated real frames either
parse or raise ProtocolError — never IndexError, struct.error, UnicodeDecodeError, ..."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from broker.request_handler import IMPLEMENTED_VERSIONS, ROWS, decode_request
from common.protocol.frame import (
    FrameDecoder,
    RequestHeader,
    encode_request_header,
    parse_request_header,
)
from common.protocol.primitives import ProtocolError
from tests.unit.test_protocol_codecs import ALL, REQUESTS, RESPONSES, Row

MAX_REQUEST_BYTES = 4096

API_VERSIONS = sorted((int(k), v) for k, (lo, hi) in IMPLEMENTED_VERSIONS.items()
                      for v in range(lo, hi + 1))

REAL_FRAMES = [
    encode_request_header(RequestHeader(r.api_key, r.version, 7, "fuzz")) + r.data
    for r in REQUESTS
]


def handle_stream(stream: bytes, chunk: int) -> None:
    """What a server does with bytes: frame, parse header, decode body."""
    decoder = FrameDecoder(MAX_REQUEST_BYTES)
    for i in range(0, len(stream), chunk):
        for frame in decoder.feed(stream[i:i + chunk]):
            header, body = parse_request_header(frame)
            decode_request(header, body)


def must_parse_or_raise_protocol_error(stream: bytes, chunk: int = 7) -> None:
    try:
        handle_stream(stream, chunk)
    except ProtocolError:
        pass


@given(st.binary(max_size=256), st.integers(1, 64))
def test_random_streams(stream: bytes, chunk: int) -> None:
    must_parse_or_raise_protocol_error(stream, chunk)


@given(st.sampled_from(API_VERSIONS), st.binary(max_size=256))
def test_random_bodies_for_every_api_and_version(api: tuple[int, int], body: bytes) -> None:
    decoder = ROWS[api[0]].codec.decode  # type: ignore[index]
    try:
        decoder(memoryview(body), api[1])
    except ProtocolError:
        pass


@given(st.sampled_from(RESPONSES), st.binary(max_size=128))
def test_random_bodies_for_response_decoders(row: Row, body: bytes) -> None:
    try:
        row.decode(memoryview(body), row.version)
    except ProtocolError:
        pass


mutation = st.tuples(st.sampled_from(["flip", "cut", "insert", "set"]), st.integers(0, 10_000),
                     st.integers(0, 255))


def mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, where, value in mutations:
        i = where % (len(buf) + 1)
        if kind == "flip" and i < len(buf):
            buf[i] ^= 1 << (value % 8)
        elif kind == "cut":
            del buf[i:]
        elif kind == "insert":
            buf[i:i] = bytes([value])
        elif kind == "set" and i < len(buf):
            buf[i] = value
    return bytes(buf)


@given(st.sampled_from(REAL_FRAMES), st.lists(mutation, min_size=1, max_size=6),
       st.integers(1, 16))
def test_mutated_real_frames(payload: bytes, mutations: list[tuple[str, int, int]],
                             chunk: int) -> None:
    # Mutate the payload and keep its size prefix honest, or mutate the whole framed stream.
    body = mutate(payload, mutations)
    must_parse_or_raise_protocol_error(struct.pack(">i", len(body)) + body, chunk)
    framed = struct.pack(">i", len(payload)) + payload
    must_parse_or_raise_protocol_error(mutate(framed, mutations), chunk)


@given(st.sampled_from(ALL), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_bodies_for_their_own_decoder(row: Row,
                                              mutations: list[tuple[str, int, int]]) -> None:
    try:
        row.decode(memoryview(mutate(row.data, mutations)), row.version)
    except ProtocolError:
        pass
