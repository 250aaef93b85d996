"""`tidelog chaos run --serve`: the live Chaos page's server follows a history as it is written,
takes the verdicts once results.json exists, reads nothing outside the reports directory, and
binds loopback only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from console.chaos_serve import ChaosServer, ServeError, parse_address


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = answer.read()
            kind = answer.headers.get("Content-Type", "")
            return answer.status, json.loads(body) if "json" in kind else body.decode()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _line(event: dict[str, Any]) -> str:
    return json.dumps(event) + "\n"


def test_the_live_view_follows_a_run(tmp_path: Path) -> None:
    run = tmp_path / "reports" / "run-1"
    run.mkdir(parents=True)
    history = run / "history.jsonl"
    history.write_text(_line({"t": 0, "kind": "note", "what": "scenario", "name": "demo", "seed": 1, "schedule": []})
                       + _line({"t": 0.1, "kind": "phase", "name": "workload"})
                       + _line({"t": 0.2, "kind": "ok", "process": "p0", "value": "1"})
                       + '{"t": 0.3, "kind": "ok", "proc')  # a line still being written
    with ChaosServer(run, "127.0.0.1", 0) as server:
        assert server.url.endswith("/console/#chaos/run-1") and server.port > 0
        base = f"http://127.0.0.1:{server.port}"
        status, page = _get(base + "/console/")
        assert status == 200 and "console.js" in page
        status, summary = _get(base + "/console/api/chaos/reports/run-1")
        assert status == 200 and (summary["scenario"], summary["acks_total"], summary["finished"]) == ("demo", 1, False)
        with history.open("a") as more:
            more.write('cess": "p0", "value": "2"}\n' + _line({"t": 1.5, "kind": "phase", "name": "verify"}))
        (run / "results.json").write_text(json.dumps({"scenario": "demo", "passed": True, "verdicts": [
            {"expectation": "no lost", "ok": True, "detail": "0 lost"}]}))
        status, summary = _get(base + "/console/api/chaos/reports/run-1")
        assert (summary["acks_total"], summary["phase"], summary["passed"]) == (2, "verify", True)
        assert summary["verdicts"][0]["expectation"] == "no lost"
        status, listed = _get(base + "/console/api/chaos/reports")
        assert [r["name"] for r in listed["reports"]] == ["run-1"] and listed["reports"][0]["passed"] is True
        for path, code in (("/console/api/chaos/reports/..%2F..%2Fetc", 400), ("/console/api/chaos/reports/nope", 404),
                           ("/console/api/chaos/reports/run-1/clients.log", 404)):
            status, body = _get(base + path)
            assert status == code and body["message"], path


@pytest.mark.parametrize(("text", "expected"), [("8099", ("127.0.0.1", 8099)), ("127.0.0.5:0", ("127.0.0.5", 0)),
                                                ("localhost:80", ("localhost", 80))])
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["0.0.0.0:8099", "10.1.2.3:80", "port", "1:2:3", "99999"])
def test_parse_address_refuses_non_loopback_and_junk(text: str) -> None:
    with pytest.raises(ServeError):
        parse_address(text)


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with ChaosServer(tmp_path / "a", "127.0.0.1", 0) as first:
        with pytest.raises(ServeError, match="cannot serve on"):
            ChaosServer(tmp_path / "b", "127.0.0.1", first.port).start()
