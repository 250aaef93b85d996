"""One controller-quorum voter as a process: `python -m quorum.node --config server.properties`.

Reads node.id, controller.quorum.voters, controller.cluster.password and metadata.log.dir
(else the first of log.dirs), joins the quorum and runs the active-controller loop. With
`controller.listener` set it also serves the HTTP API (`quorum.controller_server`: admin
API, broker RPCs, metrics); `tidelog controller --config FILE` is this with the API required
and without the stdin channel.

Control channel, until the admin API replaces it: one JSON request per stdin line, one JSON
response per stdout line, in order; logs go to stderr. End of stdin stops the node, so a
node never outlives the process holding its pipe (`--no-control` ignores stdin).

    {"op": "status"}
    {"op": "append", "records": [{"type": 20, "version": 0}], "timeout_ms": 2000}
    {"op": "append_with_epoch", "epoch": 3, "records": [...]}   # bypasses the active controller
    {"op": "records", "from": 0, "max": 1000}
    {"op": "snapshot"}                                          # force a dump (log compaction)
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

from common.config import parse_config
from common.config_schema import ConfigError
from common.file_limits import raise_open_file_limit
from common.limits import READ_SIZE
from common.log_setup import setup_logging
from common.properties import load_properties
from common.task_stop import cancel_and_wait
from common.units import MIB, SECONDS
from metadata.codec import MetadataRecordError
from metadata.image import MetadataImage
from metadata.records import Record, record_from_map, record_to_map
from metadata.snapshot import encode_snapshot
from quorum.active_controller import (
    ActiveController,
    ControllerBusyError,
    NotActiveControllerError,
)
from quorum.admin_api import ApiSettings
from quorum.feature_bootstrap import FeatureBootstrapLog
from quorum.live_voters import live_settings
from quorum.log_state import AppendOutcome, RecordTooLargeError
from quorum.metadata_log import MetadataLog
from quorum.quorum_settings import QuorumBindError, QuorumSettings

logger = logging.getLogger("quorum.node")  # not __name__: that is __main__ under -m

MAX_REQUEST_BYTES: Final = 1 * MIB
MAX_RECORDS_PER_READ: Final = 5000
DEFAULT_APPEND_TIMEOUT_MS: Final = 2000
MAX_APPEND_TIMEOUT_MS: Final = 30_000
FATAL_CHECK_INTERVAL: Final = 0.2 * SECONDS


class BadRequest(ValueError):
    """A control request that cannot be served as written."""


def image_summary(image: MetadataImage) -> dict[str, Any]:
    """What a test or operator compares between voters; `digest` covers the whole image."""
    return {
        "offset": image.offset,
        "controller_epoch": image.controller_epoch,
        "brokers": sorted(image.cluster.brokers),
        "topics": {name: {"topic_id": t.topic_id, "partitions": len(t.partitions)}
                   for name, t in sorted(image.topics.by_name.items())},
        "digest": hashlib.sha256(encode_snapshot(image)).hexdigest(),
    }


def outcome_json(outcome: AppendOutcome) -> dict[str, Any]:
    return {"ok": True, "outcome": outcome.kind.value, "epoch": outcome.epoch,
            "first_offset": outcome.first_offset, "last_offset": outcome.last_offset,
            "reason": outcome.reason}


def _records(request: dict[str, Any]) -> list[Record]:
    maps = request.get("records")
    if not isinstance(maps, list) or not maps:
        raise BadRequest("'records' must be a non-empty list of record maps")
    try:
        return [record_from_map(m) for m in maps]
    except MetadataRecordError as exc:
        raise BadRequest(str(exc)) from None


def _timeout(request: dict[str, Any]) -> float:
    ms = request.get("timeout_ms", DEFAULT_APPEND_TIMEOUT_MS)
    if type(ms) is not int or not 0 < ms <= MAX_APPEND_TIMEOUT_MS:
        raise BadRequest(f"'timeout_ms' must be an integer in 1..{MAX_APPEND_TIMEOUT_MS}")
    return ms / 1000


class ControlChannel:
    """Serves the control requests of one node; one request at a time."""

    def __init__(self, log: MetadataLog, controller: ActiveController) -> None:
        self._log = log
        self._controller = controller

    async def handle_line(self, line: bytes) -> dict[str, Any]:
        """The response to one request line; never raises."""
        request = _safe_json(line)
        try:
            if not isinstance(request, dict):
                raise BadRequest("a request must be a JSON object")
            response = await self.handle(request)
        except (BadRequest, ValueError) as exc:
            response = {"ok": False, "error": "bad_request", "message": str(exc)}
        except NotActiveControllerError as exc:
            response = {"ok": False, "error": "not_controller", "message": str(exc), "leader": exc.leader}
        except (ControllerBusyError, TimeoutError) as exc:
            response = {"ok": False, "error": "not_appended", "message": str(exc)}
        except Exception as exc:  # a bug: answer, log, and keep serving
            logger.exception("Control request failed")
            response = {"ok": False, "error": "internal", "message": repr(exc)}
        if isinstance(request, dict) and "id" in request:
            response["id"] = request["id"]
        return response

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return self._status()
        if op == "append":
            records, timeout_s = _records(request), _timeout(request)
            started = time.perf_counter()
            try:
                outcome = await self._controller.append(records, timeout_s,
                                                        atomic=bool(request.get("atomic", True)))
            except RecordTooLargeError as exc:
                raise BadRequest(str(exc)) from None
            # The time inside the controller: queue, replication, commit, apply.
            return {**outcome_json(outcome), "elapsed_ms": (time.perf_counter() - started) * 1000}
        if op == "append_with_epoch":
            epoch = request.get("epoch")
            if type(epoch) is not int:
                raise BadRequest("'epoch' must be an integer")
            outcome = await self._log.append(_records(request), epoch, _timeout(request))
            return outcome_json(outcome)
        if op == "records":
            start, limit = request.get("from", 0), request.get("max", MAX_RECORDS_PER_READ)
            if type(start) is not int or type(limit) is not int or not 0 < limit <= MAX_RECORDS_PER_READ:
                raise BadRequest(f"'from' must be an integer and 'max' in 1..{MAX_RECORDS_PER_READ}")
            try:
                pairs = self._log.records_from(start, limit)
            except IndexError as exc:
                return {"ok": False, "error": "offset_out_of_range", "message": str(exc)}
            return {"ok": True, "records": [[offset, record_to_map(r)] for offset, r in pairs]}
        if op == "snapshot":
            self._log.forceLogCompaction()
            return {"ok": True}
        raise BadRequest(f"unknown op {op!r}")

    def _status(self) -> dict[str, Any]:
        s = self._log.status()
        return {
            "ok": True, "node_id": s.node_id, "is_leader": s.is_leader, "term": s.term,
            "leader": s.leader, "is_active": self._controller.is_active,
            "epoch": self._controller.epoch, "commit_index": s.commit_index,
            "last_applied": s.last_applied, "ready": s.ready,
            "log_start_offset": s.log_start_offset, "last_offset": s.last_offset,
            "dump_offset": s.dump_offset, "image": image_summary(s.image),
            "fsync": dict(zip(("on", "batches", "entries"), self._log.durability())),
        }


def _safe_json(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _request_lines(fd: int) -> Iterator[bytes | None]:
    """Lines read from `fd` until EOF; None stands for a line longer than MAX_REQUEST_BYTES.

    os.read rather than sys.stdin: a daemon thread blocked inside the buffered reader holds
    its lock, and the interpreter aborts at exit when it finds that lock taken.
    """
    buffer = b""
    oversized = False
    while data := os.read(fd, READ_SIZE):  # until EOF
        buffer += data
        while (end := buffer.find(b"\n")) >= 0:
            line, buffer = buffer[:end], buffer[end + 1:]
            yield None if oversized else line
            oversized = False
        if len(buffer) > MAX_REQUEST_BYTES:  # drop it now, answer when its newline comes
            buffer, oversized = b"", True


def _serve_stdin(channel: ControlChannel, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Read requests from stdin on this thread, answer on stdout; stop the node at EOF."""
    for line in _request_lines(sys.stdin.fileno()):
        if line is None:
            response: dict[str, Any] = {"ok": False, "error": "bad_request", "message": "request too long"}
        elif not line.strip():
            continue
        else:
            try:
                response = asyncio.run_coroutine_threadsafe(channel.handle_line(line), loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):  # the loop stopped under us
                return
        sys.stdout.write(json.dumps(response) + "\n")
        sys.stdout.flush()
    try:
        loop.call_soon_threadsafe(stop.set)
    except RuntimeError:  # the loop is already closed
        pass


async def _watch_fatal(log: MetadataLog, stop: asyncio.Event) -> None:
    while log.fatal_error() is None:  # until the node stops (this task is cancelled)
        await asyncio.sleep(FATAL_CHECK_INTERVAL)
    stop.set()


async def run_node(settings: QuorumSettings, *, control: bool = True, api: ApiSettings | None = None,
                   stop: asyncio.Event | None = None) -> int:
    """Run one voter (and its HTTP API) until SIGTERM/SIGINT, end of stdin or a fatal metadata-log error.

    With `stop` given the caller owns the signals (a combined node stops its broker first) and
    the voter runs until `stop` is set or a fatal error.
    """
    from quorum.controller_server import (
        ControllerServer,  # aiohttp only where the API runs
    )
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    voters = ",".join(f"{i}@{v.address}" for i, v in settings.voters.items())
    log = MetadataLog(settings)  # blocks briefly: derives the key, binds the listener
    if api is not None:  # KIP-853: voters added later are routed to like the static ones
        api = live_settings(api, log.voter_set)
    logger.info("Controller %d started: quorum listener %s, voters %s, metadata log dir %s",
                settings.node_id, settings.me.address, voters, settings.data_dir)
    # the BeginEpoch chunk also finalizes the features of a log that has none (quorum.feature_bootstrap)
    controller = ActiveController(FeatureBootstrapLog(log, min_insync_replicas=1 if api is None
                                                      else api.min_insync_replicas))
    tasks = [asyncio.create_task(controller.run(), name="active-controller"),
             asyncio.create_task(_watch_fatal(log, stop), name="fatal-watch")]
    server = None if api is None else ControllerServer(log, controller, api)
    try:
        if server is not None:
            await server.start()
        if control:
            threading.Thread(target=_serve_stdin, args=(ControlChannel(log, controller), loop, stop),
                             name="control-channel", daemon=True).start()
        await stop.wait()
    finally:
        logger.info("Stopping controller %d", settings.node_id)
        if server is not None:  # first: no new decisions while the controller stops
            await server.stop()
        await cancel_and_wait(tasks, owner=f"Controller {settings.node_id}")
        log.close()
    fatal = log.fatal_error()
    logger.info("Controller %d stopped%s", settings.node_id,
                f" after a fatal error: {fatal}" if fatal else "")
    return 1 if fatal else 0


def run(config_path: str, *, control: bool, require_api: bool) -> int:
    """Parse the config, set up logging, run the node; the process exit status."""
    try:
        config = parse_config(load_properties(config_path))
        roles = config["process.roles"]
        if not isinstance(roles, tuple) or "controller" not in roles:
            raise ConfigError("config 'process.roles' must contain controller to run a controller")
        settings = QuorumSettings.from_config(config)
        api = ApiSettings.from_config(config, settings)
        if api is None and require_api:
            raise ConfigError("config 'controller.listener' (host:port of the HTTP API) must be set "
                              "to run a controller")
        from common.preflight import check_node  # (issue 30) peers that disagree: refuse to start
        check_node(config, role="controller")
    except ConfigError as exc:
        print(f"controller: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.node_id, "controller")
    raise_open_file_limit(f"Controller {settings.node_id}")  # clients and peers are sockets
    try:
        return asyncio.run(run_node(settings, control=control, api=api))
    # OSError: the HTTP listener cannot bind; ConfigError: controller.rpc.secret.file unreadable
    except (QuorumBindError, ImportError, OSError, ConfigError) as exc:
        logger.error("Controller %d cannot start: %s", settings.node_id, exc)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m quorum.node`."""
    parser = argparse.ArgumentParser(prog="python -m quorum.node", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="server.properties of this controller")
    parser.add_argument("--no-control", action="store_true", help="do not read control requests from stdin")
    args = parser.parse_args(argv)
    return run(args.config, control=not args.no_control, require_api=False)


if __name__ == "__main__":
    sys.exit(main())
