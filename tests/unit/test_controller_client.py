"""broker/controller_client.py against scripted controllers: real aiohttp servers on loopback.

Each scripted controller answers /rpc/<name> from a function of (name, body); a "stalled"
one never answers (as a SIGSTOPped process whose kernel still accepts the connection).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgpack
import pytest
from aiohttp import web

from broker.controller_client import ControllerClient, ControllerUnavailableError

Script = Callable[[str, dict[str, Any]], dict[str, Any] | None]  # None: never answer


class Controller:
    def __init__(self, script: Script) -> None:
        self.script, self.calls = script, list[str]()
        self.address = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/rpc/{name}", self._serve)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.address = f"127.0.0.1:{port}"

    async def _serve(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.calls.append(name)
        reply = self.script(name, msgpack.unpackb(await request.read()))
        if reply is None:
            await asyncio.sleep(3600)  # stalled: cancelled when the server closes
        return web.Response(body=msgpack.packb({"error_code": 0, **(reply or {})}),
                            content_type="application/x-msgpack")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def ok(name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"records": [], "last_offset": 0} if name == "metadata-fetch" else {"answered": True}


def stalled(name: str, body: dict[str, Any]) -> None:
    return None


def not_controller(active: str | None) -> Script:
    return lambda name, body: {"error_code": 41, "controller_address": active}


@pytest.fixture
async def controllers() -> AsyncIterator[Callable[..., Any]]:
    started: list[Controller] = []

    async def start(*scripts: Script) -> list[Controller]:
        for script in scripts:
            controller = Controller(script)
            await controller.start()
            started.append(controller)
        return started[-len(scripts):]

    try:
        yield start
    finally:
        for controller in started:
            await controller.stop()


async def test_a_stalled_controller_is_left_after_the_liveness_timeout_and_tried_last(controllers) -> None:
    stuck, good = await controllers(stalled, ok)
    async with ControllerClient([stuck.address, good.address], liveness_timeout=0.3) as client:
        began = time.monotonic()
        assert (await client.heartbeat({}))["answered"] is True
        assert time.monotonic() - began < 2.0
        assert client.target == good.address
        client._target = stuck.address  # as if a stale redirect sent us back
        client._rotate(stuck.address)
        assert client.target == good.address


async def test_a_fetch_reply_naming_the_active_controller_moves_writes_unless_its_term_is_older(
        controllers) -> None:
    first, second = await controllers(ok, ok)
    async with ControllerClient([first.address, second.address]) as client:
        client.observe_leader({"raft_term": 5, "controller_id": 2, "controller_address": second.address})
        assert client.target == second.address
        client.observe_leader({"raft_term": 4, "controller_id": 1, "controller_address": first.address})
        assert client.target == second.address  # a deposed leader waking up names itself: ignored
        client.observe_leader({"raft_term": 6, "controller_id": None, "controller_address": None})
        assert client.target == second.address  # an election: keep the target until one is named
        client.observe_leader({"raft_term": 6, "controller_id": 1, "controller_address": first.address})
        assert client.target == first.address
        await client.heartbeat({})
        assert first.calls == ["broker-heartbeat"] and second.calls == []


async def test_a_write_stuck_on_a_stalled_controller_is_abandoned_when_the_quorum_names_another(
        controllers) -> None:
    stuck, good = await controllers(stalled, ok)
    async with ControllerClient([stuck.address, good.address], liveness_timeout=30.0) as client:
        beat = asyncio.create_task(client.heartbeat({}))
        await asyncio.sleep(0.2)
        assert not beat.done()
        client.observe_leader({"raft_term": 2, "controller_id": 2, "controller_address": good.address})
        async with asyncio.timeout(2.0):  # far below the 30 s request timeout
            assert (await beat)["answered"] is True


async def test_the_fetch_stream_rotates_apart_from_writes_and_learns_the_leader(controllers) -> None:
    def names_second(name: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"records": [], "last_offset": 0, "raft_term": 3, "controller_id": 2,
                "controller_address": second.address}
    stuck, second = await controllers(stalled, names_second)
    async with ControllerClient([stuck.address, second.address], liveness_timeout=0.3) as client:
        reply = await client.fetch_metadata(0, max_wait_ms=100)
        assert reply["controller_address"] == second.address
        assert client.target == second.address  # writes follow what the quorum said


async def test_the_fetch_stream_goes_to_the_active_controller_once_per_term(controllers) -> None:
    """A follower controller hands out each commit a quorum round late: fetches go where the
    quorum names the leader. A leader that stalls is left, and not tried again at the same term."""
    active: dict[str, Any] = {"term": 3, "address": ""}

    def names_active(name: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"records": [], "last_offset": 0, "raft_term": active["term"], "controller_id": 0,
                "controller_address": active["address"]}
    stalling = {"now": False}

    def leader(name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        return None if stalling["now"] else names_active(name, body)
    follower, second, third = await controllers(names_active, leader, names_active)
    active["address"] = second.address
    # The servers share the client's loop: a loop held longer than the timeout (a full collection
    # late in the unit suite) fires the client's deadline before the server's handler runs, and
    # the fetch leaves a leader that did not stall. 1 s, not 0.3: the stall phase waits it once.
    async with ControllerClient([follower.address, second.address, third.address],
                                liveness_timeout=1.0) as client:
        await client.fetch_metadata(0, max_wait_ms=0)
        assert follower.calls == ["metadata-fetch"]
        await client.fetch_metadata(0, max_wait_ms=0)
        await client.fetch_metadata(0, max_wait_ms=0)
        assert follower.calls == ["metadata-fetch"] and second.calls == ["metadata-fetch"] * 2
        stalling["now"] = True
        await client.fetch_metadata(0, max_wait_ms=0)  # times out on the leader, answered by the next
        await client.fetch_metadata(0, max_wait_ms=0)
        assert second.calls == ["metadata-fetch"] * 3 and third.calls == ["metadata-fetch"] * 2
        active.update(term=4, address=follower.address)  # a new term names a new active controller
        await client.fetch_metadata(0, max_wait_ms=0)
        await client.fetch_metadata(0, max_wait_ms=0)
        assert follower.calls == ["metadata-fetch"] * 2 and third.calls == ["metadata-fetch"] * 3


async def test_not_controller_redirects_and_attempts_are_bounded(controllers) -> None:
    good, = await controllers(ok)
    redirecting, = await controllers(not_controller(good.address))
    async with ControllerClient([redirecting.address, good.address]) as client:
        assert (await client.call("broker-registration", {}))["answered"] is True
    nobody, = await controllers(not_controller(None))
    async with ControllerClient([nobody.address], max_attempts=3, initial_backoff=0.01) as client:
        with pytest.raises(ControllerUnavailableError, match="3 attempts"):
            await client.call("broker-heartbeat", {})



async def test_a_registration_during_an_election_asks_again_within_the_registration_cap(
        controllers, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five NOT_CONTROLLER answers naming nobody (an election), then an answer: a heartbeat
    waits 0.05, 0.1, 0.2, 0.4, 0.8 s between them, a registration no more than 0.1 s."""
    answers: list[int] = []
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    def election_then_active(name: str, body: dict[str, Any]) -> dict[str, Any]:
        answers.append(1)
        if len(answers) % 6 == 0:
            return {"answered": True}
        return {"error_code": 41, "controller_address": None}  # NOT_CONTROLLER, nobody active yet

    controller, = await controllers(election_then_active)
    monkeypatch.setattr("broker.controller_client.asyncio.sleep", recorded_sleep)
    async with ControllerClient([controller.address]) as client:
        assert (await client.register({}))["answered"] is True
        registration_waits, waits[:] = list(waits), []
        assert (await client.heartbeat({}))["answered"] is True
    assert registration_waits == pytest.approx([0.05, 0.1, 0.1, 0.1, 0.1])
    assert waits == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8])
