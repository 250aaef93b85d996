"""Evidence that a broker's process is gone, long before its session could expire.

    watch = ListenerWatch(on_gone)                 # on_gone(broker_id, broker_epoch, evidence)
    watch.sync(image)                              # watch every unfenced broker's listener; None: stop all
    await watch.close()

Kafka fences a broker only when its session expires (9 s by default), so a SIGKILLed leader
costs its partitions that long although the dead process's sockets were closed by its kernel at
once. The active controller holds one idle TCP connection to each unfenced broker's Kafka
listener and sends nothing on it. When that connection ends (FIN or RST) it connects again: a
refusal now means nothing listens on that address any more, and only then is `on_gone` called.

Why this never fences a broker that is alive (the safety argument):
- A paused process (SIGSTOP, a stopped VM, a long GC) keeps its sockets: its kernel neither
  closes the established connection nor refuses a new one (the listen backlog accepts it).
- A network cut (a dropped packet, a partition) delivers nothing: no FIN or RST arrives, so the
  connection does not end, and a connect attempt times out instead of being refused. A firewall
  that answers with RST (iptables REJECT --reject-with tcp-reset) answers only packets it sees,
  and this connection carries none (no data, no TCP keepalive), so it cannot end it either.
- A live broker that closes the connection itself (it never does today; an idle reaper would)
  still accepts the second connection, which becomes the new watch.
Both halves are needed: a closed connection alone could be a broker's own choice, a refused
connect alone could be a listener not yet open or a REJECT rule. Together they mean the
listening socket is closed while the process's other sockets were closed by its kernel: the
process exited (or is restarting, when fencing the old incarnation is right anyway). The
fencing decision itself is the ordinary one (ISRs shrink, leaders move, the broker re-registers
and catches up to be unfenced), so a wrong verdict would cost availability, never data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from common.limits import CONNECT_TIMEOUT
from common.units import SECONDS
from metadata.image import MetadataImage

logger = logging.getLogger(__name__)

RETRY_DELAY: Final = 1 * SECONDS  # before connecting again to a listener that did not answer
LISTENER_NAME: Final = "PLAINTEXT"

# (broker_id, broker_epoch, evidence) -> whether the verdict was acted on; False (the fencing
# decision failed: a busy or changing quorum) keeps the evidence and asks again after a retry delay.
OnGone = Callable[[int, int, str], Awaitable[bool]]
Target = tuple[int, str, int]  # (broker epoch, host, port)
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class ListenerWatch:
    """One watching task per unfenced broker incarnation; see the module doc."""

    def __init__(self, on_gone: OnGone, *, local_host: str | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT, retry_delay: float = RETRY_DELAY) -> None:
        self._on_gone, self._connect_timeout, self._retry_delay = on_gone, connect_timeout, retry_delay
        # from the controller's own 127.0.0.N, like its other connections (chaos cuts links by address)
        self._local_addr = None if local_host is None else (local_host, 0)
        self._tasks: dict[int, tuple[Target, asyncio.Task[None]]] = {}

    @property
    def watched(self) -> dict[int, Target]:
        return {broker_id: target for broker_id, (target, _) in self._tasks.items()}

    def sync(self, image: MetadataImage | None) -> None:
        """Watch exactly the unfenced brokers of `image` (None: this controller is not active)."""
        wanted: dict[int, Target] = {}
        for registration in image.cluster.brokers.values() if image is not None else ():
            listener = next((l for l in registration.listeners if l.name == LISTENER_NAME), None)
            if not registration.fenced and listener is not None:
                wanted[registration.broker_id] = (registration.broker_epoch, listener.host, listener.port)
        for broker_id, (target, task) in list(self._tasks.items()):
            if wanted.get(broker_id) != target or task.done():
                task.cancel()
                del self._tasks[broker_id]
        for broker_id, target in wanted.items():
            if broker_id not in self._tasks:
                task = asyncio.create_task(self._watch(broker_id, target), name=f"listener-watch-{broker_id}")
                self._tasks[broker_id] = (target, task)

    async def close(self) -> None:
        tasks = [task for _, task in self._tasks.values()]
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connect(self, host: str, port: int) -> Connection | None:
        """A connection, or None when the attempt timed out or failed otherwise than by refusal.
        ConnectionRefusedError propagates: it is half of the evidence."""
        try:
            async with asyncio.timeout(self._connect_timeout):
                return await asyncio.open_connection(host, port, local_addr=self._local_addr)
        except ConnectionRefusedError:
            raise
        except TimeoutError:
            logger.debug("Listener %s:%d: no answer to a connect within %.1f s", host, port, self._connect_timeout)
            return None
        except OSError as exc:
            logger.debug("Listener %s:%d: connect failed: %s", host, port, exc)
            return None

    async def _watch(self, broker_id: int, target: Target) -> None:
        epoch, host, port = target
        held = False  # the evidence needs a connection we held to end, not just a refusal
        while True:  # until cancelled by sync/close, or the process is found gone
            try:
                connection = await self._connect(host, port)
            except ConnectionRefusedError:
                if held:
                    evidence = (f"its listener {host}:{port} closed the controller's connection and now "
                                "refuses new ones: the process exited")
                    if await self._on_gone(broker_id, epoch, evidence):
                        return
                    # Not fenced yet: the evidence stands while the listener keeps refusing, so
                    # the session timeout is not left to do what the evidence already shows.
                    await asyncio.sleep(self._retry_delay)
                    continue
                connection = None
            if connection is None:
                if held:  # neither accepted nor refused: not the evidence, so start again from a held one
                    logger.info("Broker %d (broker epoch %d): after its listener %s:%d ended the controller's "
                                "connection, a new one was neither accepted nor refused; watching on",
                                broker_id, epoch, host, port)
                held = False
                await asyncio.sleep(self._retry_delay)
                continue
            if not held:
                logger.info("Watching broker %d (broker epoch %d): holding a connection to its listener %s:%d",
                            broker_id, epoch, host, port)
            held = True
            await _until_closed(*connection)
            # the first half of the evidence; the connect just below gives the second (or not)
            logger.info("Broker %d (broker epoch %d): its listener %s:%d ended the controller's connection; "
                        "connecting again", broker_id, epoch, host, port)


async def _until_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Wait, sending nothing, until the peer ends the connection; then close our side."""
    try:
        while await reader.read(65536):  # a broker never speaks first; ignore whatever arrives
            pass
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
