"""The report page renders in a real browser: headless Debian chromium loads report.html,
the DOM holds the verdict table and the embedded timeline, the screenshot is not blank."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from chaos.history import History
from chaos.report.html import write_report
from chaos.scenarios.spec import parse_scenario

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking"]
BROWSER_TIMEOUT_S = 90

SCENARIO = """
name = "hand-written"
summary = "a hand-written history with a leader kill, rendered"
[[topics]]
name = "chaos"
partitions = 2
[[faults]]
action = "kill"
target = "leader:chaos:0"
at_s = 2
duration_s = 2
[expect]
max_unavailable_s = 3
"""


def write_history(directory: Path) -> None:
    ticks = iter([0.0] + [i * 0.01 for i in range(1, 10_000)])
    history = History((directory / "history.jsonl").open("w"), clock=lambda: next(ticks), wall=lambda: 0.0)
    history.record("phase", name="workload")
    for n in range(600):
        partition = n % 2
        history.record("invoke", value=str(n), partition=partition)
        if not (200 <= n < 400 and partition == 0):  # partition 0 unavailable for a while
            history.record("ok", value=str(n), partition=partition, offset=n // 2)
        if n == 200:
            history.record("fault-start", id="f1", action="kill", description="kill leader:chaos:0", targets=[4])
        if n == 300:
            history.record("fault-end", id="f1", action="kill")
        history.record("sample", partition=partition, leader=4 if n < 250 else 5, isr=[4, 5, 6],
                       leader_epoch=0 if n < 250 else 1, high_watermark=n // 2)
    history.record("phase", name="catch-up")
    history.close()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_the_report_renders_its_plot_and_verdict_table_in_chromium(tmp_path: Path) -> None:
    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    (tmp_path / "scenario.toml").write_text(SCENARIO)
    write_history(tmp_path)
    _, verdicts = write_report(tmp_path, parse_scenario(SCENARIO))
    assert [v.expectation for v in verdicts if not v.ok] == [
        "no unseen", "every partition writable again within 3 s"]  # no final read; a 4 s outage
    page = (tmp_path / "report.html").resolve().as_uri()
    dom = subprocess.run([browser, *CHROMIUM_FLAGS, "--dump-dom", page], capture_output=True, text=True,
                         timeout=BROWSER_TIMEOUT_S, check=True).stdout
    assert 'id="verdicts"' in dom and dom.count("<tr class=\"bad\">") >= 2 and "FAIL" in dom
    assert 'id="timeline"' in dom and "data:image/png;base64," in dom
    assert "EXPECTATIONS FAILED" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *CHROMIUM_FLAGS, f"--screenshot={shot}", "--window-size=1200,1600", page],
                   capture_output=True, timeout=BROWSER_TIMEOUT_S, check=True)
    data = shot.read_bytes()
    assert png_size(data) == (1200, 1600)
    assert len(data) > 20_000  # a blank page's PNG is a few KB; tables, text and a plot are not
