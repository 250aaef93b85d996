"""quorum.durable_journal and quorum.durability_gate: what is fsynced, and in which order
against the messages that report it (issue 28). A recorder stands in for os.fsync and names
the file each fsync was for."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.journal import FileJournal

from quorum.durability_gate import DurabilityGate
from quorum.durable_journal import DurableJournal, parse_records

ENTRIES = [(b"\x00noop", 1, 0), (b"\x01first", 2, 1), (b"\x01second", 3, 1), (b"\x01third", 4, 2)]


class Recorder:
    """os.fsync replacement that records which file (or directory) each fsync was for."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def fsync(self, fd: int) -> None:
        self.events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        os.fsync(fd)

    def note(self, what: str, detail: str = "") -> None:
        self.events.append((what, detail))

    def fsyncs(self) -> list[str]:
        return [name for kind, name in self.events if kind == "fsync"]


def journal(tmp_path: Path, recorder: Recorder | None = None, *, durable: bool = True) -> DurableJournal:
    fsync: Callable[[int], None] = recorder.fsync if recorder else os.fsync
    return DurableJournal(tmp_path / "quorum.journal", dump_path=tmp_path / "quorum.dump",
                          durable=durable, fsync=fsync)


def test_entries_survive_a_reopen(tmp_path: Path) -> None:
    j = journal(tmp_path)
    for entry in ENTRIES:
        j.add(*entry)
    j.sync()
    j._destroy()
    assert list(journal(tmp_path)) == ENTRIES


@pytest.mark.parametrize("writer", ["pysyncobj", "ours"])
def test_the_file_format_is_pysyncobjs(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "quorum.journal"
    if writer == "pysyncobj":
        old = FileJournal(str(path))
        for entry in ENTRIES:
            old.add(*entry)
        old._destroy()
        assert [tuple(e) for e in journal(tmp_path)] == ENTRIES
    else:
        j = journal(tmp_path)
        for entry in ENTRIES:
            j.add(*entry)
        j._destroy()
        old = FileJournal(str(path))
        assert [(bytes(c), i, t) for c, i, t in (old[k] for k in range(len(old)))] == ENTRIES
        old._destroy()


@pytest.mark.parametrize("cut", [1, 5, 17])
def test_a_torn_tail_is_cut_at_the_last_whole_entry(tmp_path: Path, cut: int) -> None:
    j = journal(tmp_path)
    for entry in ENTRIES:
        j.add(*entry)
    j._destroy()
    path = tmp_path / "quorum.journal"
    data = path.read_bytes()
    path.write_bytes(data[:-cut])  # the header still claims the whole last entry
    reopened = journal(tmp_path)
    assert list(reopened) == ENTRIES[:-1]
    assert path.stat().st_size == reopened._ends[-1]  # the torn bytes are gone from the file


def test_an_entry_out_of_sequence_ends_the_log(tmp_path: Path) -> None:
    j = journal(tmp_path)
    for entry in [ENTRIES[0], ENTRIES[1], (b"\x01stale", 3, 0), ENTRIES[3]]:  # term goes back
        j.add(*entry)
    j._destroy()
    assert list(journal(tmp_path)) == ENTRIES[:2]


def test_a_truncation_leaves_no_stale_record_behind(tmp_path: Path) -> None:
    rec = Recorder()
    j = journal(tmp_path, rec)
    for entry in ENTRIES:
        j.add(*entry)
    j.sync()
    rec.events.clear()
    j.deleteEntriesFrom(2)
    assert rec.fsyncs() == ["quorum.journal"]  # durable at once, before any later append
    assert not j.dirty
    path = tmp_path / "quorum.journal"
    assert path.stat().st_size == j._ends[-1]
    entries, _ = parse_records(path.read_bytes())
    assert entries == ENTRIES[:2]


def test_one_fsync_per_batch_of_appends(tmp_path: Path) -> None:
    rec = Recorder()
    j = journal(tmp_path, rec)
    rec.events.clear()
    for entry in ENTRIES:
        j.add(*entry)
    assert j.dirty and rec.fsyncs() == []
    j.sync()
    j.sync()  # nothing new: no second fsync
    assert rec.fsyncs() == ["quorum.journal"]
    assert (j.syncs, j.synced_entries) == (1, len(ENTRIES))


def test_the_vote_is_durable_before_set_current_term_returns(tmp_path: Path) -> None:
    rec = Recorder()
    j = journal(tmp_path, rec)
    rec.events.clear()
    j.setCurrentTerm(7, "127.0.0.2:9093")
    # temp file fsynced, renamed, directory fsynced: all before pysyncobj sends the vote
    assert rec.fsyncs() == ["quorum.journal.meta.tmp", tmp_path.name]
    again = journal(tmp_path)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, "127.0.0.2:9093")


def test_compaction_makes_the_dump_durable_before_dropping_entries(tmp_path: Path) -> None:
    rec = Recorder()
    j = journal(tmp_path, rec)
    for entry in ENTRIES:
        j.add(*entry)
    (tmp_path / "quorum.dump").write_bytes(b"dump")  # pysyncobj renamed the dump in
    rec.events.clear()
    j.deleteEntriesTo(2)
    assert rec.fsyncs() == ["quorum.dump", tmp_path.name, "quorum.journal.tmp", tmp_path.name]
    assert list(j) == ENTRIES[2:] and not j.dirty
    j.add(b"\x01fifth", 5, 2)
    j._destroy()
    assert list(journal(tmp_path)) == ENTRIES[2:] + [(b"\x01fifth", 5, 2)]


def test_fsync_off_writes_the_same_files_and_never_fsyncs(tmp_path: Path) -> None:
    rec = Recorder()
    j = journal(tmp_path, rec, durable=False)
    for entry in ENTRIES:
        j.add(*entry)
    j.setCurrentTerm(3, None)
    j.deleteEntriesFrom(3)
    assert not j.dirty and rec.fsyncs() == []
    j._destroy()
    assert list(journal(tmp_path)) == ENTRIES[:3]


# -- the gate: acknowledgements wait for the fsync ---------------------------------------

def gated(tmp_path: Path, *, durable: bool = True) -> tuple[DurableJournal, DurabilityGate, Recorder]:
    rec = Recorder()
    j = journal(tmp_path, rec, durable=durable)
    gate = DurabilityGate(j)

    def send(node: Any, message: Any) -> None:
        rec.note("send", f"{node}:{message['type']}")

    gate.attach(send)
    rec.events.clear()
    return j, gate, rec


def test_an_ack_is_sent_only_after_the_fsync_of_its_entries(tmp_path: Path) -> None:
    j, gate, rec = gated(tmp_path)
    for entry in ENTRIES:  # one AppendEntries of four entries, as a follower's poll handles it
        j.add(*entry)
    assert gate.hold("leader", {"type": "next_node_idx"})  # held: the entries are not durable
    assert rec.events == []
    gate.flush()
    assert rec.events == [("fsync", "quorum.journal"), ("send", "leader:next_node_idx")]


def test_messages_keep_their_order_and_pass_when_nothing_is_pending(tmp_path: Path) -> None:
    j, gate, rec = gated(tmp_path)
    assert not gate.hold("n2", {"type": "append_entries"})  # clean journal: straight out
    j.add(*ENTRIES[0])
    assert gate.hold("n2", {"type": "append_entries"})
    j.sync()  # durable now, but one message still waits: the next must queue behind it
    assert gate.hold("n3", {"type": "append_entries"})
    gate.flush()
    assert [e for e in rec.events if e[0] == "send"] == [("send", "n2:append_entries"),
                                                         ("send", "n3:append_entries")]


def test_without_fsync_nothing_is_held(tmp_path: Path) -> None:
    j, gate, rec = gated(tmp_path, durable=False)
    j.add(*ENTRIES[0])
    assert not gate.hold("leader", {"type": "next_node_idx"})
    gate.flush()
    assert rec.fsyncs() == []
