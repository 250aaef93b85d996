"""The console's routes are described in GET /openapi.json, and only the page and its static files
are public: the routes table and the OpenAPI part agree, route for route."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiohttp import web

from console.routes import OPENAPI_PATHS, ConsoleRoutes, is_public


def test_every_console_route_is_described() -> None:
    server: Any = SimpleNamespace(settings=SimpleNamespace(console_metrics_port=0, console_reports_dir=None))
    app = web.Application()
    app.add_routes(ConsoleRoutes(server).routes())
    routes = {(r.method.lower(), r.resource.canonical) for r in app.router.routes()
              if r.resource is not None and r.method != "HEAD"}
    described = {(method, path) for path, item in OPENAPI_PATHS.items() for method in item}
    assert routes == described


def test_only_the_page_and_its_static_files_are_public() -> None:
    assert [p for p in ("/console", "/console/", "/console/static/console.js", "/console/api/topics",
                        "/console/api/overview", "/v1/topics", "/console/staticx") if is_public(p)] == [
        "/console", "/console/", "/console/static/console.js"]
