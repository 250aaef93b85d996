"""The cluster's own account, harvested from the node logs at the end of a run.

Two broker lines matter to the checkers (broker.replica_roles, broker.replica_appends):
  "Leader chaos-0 with leader epoch 5 starting at offset 120 (... elected uncleanly: RECOVERING)"
  "Truncated follower chaos-0 to offset 97 (log end offset was 120: offsets 97..119 dropped) ..."
and two controller lines, a fencing (quorum.broker_control) with its cause:
  "Fencing broker 5 (no heartbeat for 3001 ms, session timeout 3000 ms): 3 partition change(s)"
  "Fencing broker 5 (its listener 127.0.0.5:9092 closed ... the process exited): 3 partition change(s)"
and a new active controller (quorum.active_controller):
  "Became active controller with epoch 4 (BeginEpoch committed at offset 120)"
and its account of an election from outside the ISR (quorum.replication_control), a `leader-election` note:
  "Leader election from the ELR for chaos-0: broker 2 leads at leader epoch 3; the ISR [] had no live ..."
Each becomes an `election` / `truncation` / `fencing` event placed on the history's clock
through the line's wall-clock time (common.log_setup's "%(asctime)s": local time, milliseconds).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any, Final

LEADER: Final = re.compile(r"Leader (?P<topic>\S+)-(?P<partition>\d+) with leader epoch (?P<epoch>\d+) "
                           r"starting at offset (?P<offset>\d+)")
TRUNCATED: Final = re.compile(r"Truncated follower (?P<topic>\S+)-(?P<partition>\d+) (?:fully )?to (?:start at )?"
                              r"offset (?P<offset>\d+) \(log end offset was (?P<leo>\d+)")
FENCING: Final = re.compile(r"Fencing broker (?P<broker>\d+) \((?P<reason>.*)\): \d+ partition change")
SESSION_EXPIRED: Final = re.compile(r"no heartbeat for (?P<age>\d+) ms, session timeout (?P<session>\d+) ms")
PROCESS_GONE: Final = "its listener"
BECAME_ACTIVE: Final = re.compile(r"Became active controller with epoch (?P<epoch>\d+)")
# the controller's account of an election from outside the ISR (quorum.replication_control.unclean_elections)
ELECTED: Final = re.compile(r"(?P<how>Unclean leader election|Leader election from the ELR) for (?P<topic>\S+)-"
                            r"(?P<partition>\d+): broker (?P<leader>\d+) leads at leader epoch (?P<epoch>\d+)")
STAMP: Final = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


def wall_time(line: str) -> float | None:
    match = STAMP.match(line)
    if match is None:
        return None
    return time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")) + int(match.group(2)) / 1000


def parse_node_log(lines: Iterable[str], *, node_id: int, topic: str) -> list[dict[str, Any]]:
    """(wall time, event fields) of every election and truncation of `topic` in one node's log."""
    found: list[dict[str, Any]] = []
    for line in lines:
        leader = LEADER.search(line)
        truncated = None if leader else TRUNCATED.search(line)
        match = leader or truncated
        if match is None or match.group("topic") != topic:
            continue
        wall = wall_time(line)
        if wall is None:
            continue
        if leader is not None:
            found.append({"kind": "election", "wall": wall, "partition": int(leader.group("partition")),
                          "leader": node_id, "leader_epoch": int(leader.group("epoch")),
                          "start_offset": int(leader.group("offset")), "unclean": "elected uncleanly" in line})
        elif truncated is not None:
            found.append({"kind": "truncation", "wall": wall, "partition": int(truncated.group("partition")),
                          "node": node_id, "offset": int(truncated.group("offset")),
                          "log_end_offset": int(truncated.group("leo"))})
    return found


def parse_controller_log(lines: Iterable[str]) -> list[dict[str, Any]]:
    """(wall time, event fields) of every fencing decision in one controller's log, with its cause:
    `session` (with the silence and the session it exceeded), `process-gone` or `other`; and
    every `controller-epoch` this controller became active in."""
    found: list[dict[str, Any]] = []
    for line in lines:
        active = BECAME_ACTIVE.search(line)
        if active is not None and (wall := wall_time(line)) is not None:
            found.append({"kind": "controller-epoch", "wall": wall, "epoch": int(active.group("epoch"))})
            continue
        elected = ELECTED.search(line)
        if elected is not None and (wall := wall_time(line)) is not None:
            found.append({"kind": "note", "what": "leader-election", "wall": wall, "topic": elected.group("topic"),
                          "partition": int(elected.group("partition")), "leader": int(elected.group("leader")),
                          "leader_epoch": int(elected.group("epoch")),
                          "how": "elr" if elected.group("how").endswith("ELR") else "unclean",
                          "why": line[elected.end():].strip("; \n")})
            continue
        match = FENCING.search(line)
        wall = None if match is None else wall_time(line)
        if match is None or wall is None:
            continue
        event: dict[str, Any] = {"kind": "fencing", "wall": wall, "broker": int(match.group("broker")),
                                 "reason": match.group("reason"), "cause": "other"}
        expired = SESSION_EXPIRED.search(match.group("reason"))
        if expired is not None:
            event.update(cause="session", age_ms=int(expired.group("age")),
                         session_ms=int(expired.group("session")))
        elif match.group("reason").startswith(PROCESS_GONE):
            event["cause"] = "process-gone"
        found.append(event)
    return found
