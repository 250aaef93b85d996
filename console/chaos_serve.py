"""`tidelog chaos run --serve [HOST:]PORT`: the console's Chaos page for one run, served while it runs.

    with ChaosServer(report_dir, "127.0.0.1", 8099) as server:   # a thread with its own event loop
        print(server.url)                                          # http://127.0.0.1:8099/console/#chaos/NAME
        run_scenario(...)

Only the page, its static files and the chaos routes over the report's parent directory are served
(no cluster API: the cluster under test is the run's own). Binding beyond loopback is refused: the
page has no token, and a run's history is not for everyone on the network.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from types import TracebackType
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from console.chaos_routes import ChaosRoutes
from quorum.admin_api import AdminError
from console.routes import STATIC, STATIC_FILES
from security.rpc_auth import is_loopback

START_TIMEOUT: Final = 10.0  # seconds for the server thread to bind
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_ADDRESS: Final = re.compile(r"(?:(?P<host>[A-Za-z0-9._-]+):)?(?P<port>[0-9]{1,5})")


class ServeError(ValueError):
    """A bad --serve address, or one that cannot be bound."""


def parse_address(text: str) -> tuple[str, int]:
    """`PORT` or `HOST:PORT` (loopback only); PORT 0 picks a free one."""
    match = _ADDRESS.fullmatch(text)
    if match is None or int(match["port"]) > 65535:
        raise ServeError(f"--serve takes PORT or HOST:PORT, got {text!r}")
    host = match["host"] or "127.0.0.1"
    if not is_loopback(host):
        raise ServeError(f"--serve binds loopback addresses only (the page has no token), got {host!r}")
    return host, int(match["port"])


class ChaosServer:
    def __init__(self, report_dir: Path, host: str, port: int) -> None:
        self.report_dir, self.host, self.port = report_dir, host, port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-serve", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/console/#chaos/{self.report_dir.name}"

    def _app(self) -> web.Application:
        async def index(request: web.Request) -> web.FileResponse:
            return web.FileResponse(STATIC / "index.html", headers={"Content-Type": "text/html"})

        async def static(request: web.Request) -> web.FileResponse:
            name = request.match_info["file"]
            if name not in STATIC_FILES:
                raise web.HTTPNotFound()
            return web.FileResponse(STATIC / name, headers={"Content-Type": STATIC_FILES[name]})

        @web.middleware
        async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                return await handler(request)
            except AdminError as exc:  # as the admin API answers: {"error", "message", "field"}
                return web.json_response(exc.body(), status=exc.status)

        app = web.Application(middlewares=[errors])
        app.add_routes([web.get("/console/", index), web.get("/console/static/{file}", static),
                        *ChaosRoutes(self.report_dir.resolve().parent).routes()])
        return app

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        if self.port == 0 and server is not None and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])

    def start(self) -> ChaosServer:
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(START_TIMEOUT)
        except OSError as exc:
            self.stop()
            raise ServeError(f"cannot serve on {self.host}:{self.port}: {exc.strerror or exc}") from None
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(START_TIMEOUT)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_TIMEOUT)
        self._loop.close()

    def __enter__(self) -> ChaosServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
