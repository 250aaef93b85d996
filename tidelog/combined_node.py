"""A combined node: one process running a controller and a broker (`process.roles=broker,controller`).

    tidelog combined --config server.properties

Kafka's combined mode, for a one-process dev node (`tidelog up --combined`). Both halves run
on one asyncio loop, exactly as their own processes would (`quorum.node.run_node`,
`broker.node.run_broker`); the broker reaches its own controller over the same HTTP RPCs as
any other broker, so nothing differs but the process boundary.

Stopping: SIGTERM/SIGINT reach the broker half (it owns the signals), which runs its
controlled shutdown against the quorum while the controller half is still up; then the
controller half stops. When several combined nodes stop together, a controller half
lingers (at most `LINGER_MAX`) while another broker is still in the middle of its controlled
shutdown, so the last ones keep a quorum (`shutdown.controller_states.controller_may_stop`).
A controller half that dies takes the broker half down through the same SIGTERM path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any, Final

from broker.broker_settings import BrokerSettings
from common.config import parse_config
from common.config_schema import Config, ConfigError
from common.file_limits import raise_open_file_limit
from common.log_setup import setup_logging
from common.properties import load_properties
from common.units import MIB, SECONDS
from quorum.admin_api import ApiSettings
from quorum.quorum_settings import QuorumSettings
from security.controller_tls import controller_url
from security.controller_tls_context import client_context_of
from shutdown.controller_states import controller_may_stop

logger = logging.getLogger("tidelog.combined_node")

LINGER_MAX: Final = 10 * SECONDS  # a controller half waits at most this long for other brokers' shutdowns
LINGER_POLL: Final = 0.05 * SECONDS
PROBE_TIMEOUT: Final = 1 * SECONDS
MAX_ANSWER_BYTES: Final = 16 * MIB
ROLES: Final = frozenset({"broker", "controller"})


@dataclass(frozen=True, slots=True)
class _Flags:
    broker_id: int
    fenced: bool
    in_controlled_shutdown: bool


@dataclass(frozen=True, slots=True)
class CombinedSettings:
    quorum: QuorumSettings
    api: ApiSettings
    broker: BrokerSettings

    @classmethod
    def from_config(cls, config: Config) -> CombinedSettings:
        roles = config["process.roles"]
        if not isinstance(roles, tuple) or set(roles) != ROLES:
            raise ConfigError(f"config 'process.roles' must be broker,controller to run a combined node, "
                              f"got {','.join(roles) if isinstance(roles, tuple) else roles!r}")
        quorum = QuorumSettings.from_config(config)
        api = ApiSettings.from_config(config, quorum)
        if api is None:
            raise ConfigError("config 'controller.listener' (host:port of the HTTP API) must be set "
                              "to run a combined node")
        return cls(quorum, api, BrokerSettings.from_config(config))


async def _brokers_view(session: Any, url: str) -> list[_Flags]:
    import aiohttp

    from broker.controller_client import read_body

    async with session.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)) as answer:
        raw = await read_body(answer.content, MAX_ANSWER_BYTES)
    if raw is None:
        raise ValueError(f"GET {url} answered more than {MAX_ANSWER_BYTES} bytes")
    brokers = json.loads(raw)
    return [_Flags(int(b["broker_id"]), bool(b["fenced"]), bool(b["in_controlled_shutdown"])) for b in brokers]


async def linger_for_other_shutdowns(api: ApiSettings, own_broker_id: int, limit: float = LINGER_MAX) -> None:
    """Keep the controller half up while another broker still needs the quorum to finish its
    controlled shutdown; read from this controller's own admin API; at most `limit` seconds."""
    import aiohttp

    tls = client_context_of(api.tls)  # https when configured (issue 29)
    url = f"{controller_url(f'{api.host}:{api.port}', tls)}/v1/brokers"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    waited = False
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls if tls is not None else True)) as session:
        while loop.time() < deadline:  # bounded by the deadline
            try:
                if controller_may_stop(await _brokers_view(session, url), own_broker_id=own_broker_id):
                    break
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
                logger.warning("Combined node %d: cannot read the brokers' states (%s); stopping the "
                               "controller now", own_broker_id, exc)
                return
            if not waited:
                waited = True
                logger.info("Combined node %d: another broker is in controlled shutdown; the controller "
                            "stays up until it is done (at most %.0f s)", own_broker_id, limit)
            await asyncio.sleep(LINGER_POLL)
        else:
            logger.warning("Combined node %d: other brokers were still in controlled shutdown after %.0f s; "
                           "stopping the controller anyway", own_broker_id, limit)


async def run_combined(settings: CombinedSettings, config: Config) -> int:
    """Run both halves until SIGTERM/SIGINT or a fatal error in either; the exit status."""
    from broker.node import run_broker
    from quorum.node import run_node

    node_id = settings.quorum.node_id
    controller_stop = asyncio.Event()
    controller = asyncio.create_task(run_node(settings.quorum, control=False, api=settings.api,
                                              stop=controller_stop), name="controller")
    broker = asyncio.create_task(run_broker(settings.broker, config), name="broker")  # owns SIGTERM/SIGINT
    await asyncio.wait({controller, broker}, return_when=asyncio.FIRST_COMPLETED)
    if controller.done() and not broker.done():
        logger.error("Combined node %d: the controller stopped (%s); stopping the broker", node_id,
                     _outcome(controller))
        os.kill(os.getpid(), signal.SIGTERM)  # the broker's own SIGTERM path: a controlled shutdown
        await asyncio.wait({broker})
    else:
        await linger_for_other_shutdowns(settings.api, settings.broker.node_id)
        controller_stop.set()
        await asyncio.wait({controller})
    statuses = [_status(task) for task in (broker, controller)]
    logger.info("Combined node %d stopped (broker: %s, controller: %s)", node_id, _outcome(broker),
                _outcome(controller))
    return max(statuses)


def _status(task: asyncio.Task[int]) -> int:
    if task.cancelled() or task.exception() is not None:
        return 1
    return task.result()


def _outcome(task: asyncio.Task[int]) -> str:
    if task.cancelled():
        return "cancelled"
    error = task.exception()
    return f"failed: {error!r}" if error is not None else f"exit status {task.result()}"


def run(config_path: str) -> int:
    """Parse the config, set up logging, run the node; the process exit status."""
    try:
        config = parse_config(load_properties(config_path))
        settings = CombinedSettings.from_config(config)
        from common.preflight import check_node  # (issue 30) peers that disagree: refuse to start
        check_node(config, role="combined")
    except ConfigError as exc:
        print(f"combined: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.quorum.node_id, "combined")
    raise_open_file_limit(f"Combined node {settings.quorum.node_id}")  # before any log is opened
    try:
        return asyncio.run(run_combined(settings, config))
    except OSError as exc:
        logger.error("Combined node %d cannot start: %s", settings.quorum.node_id, exc)
        return 1
