"""broker/frame_receiver.py: frames read in place from a real loopback socket, large ones into
buffers of the thread's pool, lent again only once nothing refers to them."""

from __future__ import annotations

import asyncio
import struct

from broker.frame_receiver import Frame, FrameReceiver, thread_frame_buffers
from common.protocol.frame import FrameDecoder

HOST = "127.0.0.1"
LARGE = 300 * 1024  # above the receive buffer: a frame of its own, received in place
ROUNDS = 5


class Counter:
    bytes_in = 0


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def test_large_frames_reuse_the_threads_buffers_and_keep_the_ones_still_held() -> None:
    loop = asyncio.get_running_loop()
    receivers: list[FrameReceiver] = []

    def accept() -> FrameReceiver:
        receivers.append(FrameReceiver(FrameDecoder(2 * LARGE), Counter()))
        return receivers[-1]

    server = await loop.create_server(accept, HOST, 0)
    try:
        _, writer = await asyncio.open_connection(HOST, server.sockets[0].getsockname()[1])
        writer.write(sized(b"K" * LARGE))  # kept: its bytes must not change under it
        await writer.drain()
        while not receivers:  # until accepted
            await asyncio.sleep(0)
        receiver = receivers[0]
        [kept] = await receiver.receive()
        pooled = thread_frame_buffers().pooled_bytes
        for i in range(ROUNDS):  # each frame dropped before the next one is sent
            body = bytes([i]) * (LARGE - i)
            writer.write(sized(body))
            await writer.drain()
            got: list[Frame] = []
            while not got:  # one frame per round
                got = await receiver.receive()
            assert [bytes(f) for f in got] == [body]
            del got
        writer.close()
        assert await receiver.receive() == []
    finally:
        server.close()
    assert receiver.decoder.buffers is thread_frame_buffers()
    assert bytes(kept) == b"K" * LARGE
    assert thread_frame_buffers().pooled_bytes - pooled <= 512 * 1024  # one buffer for every round
