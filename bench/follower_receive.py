"""CPU a follower spends receiving fetch responses: KafkaConnection.request over loopback.

Issue 35 (goal 2): under bulk acks=all load each follower's event loop receives every record
the leaders write. This bench measures that receive alone: a server process answers each
request with one response of `--response-kib` KiB (as a leader's fetch response of bulk
records), and this process sends `--requests` requests through broker.replication.
kafka_connection.KafkaConnection, decoding each answer as a view. It prints this process's CPU
(utime + stime) per GB received, and the server's, with the load average beside them.

    python bench/follower_receive.py [--requests 2000] [--response-kib 1024] [--rounds 3]

Run it on two commits to compare them (a git worktree of the older one). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import struct
import sys
import time
from multiprocessing import Process
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

from broker.replication.kafka_connection import KafkaConnection  # noqa: E402
from common.protocol.api_keys import ApiKey  # noqa: E402

HOST: Final = "127.0.0.1"
API: Final = ApiKey.API_VERSIONS  # response header v0: the body follows the correlation id


def serve(listener: socket.socket, body_bytes: int) -> None:
    """Answer every request on the first connection with a `body_bytes` body, until it closes."""
    conn, _ = listener.accept()
    body = os.urandom(body_bytes)
    with conn:
        reader = conn.makefile("rb")
        while True:  # until the client closes
            prefix = reader.read(4)
            if len(prefix) < 4:
                return
            frame = reader.read(struct.unpack(">i", prefix)[0])
            correlation_id = struct.unpack_from(">i", frame, 4)[0]
            conn.sendall(struct.pack(">ii", 4 + body_bytes, correlation_id) + body)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def receive(port: int, requests: int) -> int:
    conn = await KafkaConnection.open(HOST, port, client_id="bench", timeout_s=30)
    total = 0
    try:
        for _ in range(requests):  # bounded by --requests
            total += await conn.request(API, 0, [b""], lambda payload, _v: len(payload))
    finally:
        await conn.close()
    return total


def one_round(requests: int, body_bytes: int) -> tuple[float, float]:
    """(this process's CPU s per GB, wall s per GB) of one round against a fresh server."""
    listener = socket.create_server((HOST, 0))
    server = Process(target=serve, args=(listener, body_bytes), daemon=True)
    server.start()
    try:
        cpu0, wall0 = cpu_s(), time.monotonic()
        received = asyncio.run(receive(listener.getsockname()[1], requests))
        cpu, wall = cpu_s() - cpu0, time.monotonic() - wall0
    finally:
        server.join(timeout=30)
        if server.is_alive():
            server.kill()
        listener.close()
    gb = received / 1e9
    return cpu / gb, wall / gb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--response-kib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.requests} responses of {args.response_kib} KiB per round")
    for n in range(args.rounds):
        cpu_per_gb, wall_per_gb = one_round(args.requests, args.response_kib * 1024)
        print(f"round {n + 1}: receiver {cpu_per_gb:.3f} s CPU per GB ({wall_per_gb:.3f} s wall per GB); "
              f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
