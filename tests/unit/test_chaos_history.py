"""The history file, the node-log harvest and the disk edits."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from chaos.engine.harvest import parse_node_log, wall_time
from chaos.history import History, load
from chaos.nemeses import disk


def test_events_share_one_clock_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    ticks = iter([100.0, 100.5, 101.25])
    out = io.StringIO()
    history = History(out, clock=lambda: next(ticks), wall=lambda: 5000.0)
    history.record("ok", value="1", partition=0, offset=0)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"t": 0.5, "kind": "header", "wall_start": 5000.0, "version": 1},
        {"t": 1.25, "kind": "ok", "value": "1", "partition": 0, "offset": 0}]
    assert history.at_wall(5002.5) == 2.5
    path = tmp_path / "h.jsonl"
    path.write_text(out.getvalue() + '{"t": 3, "kin')
    assert [e["kind"] for e in load(path)] == ["header", "ok"]
    with pytest.raises(ValueError, match="unknown history event kind"):
        history.record("oops")


LOG = """\
2026-11-23 21:36:07,250 INFO [broker-6] broker.replica_roles: Leader chaos-0 with leader epoch 2 starting at offset 748 (high watermark 748, ISR [6], partition epoch 9, elected uncleanly: RECOVERING)
2026-11-23 21:36:07,300 INFO [broker-6] broker.replica_roles: Leader other-0 with leader epoch 2 starting at offset 1 (high watermark 1, ISR [6], partition epoch 9)
2026-11-23 21:36:19,001 WARNING [broker-5] broker.replica_manager: Truncated follower chaos-0 to offset 748 (log end offset was 2056: offsets 748..2055 dropped) after ...
"""


def test_elections_and_truncations_are_harvested_from_node_logs() -> None:
    found = parse_node_log(LOG.splitlines(), node_id=6, topic="chaos")
    assert [{k: v for k, v in f.items() if k != "wall"} for f in found] == [
        {"kind": "election", "partition": 0, "leader": 6, "leader_epoch": 2, "start_offset": 748, "unclean": True},
        {"kind": "truncation", "partition": 0, "node": 6, "offset": 748, "log_end_offset": 2056}]
    assert found[1]["wall"] - found[0]["wall"] == pytest.approx(11.751)
    assert wall_time("no stamp here") is None


@pytest.mark.parametrize("fault", list(disk.DiskFault))
def test_disk_faults_edit_the_active_segment_deterministically(tmp_path: Path, fault: disk.DiskFault) -> None:
    copies = []
    for name in ("a", "b"):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "00000000000000000000.log").write_bytes(b"old" * 100)
        (directory / "00000000000000000300.log").write_bytes(bytes(range(256)) * 4)
        (directory / "00000000000000000300.index").write_bytes(bytes(64))
        edit = disk.apply(directory, fault, seed=11)
        assert edit is not None and "300" in edit.path.name
        copies.append((edit.description, edit.path.read_bytes()))
        assert (directory / "00000000000000000000.log").read_bytes() == b"old" * 100
    assert copies[0] == copies[1]


def test_no_segment_no_edit(tmp_path: Path) -> None:
    assert disk.apply(tmp_path, disk.DiskFault.GARBAGE, seed=1) is None
