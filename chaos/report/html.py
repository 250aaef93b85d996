"""The report: one self-contained HTML page rendered from the history alone.

    results, verdicts = write_report(report_dir, scenario)   # reads history.jsonl, writes report.html

The page holds the verdict table (one row per expectation), the checker table with
examples, the per-partition timeline (chaos.report.plots, an embedded PNG), the faults as
applied, and the scenario text. `tidelog chaos report DIR` re-renders it from DIR.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from pathlib import Path

from chaos.checkers.result import CheckResult
from chaos.checkers.suite import Verdict, judge, run_all
from chaos.history import Event, load
from chaos.report.plots import timeline_png
from chaos.scenarios.spec import Scenario

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}.ok{background:#e6f4ea}
.bad{background:#fce8e6}pre{background:#f6f6f6;padding:1em;overflow:auto}img{max-width:100%}"""


def _faults_table(events: Sequence[Event], outage: dict[str, float]) -> str:
    ends = {e["id"]: e["t"] for e in events if e["kind"] == "fault-end"}
    rows = [f"<tr><td>{html.escape(e['id'])}</td><td>{e['t']:.2f}</td><td>{ends.get(e['id'], float('nan')):.2f}"
            f"</td><td>{html.escape(e['description'])}</td><td>{e['targets']}</td><td>{e.get('peers', [])}</td>"
            f"<td>{outage.get(e['id'], 0.0):.2f}</td></tr>"
            for e in events if e["kind"] == "fault-start"]
    rows += [f"<tr class='bad'><td>{html.escape(e['id'])}</td><td>{e['t']:.2f}</td><td>skipped</td>"
             f"<td>{html.escape(e['description'])}</td><td colspan=3>{html.escape(e['why'])}</td></tr>"
             for e in events if e["kind"] == "skip"]
    return ("<table id='faults'><tr><th>fault</th><th>start s</th><th>heal s</th><th>what</th><th>nodes</th>"
            "<th>cut from</th><th>writes stopped for (s)</th></tr>" + "".join(rows) + "</table>")


def render(events: Sequence[Event], scenario: Scenario, results: Sequence[CheckResult],
           verdicts: Sequence[Verdict]) -> str:
    passed = all(v.ok for v in verdicts)
    png = base64.b64encode(timeline_png(events)).decode()
    verdict_rows = "".join(
        f"<tr class='{'ok' if v.ok else 'bad'}'><td>{'PASS' if v.ok else 'FAIL'}</td><td>{html.escape(v.expectation)}"
        f"</td><td>{html.escape(v.detail)}</td></tr>" for v in verdicts)
    checker_rows = "".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{r.count}</td><td>{html.escape(r.summary)}</td>"
        f"<td>{'<br>'.join(html.escape(x) for x in r.examples)}</td></tr>" for r in results)
    availability = next((r for r in results if r.name == "availability"), None)
    outage = {} if availability is None else dict(availability.data.get("per_fault_s", {}))
    seed = next((e.get("seed") for e in events if e.get("what") == "scenario"), None)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>chaos: {html.escape(scenario.name)}</title>
<style>{STYLE}</style></head><body>
<h1>{html.escape(scenario.name)}: <span id="outcome">{'AS PROMISED' if passed else 'EXPECTATIONS FAILED'}</span></h1>
<p>{html.escape(scenario.summary)} (seed {seed})</p>
<h2>Verdict</h2><table id="verdicts"><tr><th></th><th>expectation</th><th>measured</th></tr>{verdict_rows}</table>
<h2>Timeline</h2><img id="timeline" alt="acknowledged writes per second and produce latency per partition"
 src="data:image/png;base64,{png}">
<h2>Checkers</h2><table id="checkers"><tr><th>checker</th><th>count</th><th>summary</th><th>examples</th></tr>
{checker_rows}</table>
<h2>Faults</h2>{_faults_table(events, outage)}
<h2>Scenario</h2><pre>{html.escape(scenario.text)}</pre>
</body></html>"""


def write_report(report_dir: Path, scenario: Scenario) -> tuple[list[CheckResult], list[Verdict]]:
    events = load(report_dir / "history.jsonl")
    results = run_all(events)
    verdicts = judge(results, scenario.expect)
    (report_dir / "report.html").write_text(render(events, scenario, results, verdicts), encoding="utf-8")
    (report_dir / "results.json").write_text(json.dumps(
        {"scenario": scenario.name, "passed": all(v.ok for v in verdicts),
         "verdicts": [{"expectation": v.expectation, "ok": v.ok, "detail": v.detail} for v in verdicts],
         "checkers": [r.to_json() for r in results]}, indent=2) + "\n", encoding="utf-8")
    return results, verdicts
