"""TopicPartition: a topic name and partition number, and its directory name `topic-N`."""

from __future__ import annotations

from dataclasses import dataclass

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        return str(self)

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse `topic-N` (topics may contain '-'); ValueError when it is not one."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic or not partition.isdigit():
            raise ValueError(f"{name!r} is not a topic-partition directory name")
        return cls(topic, int(partition))
