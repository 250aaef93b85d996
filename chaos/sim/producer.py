"""A client producing acks=all, one record at a time, and the writes it saw acknowledged.

It finds the leader as a client does, from some broker's metadata (here: the image of a
running broker, which may be stale), and retries nothing: every value is produced once, so
an acknowledged (partition, offset) names exactly one value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random

from collections.abc import Callable

from chaos.sim import messages as m
from chaos.sim.network import Network
from common.errors import ErrorCode
from metadata.image import MetadataImage


class SimProducer:
    def __init__(self, name: str, network: Network, rng: Random,
                 views: Callable[[], list[MetadataImage]]) -> None:
        self.name = name
        self._network = network
        self._rng = rng
        self._views = views
        self._next_value = 0
        self.in_flight: dict[int, tuple[m.PartitionKey, int]] = {}
        self.acked: dict[tuple[m.PartitionKey, int], int] = {}  # (partition, offset) -> value
        self.acked_twice: list[tuple[m.PartitionKey, str]] = []  # one offset acknowledged for two values
        self.errors: dict[ErrorCode, int] = {}

    def produce(self) -> None:
        views = self._views()
        if not views:
            return
        image = self._rng.choice(views)
        partitions = sorted((t.topic_id, p) for t in image.topics.by_id.values() for p in t.partitions)
        if not partitions:
            return
        key = self._rng.choice(partitions)
        leader = image.partition(*key).leader  # type: ignore[union-attr]
        if leader < 0:
            return
        self._next_value += 1
        self.in_flight[self._next_value] = (key, self._next_value)
        self._network.send(self.name, f"b{leader}", m.ProduceRequest(key, self._next_value, self._next_value))

    def handle(self, src: str, message: object, now_ms: int) -> None:
        if not isinstance(message, m.ProduceResponse):
            raise TypeError(f"producer got {message!r}")
        sent = self.in_flight.pop(message.request_id, None)
        if sent is None:
            return  # a duplicated answer
        key, value = sent
        self.errors[message.error] = self.errors.get(message.error, 0) + 1
        if message.error is ErrorCode.NONE:
            earlier = self.acked.get((key, message.offset))
            if earlier is not None and earlier != value:
                self.acked_twice.append((key, f"offset {message.offset} of {key[0]}-{key[1]} acknowledged for "
                                              f"value {earlier} and again for value {value}"))
            self.acked[(key, message.offset)] = value
