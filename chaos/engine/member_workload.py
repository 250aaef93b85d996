"""Kafka 4's groups in the chaos workload: a KIP-848 consumer group and a KIP-932 share group,
each of N member processes (chaos.engine.member_client) over the workload's topic.

    members = MemberWorkload.consumers(bootstrap, "chaos", 3, count=3, history=history, log_dir=report_dir)
    members = MemberWorkload.shares(bootstrap, "chaos", 3, count=3, history=history, log_dir=report_dir,
                                    delivery_limit=3)
    members.start()               # c0, c1, c2 (s0.. for a share group) join and poll until stop()
    members.kill("c1")            # faults on a member (selector client:NAME): kill, pause, resume, restart
    ...
    members.catch_up(timeout_s=30)  # after the final heal: until the group finished every record
    members.stop()

Members are processes so that `client:NAME` can SIGKILL one (its partitions move after the
session timeout; a share member's locks run out) or SIGSTOP it past the acquisition lock (its
records are redelivered to the others). Their events come through the history
(chaos.engine.txn_workload.ClientProcess relays them); this side watches the reads go by to
know when the group has caught up, and records `member-end` when a member's process ended
(killed by a fault, stopped at the end, or exited), since a killed member cannot say so.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Final, cast

from chaos.engine.group_workload import high_watermarks
from chaos.engine.txn_workload import CLIENT_STOP_S, ClientProcess, ClientProcesses
from chaos.engine.workload import PLAINTEXT
from chaos.history import History
from common.limits import CHAOS_POLL_S

CONSUMER_GROUP_ID: Final = "chaos-cgroup"
SHARE_GROUP_ID: Final = "chaos-share"
# a value divisible by this is RELEASEd by every share member it reaches: a poison message, archived
# once its delivery count reaches group.share.delivery.count.limit
SHARE_RELEASE_EVERY: Final = 50
# a share member holds each polled batch this long before acknowledging it (its work), so that a
# pause or a kill catches it holding records; 3 members still keep up with hundreds of writes/s
SHARE_PROCESS_MS: Final = 200

Observer = Callable[[str, dict[str, Any]], None]


def _observed(lines: IO[str], observe: Observer) -> Iterator[str]:
    """The client's lines, each shown to `observe` (kind, fields) before the relay records it."""
    for line in lines:  # until the process closes its stdout (it ended)
        try:
            event = json.loads(line)
            observe(str(event.get("kind")), event)
        except (ValueError, TypeError, AttributeError, KeyError):
            pass  # a torn line of a killed member: the relay logs it
        yield line


class MemberProcess(ClientProcess):
    """A member process whose events `observe` sees too, and whose end is recorded."""

    def __init__(self, name: str, argv: list[str], history: History, log_path: Path, observe: Observer) -> None:
        super().__init__(name, argv, history, log_path, held=False)
        self.observe = observe
        self.killed = False

    def spawn(self) -> None:
        self.killed = False
        super().spawn()

    def _relay(self, stdout: IO[str]) -> None:
        incarnation = self.incarnation - 1
        # the relay only iterates its argument line by line, which the generator does
        super()._relay(cast(IO[str], _observed(stdout, self.observe)))
        self.history.record("member-end", member=self.name, incarnation=incarnation,
                            how="killed" if self.killed else "ended")


class MemberWorkload(ClientProcesses):
    """`count` member processes of one group (role consumer or share) over `topic`; faults on a
    member (pause, resume, kill, restart) are ClientProcesses'."""

    what = "group member"

    def __init__(self, role: str, bootstrap: str, topic: str, partitions: int, count: int, history: History,
                 log_dir: Path, *, group: str, extra_argv: list[str], delivery_limit: int = 0,
                 security_dir: Path | None = None, security: Mapping[str, str] = PLAINTEXT) -> None:
        self.role, self.bootstrap, self.topic, self.partitions = role, bootstrap, topic, partitions
        self.history, self.group, self.delivery_limit, self.security = history, group, delivery_limit, security
        self._lock = threading.Lock()
        self.position: dict[int, int] = {}  # consumer: the next offset the group polled, per partition
        # share: per partition, the offsets the group finished (accepted, or delivered up to the limit)
        self.finished: dict[int, set[int]] = {}
        argv = [sys.executable, "-m", "chaos.engine.member_client", role, "--bootstrap", bootstrap, "--topic", topic,
                "--group", group, *extra_argv]
        if security_dir is not None:
            argv += ["--security-dir", str(security_dir)]
        prefix = "c" if role == "consumer" else "s"
        self.members = {f"{prefix}{i}": MemberProcess(f"{prefix}{i}", [*argv, "--name", f"{prefix}{i}"], history,
                                                      log_dir / f"client-{prefix}{i}.log", self._observe)
                        for i in range(count)}
        self.clients = dict(self.members)

    @classmethod
    def consumers(cls, bootstrap: str, topic: str, partitions: int, *, count: int, history: History, log_dir: Path,
                  security_dir: Path | None = None, security: Mapping[str, str] = PLAINTEXT) -> MemberWorkload:
        return cls("consumer", bootstrap, topic, partitions, count, history, log_dir, group=CONSUMER_GROUP_ID,
                   extra_argv=[], security_dir=security_dir, security=security)

    @classmethod
    def shares(cls, bootstrap: str, topic: str, partitions: int, *, count: int, history: History, log_dir: Path,
               delivery_limit: int, security_dir: Path | None = None,
               security: Mapping[str, str] = PLAINTEXT) -> MemberWorkload:
        return cls("share", bootstrap, topic, partitions, count, history, log_dir, group=SHARE_GROUP_ID,
                   extra_argv=["--release-every", str(SHARE_RELEASE_EVERY), "--process-ms", str(SHARE_PROCESS_MS)],
                   delivery_limit=delivery_limit,
                   security_dir=security_dir, security=security)

    def _observe(self, kind: str, event: dict[str, Any]) -> None:
        with self._lock:
            if kind == "cgroup-read":
                partition = int(event["partition"])
                self.position[partition] = max(self.position.get(partition, 0), int(event["offset"]) + 1)
            elif kind == "share-read" and int(event["delivery_count"]) >= self.delivery_limit:
                self.finished.setdefault(int(event["partition"]), set()).add(int(event["offset"]))
            elif kind == "share-ack" and event["type"] == "accept" and event["ok"] is not False \
                    and not event.get("pending"):  # sent, not answered yet
                self.finished.setdefault(int(event["partition"]), set()).add(int(event["offset"]))

    def start(self) -> None:
        self.history.record("note", what=f"{self.role}-group-config", group=self.group, members=sorted(self.clients),
                            delivery_limit=self.delivery_limit,
                            release_every=SHARE_RELEASE_EVERY if self.role == "share" else 0)
        for client in self.clients.values():
            client.spawn()

    def kill(self, name: str) -> None:
        """SIGKILL (ClientProcesses.kill), its `member-end` saying so."""
        self.members[name].killed = True
        super().kill(name)

    def _done(self) -> dict[int, int]:
        """Per partition: the next offset polled (consumer), or how many records finished (share)."""
        with self._lock:
            if self.role == "consumer":
                return dict(self.position)
            return {p: len(offsets) for p, offsets in self.finished.items()}

    def catch_up(self, timeout_s: float) -> bool:
        """Wait (bounded) until the group polled (consumer) or finished (share) every record below
        each partition's high watermark; a `note` says whether it did. False on timeout."""
        deadline = time.monotonic() + timeout_s
        ends = high_watermarks(self.bootstrap, self.topic, self.partitions, self.security, deadline)
        done = self._done()
        while len(ends) == self.partitions and time.monotonic() < deadline:  # bounded by the deadline
            done = self._done()
            if all(done.get(p, 0) >= end for p, end in ends.items()):
                break
            time.sleep(CHAOS_POLL_S)
        caught_up = len(ends) == self.partitions and all(done.get(p, 0) >= end for p, end in ends.items())
        self.history.record("note", what=f"{self.role}-group-catch-up", ok=caught_up,
                            ends={str(p): e for p, e in sorted(ends.items())},
                            done={str(p): n for p, n in sorted(done.items())})
        return caught_up

    def stop(self) -> None:
        """Every member resumed and asked to stop (SIGTERM: it closes its consumer); killed if it does not."""
        for client in self.clients.values():
            if client.paused:
                self.resume(client.name)
            client.signal(signal.SIGTERM)
        deadline = time.monotonic() + CLIENT_STOP_S  # one wait for all: a stuck member costs it once
        for client in self.clients.values():
            client.wait(max(0.0, deadline - time.monotonic()))
