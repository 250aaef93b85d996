"""Three real pysyncobj voters (quorum.metadata_log.MetadataLog, in this process, real TCP on
127.0.0.1-3) with fsync on: every message a voter sends is checked against what its journal
had made durable when it left (issue 28).

- a follower's AppendEntries answer ("next_node_idx", success) for index n leaves only after
  an fsync that covered entry n - 1;
- a leader's AppendEntries carries a commit index its own journal had fsynced;
- a vote ("response_vote") or a vote request leaves after its term and vote were fsynced.
The recorder wraps DurableJournal.sync/setCurrentTerm and the transport's real send; the
voters elect, commit, lose their leader (closed) and elect again.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.transport import TCPTransport

from common.config_schema import Password
from common.waiting import wait_until
from localcluster.launcher import free_ports
from metadata.records import encode_records, record_from_map
from quorum.durable_journal import DurableJournal
from quorum.log_state import AppendOutcome
from quorum.metadata_log import MetadataLog
from quorum.quorum_settings import QuorumSettings
from quorum.voters import parse_voters

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
WAIT_S = 20.0
APPENDS = 30
NOOP = encode_records([record_from_map({"type": 20, "version": 0})])


class Recorder:
    """Per journal: the last raft index fsynced, the last term/vote made durable; violations."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.synced_through: dict[int, int] = {}
        self.durable_terms: dict[int, tuple[int, Any]] = {}
        self.checked: dict[str, int] = {}
        self.violations: list[str] = []

    def check(self, journal: DurableJournal, message: Any) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        key = id(journal)
        with self.lock:
            synced = self.synced_through.get(key, 0)
            if kind == "next_node_idx" and message["success"]:
                if message["next_node_idx"] - 1 > synced:
                    self.violations.append(f"ack of {message['next_node_idx'] - 1}, fsynced {synced}")
            elif kind == "append_entries":
                if message["commit_index"] > synced:
                    self.violations.append(f"commit index {message['commit_index']}, fsynced {synced}")
            elif kind in ("response_vote", "request_vote"):
                term = self.durable_terms.get(key, (0, None))[0]
                if term < message["term"]:
                    self.violations.append(f"{kind} of term {message['term']}, durable term {term}")
            else:
                return
            self.checked[kind] = self.checked.get(kind, 0) + 1


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    real_sync, real_term, real_send = DurableJournal.sync, DurableJournal.setCurrentTerm, TCPTransport.send

    def sync(self: DurableJournal) -> None:
        real_sync(self)
        with rec.lock:  # only after the fsync returned
            rec.synced_through[id(self)] = self[-1][1] if len(self) else 0

    def set_current_term(self: DurableJournal, term: int, voted_for: Any) -> None:
        real_term(self, term, voted_for)
        with rec.lock:
            rec.durable_terms[id(self)] = (term, voted_for)

    def send(self: TCPTransport, node: Any, message: Any) -> Any:
        rec.check(self._syncObj._journal, message)
        return real_send(self, node, message)

    monkeypatch.setattr(DurableJournal, "sync", sync)
    monkeypatch.setattr(DurableJournal, "setCurrentTerm", set_current_term)
    monkeypatch.setattr(TCPTransport, "send", send)
    return rec


def three_voters(**options: Any) -> Iterator[list[MetadataLog]]:
    """Three voters on HOSTS, each with QuorumSettings `options`; closed when the generator ends."""
    ports = free_ports(HOSTS, len(HOSTS))
    spec = parse_voters(tuple(f"{i}@{h}:{p}" for i, (h, p) in enumerate(zip(HOSTS, ports), start=1)))
    logs: list[MetadataLog] = []
    with tempfile.TemporaryDirectory() as root:
        try:
            for node_id in spec:
                logs.append(MetadataLog(QuorumSettings(node_id, spec, Path(root) / str(node_id),
                                                       Password("ordering-test"), **options)))
            yield logs
        finally:
            for log in logs:
                log.close()


@pytest.fixture
def voters(recorder: Recorder) -> Iterator[list[MetadataLog]]:
    yield from three_voters()


def leader_of(logs: list[MetadataLog]) -> MetadataLog | None:
    leaders = [log for log in logs if log.leadership()[0]]
    return leaders[0] if len(leaders) == 1 else None


def append_some(leader: MetadataLog) -> None:
    done = threading.Semaphore(0)
    outcomes: list[AppendOutcome] = []

    def on_done(outcome: AppendOutcome) -> None:
        outcomes.append(outcome)
        done.release()

    for _ in range(APPENDS):
        leader.submit(NOOP, -1, on_done)  # epoch -1: fenced when applied; replicated all the same
    for _ in range(APPENDS):
        assert done.acquire(timeout=WAIT_S), "an append got no outcome"


def test_no_message_reports_what_is_not_yet_durable(voters: list[MetadataLog], recorder: Recorder) -> None:
    leader = wait_until("a leader", lambda: leader_of(voters), WAIT_S)
    append_some(leader)
    leader.close()
    rest = [log for log in voters if log is not leader]
    second = wait_until("a new leader", lambda: leader_of(rest), WAIT_S)
    append_some(second)
    assert recorder.violations == []
    assert recorder.checked.get("next_node_idx", 0) > 0 and recorder.checked.get("response_vote", 0) > 0
    durable, batches, entries = second.durability()
    assert durable and 0 < batches <= entries
