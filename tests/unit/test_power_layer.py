"""chaos.power's FUSE layer on a real mount: what a pulled plug keeps and what it drops.

Each row writes through the mount, pulls the plug (the daemon rolls back and the layer mounts
again) and reads what survived. Skipped only where FUSE cannot run (no mfusepy, no libfuse 3 /
fusermount3, no /dev/fuse); `make test` installs both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chaos.power import fuse_missing
from quorum.durable_journal import write_durably

MISSING = fuse_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[tuple[Path, object]]:
    from chaos.power.mount import PowerMount

    data = tmp_path / "data"
    data.mkdir()
    (data / "durable").write_bytes(b"A" * 5000)  # there before the mount: durable
    (data / "sub").mkdir()
    mount = PowerMount.create(data, tmp_path / "state")
    try:
        yield data, mount
    finally:
        mount.unmount()
        assert not os.path.ismount(data), "the test left its mount behind"


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: Path, data: bytes, *, offset: int | None = None, sync: bool = False) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, os.fstat(fd).st_size if offset is None else offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


Case = tuple[str, Callable[[Path], None], dict[str, bytes]]
CASES: list[Case] = [
    ("an append without fsync is gone", lambda d: write(d / "durable", b"B" * 100),
     {"durable": b"A" * 5000}),
    ("an overwrite without fsync gives the old bytes back", lambda d: write(d / "durable", b"B" * 10, offset=4095),
     {"durable": b"A" * 5000}),
    ("an fsynced append is kept", lambda d: write(d / "durable", b"B" * 100, sync=True),
     {"durable": b"A" * 5000 + b"B" * 100}),
    ("a new file without a directory fsync is gone, even fsynced", lambda d: write(d / "new", b"x", sync=True),
     {"durable": b"A" * 5000}),
    ("a new file fsynced, its directory fsynced: kept",
     lambda d: (write(d / "new", b"x", sync=True), fsync_path(d)),
     {"durable": b"A" * 5000, "new": b"x"}),
    ("a new file's directory fsynced but not its data: there, empty",
     lambda d: (write(d / "new", b"x"), fsync_path(d)),
     {"durable": b"A" * 5000, "new": b""}),
    ("a truncation without fsync is undone", lambda d: os.truncate(d / "durable", 10),
     {"durable": b"A" * 5000}),
    ("an unlink without a directory fsync is undone", lambda d: (d / "durable").unlink(),
     {"durable": b"A" * 5000}),
    ("an unlink made durable", lambda d: ((d / "durable").unlink(), fsync_path(d)), {}),
    ("write, fsync, rename over, fsync the directory: the new file",
     lambda d: (write(d / "durable.tmp", b"C" * 7, sync=True), os.replace(d / "durable.tmp", d / "durable"),
                fsync_path(d)),
     {"durable": b"C" * 7}),
    ("a rename over without the directory fsync: the old file, and no temporary",
     lambda d: (write(d / "durable.tmp", b"C" * 7, sync=True), os.replace(d / "durable.tmp", d / "durable")),
     {"durable": b"A" * 5000}),
]


@pytest.mark.parametrize(("what", "act", "survives"), CASES, ids=[c[0] for c in CASES])
def test_what_a_power_loss_keeps(mounted: tuple[Path, object], what: str, act: Callable[[Path], None],
                                 survives: dict[str, bytes]) -> None:
    data, mount = mounted
    act(data)
    report = mount.pull_plug()  # type: ignore[attr-defined]
    assert report["power_loss"] is True
    assert listing(data) == survives, what


def test_a_new_directory_goes_with_its_files(mounted: tuple[Path, object]) -> None:
    data, mount = mounted
    (data / "sub" / "deeper").mkdir()
    write(data / "sub" / "deeper" / "f", b"x", sync=True)
    fsync_path(data / "sub" / "deeper")  # the file's entry is durable, its directory's is not
    report = mount.pull_plug()  # type: ignore[attr-defined]
    assert not (data / "sub" / "deeper").exists()
    assert "mkdir /sub/deeper" in report["entries_undone"]


def test_an_orderly_unmount_keeps_everything(tmp_path: Path) -> None:
    from chaos.power.mount import PowerMount

    data = tmp_path / "data"
    mount = PowerMount.create(data, tmp_path / "state")
    try:
        write(data / "f", b"unsynced")
    finally:
        mount.unmount()
    assert not os.path.ismount(data)
    assert listing(data) == {"f": b"unsynced"}  # the files are back under the directory itself


@pytest.mark.parametrize(("durable", "survives"), [(True, b"new"), (False, b"old")])
def test_the_quorum_meta_file_survives_only_when_fsynced(mounted: tuple[Path, object], durable: bool,
                                                         survives: bytes) -> None:
    """quorum.durable_journal's term/vote write, as controller.quorum.fsync sets it."""
    data, mount = mounted
    write_durably(data / "sub" / "meta", b"old", durable=True, fsync=os.fsync)
    write_durably(data / "sub" / "meta", b"new", durable=durable, fsync=os.fsync)
    mount.pull_plug()  # type: ignore[attr-defined]
    assert (data / "sub" / "meta").read_bytes() == survives


def test_many_pulls_in_a_row(mounted: tuple[Path, object]) -> None:
    data, mount = mounted
    for n in range(3):
        write(data / "durable", bytes([n]) * 10, sync=True)
        write(data / "durable", b"lost")
        mount.pull_plug()  # type: ignore[attr-defined]
    assert (data / "durable").read_bytes() == b"A" * 5000 + b"".join(bytes([n]) * 10 for n in range(3))


def test_chaos_clean_unmounts_only_a_dead_runs_mounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.power import mount as power_mount

    data = tmp_path / "data"
    mount = power_mount.PowerMount.create(data, tmp_path / "state")
    try:
        assert (str(data), os.getpid()) in power_mount.leftovers()
        assert power_mount.clean_leftovers() == []  # this run is alive: its mount stays
        assert os.path.ismount(data)
        monkeypatch.setattr(power_mount, "pid_exists", lambda pid: pid != os.getpid())
        assert power_mount.clean_leftovers() == [f"power-loss mount {data}"]
        assert not os.path.ismount(data)
    finally:
        mount.unmount()
    assert (str(data), os.getpid()) not in power_mount.leftovers()
