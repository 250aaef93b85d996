"""The delay proxy: connections redirected here (iptables nat DNAT to PROXY_ADDRESS) are relayed
to their original destination (SO_ORIGINAL_DST, as Toxiproxy finds it), each direction's bytes
after the link's delay ± jitter and in order (chaos.links.delay), a FIN after close_delay_ms more.

    proxy = LinkProxy.start()                       # an asyncio loop in a thread of its own
    proxy.set_link(connection, DelayParams(200, 20), seed=1)   # before the nat rule points here
    proxy.forget_link(connection)                   # its connections closed: clients reconnect direct
    proxy.close()

The upstream leg leaves from the client's own address (so the server and every other rule see
the same peer) with SO_MARK = PROXY_MARK, which the redirect rule skips. A connection whose link
is not (or no longer) known is relayed without delay.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Final

from chaos.links.delay import DelayLine
from chaos.links.rules import PROXY_ADDRESS, PROXY_MARK, DelayParams
from chaos.nemeses.links import PacketMatch
from common.limits import PROXY_CONNECT_TIMEOUT

log = logging.getLogger(__name__)

SO_ORIGINAL_DST: Final = 80  # linux/netfilter_ipv4.h
SO_MARK: Final = getattr(socket, "SO_MARK", 36)
CHUNK_BYTES: Final = 64 * 1024
MAX_QUEUED_CHUNKS: Final = 256  # per direction; a full queue stops reading (the sender's window closes)
START_TIMEOUT_S: Final = 10.0
LinkKey = tuple[str, str, int]  # (client address, server address, server port)


@dataclass(frozen=True, slots=True)
class LinkBehaviour:
    params: DelayParams
    seed: int


def link_key(connection: PacketMatch) -> LinkKey:
    return connection.source, connection.destination, connection.port


class LinkProxy:
    def __init__(self) -> None:
        self._links: dict[LinkKey, LinkBehaviour] = {}
        self._writers: dict[LinkKey, set[asyncio.StreamWriter]] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-link-proxy", daemon=True)
        self.port = 0
        self.relayed = 0  # connections relayed so far
        self.accepted: dict[LinkKey, int] = {}  # connections relayed so far, per link

    @classmethod
    def start(cls) -> LinkProxy:
        proxy = cls()
        proxy._thread.start()
        future = asyncio.run_coroutine_threadsafe(proxy._listen(), proxy._loop)
        try:
            proxy.port = future.result(START_TIMEOUT_S)
        except BaseException:
            proxy.close()
            raise
        log.info("chaos: link proxy listening on %s:%d", PROXY_ADDRESS, proxy.port)
        return proxy

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._accepted, PROXY_ADDRESS, 0)
        return int(self._server.sockets[0].getsockname()[1])

    def set_link(self, connection: PacketMatch, params: DelayParams, *, seed: int) -> None:
        with self._lock:
            self._links[link_key(connection)] = LinkBehaviour(params, seed)

    def forget_link(self, connection: PacketMatch) -> None:
        """The link relayed without delay from now on, and its connections through here closed."""
        key = link_key(connection)
        with self._lock:
            self._links.pop(key, None)
        future = asyncio.run_coroutine_threadsafe(self._close_link(key), self._loop)
        try:
            future.result(START_TIMEOUT_S)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.warning("chaos: link proxy could not close %s's connections: %s", key, exc)

    async def _close_link(self, key: LinkKey) -> None:
        for writer in list(self._writers.pop(key, ())):
            writer.transport.abort()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.get_extra_info("socket")
        peer = writer.get_extra_info("peername")
        try:
            raw = client.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
            port, address = struct.unpack(">H", raw[2:4])[0], socket.inet_ntoa(raw[4:8])
            key = (str(peer[0]), address, int(port))
            upstream_reader, upstream_writer = await asyncio.wait_for(self._connect(key), PROXY_CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            log.info("chaos: link proxy cannot reach the original destination of %s: %s", peer, exc)
            writer.transport.abort()
            return
        with self._lock:
            behaviour = self._links.get(key, LinkBehaviour(DelayParams(0.0), 0))
        self._writers.setdefault(key, set()).update((writer, upstream_writer))
        self.relayed += 1
        self.accepted[key] = self.accepted.get(key, 0) + 1
        rng = random.Random(f"{behaviour.seed}:{key}:{self.relayed}")
        lines = (DelayLine(behaviour.params, random.Random(rng.random())),
                 DelayLine(behaviour.params, random.Random(rng.random())))
        try:
            await asyncio.gather(self._pump(reader, upstream_writer, lines[0]),
                                 self._pump(upstream_reader, writer, lines[1]))
        except asyncio.CancelledError:
            pass  # the proxy is closing: asyncio's stream callback would log a cancelled handler as an error
        finally:
            for w in (writer, upstream_writer):
                w.transport.abort()
            self._writers.get(key, set()).difference_update((writer, upstream_writer))

    async def _connect(self, key: LinkKey) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        client_address, address, port = key
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_MARK, PROXY_MARK)
            sock.bind((client_address, 0))  # the server sees the client's own address
            sock.setblocking(False)
            await self._loop.sock_connect(sock, (address, port))
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, line: DelayLine) -> None:
        """Read as bytes come (stamped with their arrival), write each at its release time."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(MAX_QUEUED_CHUNKS)

        async def read() -> None:
            try:
                while chunk := await source.read(CHUNK_BYTES):  # until end of stream
                    now_ms = self._loop.time() * 1000
                    await queue.put((line.release_at(now_ms), chunk))
            except OSError:
                pass
            await queue.put((line.close_at(self._loop.time() * 1000), b""))

        reading = asyncio.ensure_future(read())
        try:
            while True:  # until the end of stream is passed on
                release_ms, chunk = await queue.get()
                wait_s = release_ms / 1000 - self._loop.time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                if not chunk:
                    if sink.can_write_eof() and not sink.transport.is_closing():
                        sink.write_eof()
                    return
                sink.write(chunk)
                await sink.drain()
        except OSError:
            sink.transport.abort()
        finally:
            reading.cancel()

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for writers in self._writers.values():
                for writer in writers:
                    writer.transport.abort()
            self._writers.clear()
            relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in relays:  # every relay ends with the proxy, and is awaited: none left pending
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)

        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(START_TIMEOUT_S)
            except (concurrent.futures.TimeoutError, RuntimeError) as exc:
                log.warning("chaos: link proxy did not stop cleanly: %s", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT_S)
        if not self._loop.is_running():
            self._loop.close()
