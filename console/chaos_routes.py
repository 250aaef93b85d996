"""The Chaos page's routes: the reports in one directory, each opened, and a running one followed.

    ChaosRoutes(Path("chaos-reports")).routes()

    GET /console/api/chaos/reports                  every report directory: files, finished, passed
    GET /console/api/chaos/reports/{name}           its live summary (console.chaos_views.LiveRun)
    GET /console/api/chaos/reports/{name}/{file}    report.html, results.json, scenario.toml or history.jsonl

A running `tidelog chaos run` writes history.jsonl as it goes (the engine flushes it at least once a
second); each poll reads only the lines added since the last one, so a page polling once a second
costs a few KB per poll. Names are single path segments inside the directory: nothing else is read.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from console.chaos_views import REPORT_FILES, LiveRun, report_entry
from quorum.admin_api import AdminError

MAX_REPORTS: Final = 500  # directories listed (the newest by name)
MAX_FOLLOWED: Final = 16  # runs whose summaries are kept between polls
MAX_READ_BYTES: Final = 64 * 1024 * 1024  # of history read in one poll; the rest on the next
_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,200}")
_CONTENT_TYPES: Final = {".html": "text/html", ".json": "application/json", ".toml": "text/plain",
                         ".jsonl": "text/plain"}


@dataclass
class _Followed:
    run: LiveRun = field(default_factory=LiveRun)
    position: int = 0
    inode: int = 0


class ChaosRoutes:
    def __init__(self, reports_dir: Path | None) -> None:
        self.reports_dir = reports_dir
        self._followed: OrderedDict[str, _Followed] = OrderedDict()

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/console/api/chaos/reports", self._list),
                web.get("/console/api/chaos/reports/{name}", self._summary),
                web.get("/console/api/chaos/reports/{name}/{file}", self._file)]

    def _dir(self) -> Path:
        if self.reports_dir is None:
            raise AdminError("INVALID_REQUEST", "this controller has no chaos reports directory: set "
                             "console.chaos.reports.dir in its server.properties", None, status=404)
        return self.reports_dir

    def _report(self, name: str) -> Path:
        if not _NAME.fullmatch(name) or name.startswith("."):
            raise AdminError("INVALID_REQUEST", f"{name[:60]!r} is not a report name", "name")
        path = self._dir() / name
        if not (path / "history.jsonl").is_file():
            raise AdminError("UNKNOWN_REPORT", f"no chaos report {name!r} in {self._dir()}", "name", status=404)
        return path

    @staticmethod
    def _results(path: Path) -> dict[str, Any] | None:
        try:
            loaded = json.loads((path / "results.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # still running, or written half: the next poll reads it whole
        return loaded if isinstance(loaded, dict) else None

    async def _list(self, request: web.Request) -> web.Response:
        root = self._dir()
        entries = []
        if root.is_dir():
            names = sorted((p.name for p in root.iterdir() if p.is_dir() and _NAME.fullmatch(p.name)), reverse=True)
            for name in names[:MAX_REPORTS]:
                path = root / name
                files = [f.name for f in path.iterdir()] if path.is_dir() else []
                if "history.jsonl" in files:
                    entries.append(report_entry(name, files, self._results(path)))
        return web.json_response({"dir": str(root), "reports": entries})

    async def _summary(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        path = self._report(name)
        followed = self._follow(name, path / "history.jsonl")
        return web.json_response({"name": name, **followed.run.view(self._results(path))})

    def _follow(self, name: str, history: Path) -> _Followed:
        followed = self._followed.pop(name, None) or _Followed()
        with history.open("rb") as f:
            inode = history.stat().st_ino
            if inode != followed.inode:  # a new run wrote it again: start over
                followed = _Followed(inode=inode)
            f.seek(followed.position)
            chunk = f.read(MAX_READ_BYTES)
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line being written is read on the next poll
        followed.position += len(complete)
        events = []
        for line in complete.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # a torn line of a crashed run: the rest of the history stands
        followed.run.feed(events)
        self._followed[name] = followed
        while len(self._followed) > MAX_FOLLOWED:
            self._followed.popitem(last=False)
        return followed

    async def _file(self, request: web.Request) -> web.StreamResponse:
        path = self._report(request.match_info["name"])
        file = request.match_info["file"]
        if file not in REPORT_FILES:
            raise AdminError("INVALID_REQUEST", f"a report has no file {file[:60]!r} to show (one of "
                             f"{', '.join(REPORT_FILES)})", "file", status=404)
        if not (path / file).is_file():
            raise AdminError("UNKNOWN_REPORT", f"report {path.name!r} has no {file} yet", "file", status=404)
        return web.FileResponse(path / file, headers={"Content-Type": _CONTENT_TYPES[Path(file).suffix]})
