"""One broker as a process: `tidelog broker --config server.properties`.

    config (`broker.broker_settings`) → LogManager over log.dirs (recovering) → ReplicaManager
           → RequestHandler → Kafka listener (`listeners`) → GET /metrics (`broker.broker_metrics`)
           → metadata follower (register with `advertised.listeners`, heartbeat, follow the log,
             each batch of LocalReplicaChanges to ReplicaManager.apply_changes)

SIGTERM or SIGINT: controlled shutdown first. A registered broker, in whatever state (a
STARTING or RECOVERY one may already be unfenced at the controller: shutdown.broker_lifecycle),
enters PENDING_CONTROLLED_SHUTDOWN and heartbeats want_shut_down (at once, then every 50 ms)
while it keeps serving clients, until the controller has moved its leaders away and answers
should_shut_down (SHUTTING_DOWN; a fenced broker is answered at once). A broker never
registered goes straight to SHUTTING_DOWN. The wait is bounded by
`controlled.shutdown.timeout.ms`, whether or not any controller answers: past it the broker
says so in one log line and stops anyway. Then: stop the listener (in-flight requests get a
bounded grace), cancel the follower (it checkpoints its image), stop the metrics endpoint,
`log_manager.shutdown()` (flush, checkpoints, the clean-shutdown marker), "Transitioning from
SHUTTING_DOWN to SHUTDOWN.", exit 0. A fatal follower error exits 1.

After a controlled-shutdown timeout the broker exits dirty: the logs are still flushed and
closed, but no clean-shutdown marker is written, so the next start recovers its logs as
after a crash (cheap: everything below the recovery point was just fsynced) and an operator
reading the directory sees that this stop did not hand its partitions over.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Hashable
from typing import Any, Final

from broker.broker_metrics import (METRICS_PREFIX, broker_families, broker_state_families,
                                   follower_fetch_families, start_metrics, topic_families)
from broker.broker_settings import BrokerSettings
from broker.process_exit import exit_process
from broker.request_fault_hook import control_routes, token_from_config
from broker.dynamic_config import DynamicBrokerConfig, image_layers, reconfigure_on_change
from broker.follower_settings import FollowerSettings
from broker.hosted_topic_configs import checkpointed_topic_configs
from broker.log.cleaner_manager import (
    CleanerConfig,
    LogCleanerManager,
    cleaner_families,
    kill_at_fail_point_from_env,
    last_stable_offset_of,
)
from broker.log.log_manager import LogManager
from broker.log.segment_files import segment_file_families
from broker.metadata_checkpoint import load_checkpoint
from broker.metadata_follower_loop import MetadataFollower, fatal_error_summary, is_operator_matter
from broker.replica_manager import ReplicaManager
from broker.replication.fetcher_manager import ReplicaFetcherManager
from broker.replication.fetcher_state import FetcherSettings
from broker.replication.replication_quota import replication_quotas
from broker.client_security import INTER_BROKER_SECURITY, inter_broker_security
from broker.listener_security import listener_security, scram_credentials_of
from security.authorizer import ANONYMOUS
from security.sasl_server import ScramCredentials
from security.controller_tls_context import controller_client_context
from security.rpc_secret import signer_from_config
from broker.server import KafkaServer
from broker.loop_stalls import (STALL_PROBE_PERIOD_S, PauseHistogram, TailSources, stall_observer, tail_families,
                                track_gc)
from broker.startup_heap import HeapKeeper, collection_paused, heap_families, start_message_preload
from broker.timers import TimerService, wall_ms
from common.config import parse_config
from common.config_schema import Config, ConfigError, Password
from common.dynamic_config import effective_config
from common.errors import KafkaStorageError
from common.file_limits import raise_open_file_limit
from common.log_setup import setup_logging
from common.properties import load_properties
from common.prometheus import exposition
from common.protocol.primitives import ProtocolError
from common.stall_probe import StallProbe
from common.task_stop import cancel_and_wait
from common.log_config import LogConfig, from_broker_config
from common.units import SECOND_MS
from metadata.codec import Listener
from metadata.image import MetadataImage

logger = logging.getLogger("broker.node")  # not __name__: stable under -m

# The log maintenance jobs, periodic timers of the broker's timer service (Kafka's LogManager
# schedules kafka-log-flusher, kafka-log-retention and kafka-recovery-point-checkpoint alike).
FLUSH_CHECK_INTERVAL_MS: Final = 1 * SECOND_MS  # how often flush.ms is checked (Kafka: log.flush.scheduler.interval.ms)
FLUSH_TIMER: Final = ("log-maintenance", "flush")  # every FLUSH_CHECK_INTERVAL_MS
RETENTION_TIMER: Final = ("log-maintenance", "retention")  # every log.retention.check.interval.ms
CHECKPOINT_TIMER: Final = ("log-maintenance", "recovery-point-checkpoint")  # log.flush.offset.checkpoint.interval.ms



# --- the process --------------------------------------------------------------------------------


def build_handler(broker_id: int, replicas: Any, follower: MetadataFollower, advertised: Listener,
                  client: Any, config: Config, dynamic: DynamicBrokerConfig | None = None) -> Any:
    """The Kafka request handler (broker.request_handler), reading the follower's image."""
    from broker.group_coordinator.runtime import CoordinatorSettings
    from broker.request_handler import RequestHandler
    from broker.topic_admin import HttpTopicAdmin

    token = config["admin.token"]
    return RequestHandler(
        broker_id, replicas, lambda: follower.state.image, (advertised.host, advertised.port), client,
        auto_create_topics=bool(config["auto.create.topics.enable"]),
        cluster_id=None if config["cluster.id"] is None else str(config["cluster.id"]),
        listener_name=advertised.name,
        topic_admin=HttpTopicAdmin(client, token=token.value if isinstance(token, Password) else None),
        broker_config=config, group_settings=CoordinatorSettings.from_config(config),
        applied_offsets=follower.applied_offsets, dynamic_config=dynamic)


def schedule_maintenance(timers: TimerService, log_manager: LogManager, config: Config, *,
                         now_ms: Callable[[], int] = wall_ms) -> tuple[Hashable, ...]:
    """flush.ms, retention and recovery-point checkpoints as periodic timers, each at its own
    interval, until cancelled or the timer service closes; their keys. The logs' rules take
    wall time (`now_ms`: segment and record timestamps), the timers their monotonic clock."""
    def job(what: str, run: Callable[[int], object]) -> Callable[[int], None]:
        def action(_timer_ms: int) -> None:
            try:
                run(now_ms())
            except (OSError, KafkaStorageError) as exc:  # a storage error: say so and keep serving what still works
                logger.error("Log maintenance (%s) failed: %s", what, exc)
        return action

    timers.schedule_every(FLUSH_TIMER, FLUSH_CHECK_INTERVAL_MS, job("flush", log_manager.flush_due))
    timers.schedule_every(RETENTION_TIMER, config.get_int("log.retention.check.interval.ms"),
                          job("retention", log_manager.cleanup))
    keys: tuple[Hashable, ...] = (FLUSH_TIMER, RETENTION_TIMER)
    checkpoint_every = config.get_int("log.flush.offset.checkpoint.interval.ms")
    if checkpoint_every:  # 0: no periodic checkpoint
        # The pass returns once the owed leader-epoch syncs are done (their failure is this job's
        # to log); the files are written after it on the checkpoint writer's thread, which logs
        # a failed write (the file is then owed to the next pass).
        timers.schedule_every(CHECKPOINT_TIMER, checkpoint_every,
                              job("recovery-point checkpoint", lambda _now: log_manager.checkpoint()))
        keys += (CHECKPOINT_TIMER,)
    return keys


def fetcher_settings(broker_id: int, listener_name: str, config: Config, *,
                     local_host: str | None = None) -> FetcherSettings:
    """The follower fetchers' settings from Kafka's replica.* keys."""
    def key(name: str) -> int:
        return config.get_int(name)

    return FetcherSettings(broker_id, listener_name, max_wait_ms=key("replica.fetch.wait.max.ms"),
                           min_bytes=key("replica.fetch.min.bytes"),
                           partition_max_bytes=key("replica.fetch.max.bytes"),
                           response_max_bytes=key("replica.fetch.response.max.bytes"),
                           backoff_ms=key("replica.fetch.backoff.ms"),
                           socket_timeout_ms=key("replica.socket.timeout.ms"), local_host=local_host)


def _checkpointed_log_configs(settings: BrokerSettings, config: Config,
                              checkpointed: MetadataImage) -> dict[str, LogConfig]:
    """The topic configs the logs load with: the checkpointed image's (its dynamic broker
    defaults and topic overrides), as Kafka loads logs only once its metadata is known. With
    the static defaults alone, a compacted log would be recovered as a deleting one, and
    the cleaner's offset gaps in its unflushed tail taken for damage."""
    effective, _ = effective_config(config, image_layers(checkpointed, settings.node_id))  # problems: said once caught up
    return checkpointed_topic_configs(checkpointed, from_broker_config(effective))


async def run_broker(settings: BrokerSettings, config: Config) -> int:
    """Run the broker until SIGTERM/SIGINT or a fatal follower error; the exit status."""
    from broker.controller_client import ControllerClient
    from broker.replication.alter_partition_manager import AlterPartitionManager

    preload = start_message_preload()  # before the heap freeze, while the controllers are asked
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker_id = settings.node_id
    dynamic = DynamicBrokerConfig(broker_id, config)  # the effective config: server.properties + dynamic ones
    checkpointed = load_checkpoint(settings.log_dirs[0])  # read once: the logs and the follower start from it
    with collection_paused():  # no GC pass over the growing heap per few thousand logs loaded
        log_manager = LogManager(settings.log_dirs, from_broker_config(config), now_ms=wall_ms(),
                                 topic_configs=_checkpointed_log_configs(settings, config, checkpointed),
                                 open_files_max=config.get_int("log.open.files.max"))
    # The broker's one timer service, on the monotonic clock: the purgatories, the group
    # coordinator, the isr-expiration task, log maintenance and the cleaner's backoff.
    timers = TimerService(name=f"broker {broker_id}")
    tail = TailSources()  # event-loop stalls and GC pauses, on /metrics (issue 35)
    untrack_gc = track_gc(tail)
    heap = HeapKeeper(broker_id, loop)  # freezes the heap and spaces full collections once serving (issue 35)
    # started with the serving tasks
    stall_probe = StallProbe(loop, STALL_PROBE_PERIOD_S, stall_observer(tail, broker_id))
    cleaner_config = CleanerConfig.from_config(config)
    # The cleaner stops at each partition's last stable offset; a log whose partition is not
    # open yet (its producer state not rebuilt) is not cleaned at all (offset 0).
    cleaners = LogCleanerManager(log_manager, cleaner_config, now_ms=wall_ms, timers=timers,
                                 fail_point=kill_at_fail_point_from_env(),
                                 last_stable_offset=lambda tp: last_stable_offset_of(replicas, tp))
    # outgoing connections leave from the listener's own address, so chaos can cut this broker's links
    local_host = settings.listener.host if settings.listener.host not in ("", "0.0.0.0", "::") else None
    client = ControllerClient(settings.controller_addresses, liveness_timeout=settings.session_timeout_ms / 2000,
                              name=f"Broker {settings.node_id}", local_host=local_host,
                              signer=signer_from_config(config, broker_id),  # issue 29: signed RPCs
                              tls=controller_client_context(config))  # issue 29: https when configured
    follower: MetadataFollower | None = None
    alter_partition = AlterPartitionManager(
        client, broker_id, broker_epoch=lambda: -1 if follower is None else follower.state.broker_epoch)
    replicas = ReplicaManager(broker_id, log_manager, now_ms=wall_ms,
                              replica_lag_time_max_ms=config.get_int("replica.lag.time.max.ms"),
                              default_min_insync_replicas=config.get_int("min.insync.replicas"),
                              alter_partition=alter_partition, timers=timers)
    replicas.throttles.leader, replicas.throttles.follower = replication_quotas(
        broker_id, config, dynamic.reader, now_ms=wall_ms)
    reconfigure_on_change(dynamic, replicas, cleaners)
    fetchers: ReplicaFetcherManager | None = None
    servers: list[KafkaServer] = []
    metrics_runner: Any = None
    tasks: list[asyncio.Task[None]] = []
    periodic: tuple[Hashable, ...] = ()
    handler: Any = None
    fatal = False
    try:
        # The follower is built before it runs: the handler reads its image.
        late = _LateHandler()
        # brokers' connections to each other (fetchers, markers, verification) use the inter-broker
        # listener's TLS and SASL; set before any task starts, so every task inherits it
        INTER_BROKER_SECURITY.set(inter_broker_security(
            settings.security_protocols.get(settings.inter_broker_listener, "PLAINTEXT"), config,
            settings.inter_broker_listener))
        scram = scram_credentials_of(lambda: None if follower is None else follower.state.image)
        servers, advertised_all = await start_listeners(late, settings, config, scram)
        server = servers[0]  # /metrics counts the first listener's connections
        # the handler's own address and the followers' fetches: the inter-broker listener
        advertised = next(a for a in advertised_all if a.name == settings.inter_broker_listener)
        follower = MetadataFollower(
            FollowerSettings(broker_id=broker_id, incarnation_id=uuid.uuid4().hex, listeners=advertised_all,
                             log_dir=settings.log_dirs[0], heartbeat_interval_ms=settings.heartbeat_interval_ms,
                             cluster_id=settings.cluster_id, session_timeout_ms=settings.session_timeout_ms,
                             controlled_shutdown_timeout_ms=settings.controlled_shutdown_timeout_ms,
                             rack=config.get_optional_str("broker.rack")),
            client, dynamic.applied_before(replicas.apply_changes), checkpoint=checkpointed,
            failed_replicas=lambda: replicas.failed_replicas,  # reported in every heartbeat
            unfence_on_publish=False)  # _serve_when_published unfences once clients are answered
        handler = build_handler(broker_id, replicas, follower, advertised, client, config, dynamic)
        fetchers = ReplicaFetcherManager(replicas,
                                         fetcher_settings(broker_id, advertised.name, config, local_host=local_host),
                                         image=lambda: follower.state.image)
        replicas.fetchers = fetchers
        # Clients are answered only once the image is the controllers' (Kafka enables request
        # processing only after catching up): before that, Metadata would come from an empty or
        # checkpointed image and name existing topics UNKNOWN_TOPIC_OR_PARTITION with no brokers,
        # which librdkafka reports as "Local: Unknown partition" (issue 20, point 2): see
        # _serve_when_published, started with the follower below.
        if settings.metrics_address is not None:
            def render() -> str:
                return exposition([*broker_families(server.metrics, replicas.replication_gauges()),
                                   *follower_fetch_families(handler.context.follower_fetches),
                                   *topic_families(handler.context.topic_stats),
                                   *broker_state_families(follower.lifecycle.state),
                                   *handler.context.groups.metric_families(METRICS_PREFIX),
                                   *handler.context.transactions.metric_families(METRICS_PREFIX),
                                   *cleaner_families(cleaners.stats, METRICS_PREFIX),
                                   *segment_file_families(log_manager.files.stats, METRICS_PREFIX),
                                   *tail_families(tail, METRICS_PREFIX, purgatory_waits={
                                       p.name: p.waited for p in (replicas.produce_purgatory, replicas.fetch_purgatory)},
                                       follower_fetch_wait=_follower_fetch_wait(handler)),
                                   *heap_families(heap.stats, METRICS_PREFIX)])
            metrics_runner = await start_metrics(settings.metrics_address, render, control_routes(
                handler.faults, token_from_config(config), broker_id))  # request faults (issue 33)
        follower_task = asyncio.create_task(follower.run(), name="metadata-follower")
        periodic = schedule_maintenance(timers, log_manager, config)
        replicas.start_isr_expiration()
        tasks = [follower_task, asyncio.create_task(alter_partition.run(), name="alter-partition"),
                 asyncio.create_task(_serve_when_published(late, handler, follower, preload, heap),
                                     name="serve-clients")]
        stall_probe.start()
        if cleaner_config.enable:
            tasks += [asyncio.create_task(cleaners.run_worker(f"kafka-log-cleaner-thread-{i}"),
                                          name=f"log-cleaner-{i}") for i in range(cleaner_config.threads)]
        logger.info("Broker %d started: Kafka listeners %s, advertised %s, inter-broker listener %s, log dirs %s",
                    broker_id, ", ".join(f"{s.security.name if s.security else 'PLAINTEXT'}://{s.host}:{s.port}"
                                         for s in servers),
                    ", ".join(f"{a.name}://{a.host}:{a.port}" for a in advertised_all),
                    advertised.name, ", ".join(map(str, settings.log_dirs)))
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({stopper, follower_task}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if follower_task.done() and not follower_task.cancelled():
            fatal = True
            error = follower_task.exception()
            why = "cannot run" if is_operator_matter(error) else \
                "the metadata follower stopped on an unexpected error, so the broker stops"
            logger.error("Broker %d: %s: %s", broker_id, why, fatal_error_summary(error))
            logger.debug("Broker %d: the metadata follower's error in full", broker_id, exc_info=error)
        else:
            await _controlled_shutdown(follower, follower_task, settings)
    finally:
        logger.info("Stopping broker %d", broker_id)
        for listening in servers:
            await listening.stop()
        if fetchers is not None:
            await fetchers.shutdown()
        cleaners.stop()
        for key in periodic:  # log maintenance stops where its task was cancelled
            timers.cancel(key)
        replicas.stop_isr_expiration()
        await cancel_and_wait(tasks, owner=f"Broker {broker_id}")
        if handler is not None:
            await handler.close()
        timers.close()  # no periodic job runs past here
        stall_probe.stop()
        untrack_gc()
        heap.stop()
        await client.close()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        dirty = follower is not None and follower.lifecycle.controlled_shutdown_timed_out
        log_manager.shutdown(clean=not dirty)
        if follower is not None:
            follower.stopped()
    logger.info("Broker %d stopped%s", broker_id, " after a fatal error" if fatal else "")
    return 1 if fatal else 0


async def start_listeners(late: _LateHandler, settings: BrokerSettings, config: Config,
                          scram: ScramCredentials) -> tuple[list[KafkaServer], tuple[Listener, ...]]:
    """One Kafka server per listener, each with its security protocol (broker.listener_security),
    bound before the broker registers so that a port 0 listener is advertised with its real
    port; the servers and every listener's advertised address. ConfigError for a listener whose
    security cannot be set up (the servers already started are stopped)."""
    servers: list[KafkaServer] = []
    advertised: list[Listener] = []
    try:
        for listener in settings.listeners or (settings.listener,):
            protocol = settings.security_protocols.get(listener.name, "PLAINTEXT")
            security = listener_security(listener.name, protocol, config, scram)
            server = KafkaServer(late, host=listener.host or "0.0.0.0", port=listener.port,
                                 max_request_bytes=settings.max_request_bytes, security=security)
            await server.start()
            servers.append(server)
            advertised.append(next((a for a in settings.advertised_listeners if a.name == listener.name),
                                   Listener(listener.name, listener.host, server.port)))
    except BaseException:
        for server in servers:
            await server.stop()
        raise
    return servers, tuple(advertised)


async def _controlled_shutdown(follower: MetadataFollower, follower_task: asyncio.Task[None],
                               settings: BrokerSettings) -> None:
    """Ask the controller to move our leaders away and wait until the follower's lifecycle leaves
    PENDING_CONTROLLED_SHUTDOWN: should_shut_down, or its controlled.shutdown.timeout.ms deadline
    (`BrokerLifecycle.expire`, fired by the heartbeat task; this function keeps no deadline)."""
    lifecycle = follower.lifecycle
    logger.info("Broker %d (broker epoch %d): asked to stop in state %s; %s", settings.node_id,
                follower.state.broker_epoch, lifecycle.state.name,
                "asking the controller for a controlled shutdown" if lifecycle.registered
                else "not registered with the controller, so no controlled shutdown to ask for")
    follower.request_shutdown()
    if follower.shutdown_ready.is_set():
        return  # never registered (nothing to hand over), or already decided
    ready = asyncio.create_task(follower.shutdown_ready.wait(), name="controlled-shutdown-wait")
    try:  # bounded by the lifecycle's deadline, or the follower's end
        await asyncio.wait({ready, follower_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()
    if not follower.shutdown_ready.is_set():
        logger.warning("Broker %d: the metadata follower stopped during controlled shutdown; "
                       "shutting down without waiting further", settings.node_id)


def _follower_fetch_wait(handler: Any) -> PauseHistogram | None:
    sessions = handler.context.fetch_sessions
    return None if sessions is None else sessions.follower_fetch_wait


async def _serve_when_published(late: _LateHandler, handler: Any, follower: MetadataFollower,
                                preload: threading.Thread, heap: HeapKeeper) -> None:
    await follower.published.wait()  # bounded by the follower: it publishes once caught up, or the node stops
    await asyncio.to_thread(preload.join)  # bounded: ~1 s of imports, started with the broker
    heap.freeze_startup_heap()
    late.handler = handler
    logger.info("Broker %d serves clients from metadata offset %d", follower.settings.broker_id,
                follower.state.applied_offset)
    follower.ready_to_serve()


class _LateHandler:
    """The server's handler, set once the follower has published its first caught-up image: the
    listener binds first, so that a port 0 listener is advertised with its real port. Until then
    every request closes its connection (ProtocolError), and clients try another broker, as they
    do with a Kafka broker that has not enabled request processing yet."""

    handler: Any = None

    async def handle(self, header: Any, body: memoryview, client_host: str = "", principal: str = ANONYMOUS) -> Any:
        if self.handler is None:
            raise ProtocolError("the broker is still starting")
        return await self.handler.handle(header, body, client_host, principal)

    def start(self, header: Any, body: memoryview, client_host: str = "", principal: str = ANONYMOUS) -> Any:
        if self.handler is None:
            raise ProtocolError("the broker is still starting")
        return self.handler.start(header, body, client_host, principal)


def run(config_path: str) -> int:
    """Parse the config, set up logging, run the broker. Returns 2 for a refused config; once the
    broker has run, the process ends with its exit status (`exit_process`) and this never returns."""
    try:
        config = parse_config(load_properties(config_path))
        settings = BrokerSettings.from_config(config)
        signer_from_config(config, settings.node_id)  # a missing or bad RPC secret file: refuse to start
        controller_client_context(config)  # a controllers' CA that cannot be loaded: refuse to start
        from common.preflight import check_node  # (issue 30) peers that disagree: refuse to start
        check_node(config, role="broker")
    except ConfigError as exc:
        print(f"broker: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.node_id, "broker")
    raise_open_file_limit(f"Broker {settings.node_id}")  # before any log is opened
    try:
        status = asyncio.run(run_broker(settings, config))
    except (OSError, KafkaStorageError, ConfigError) as exc:  # a listener cannot bind or its TLS/SASL
        logger.error("Broker %d cannot start: %s", settings.node_id, exc)  # is wrong; a log dir is unusable
        status = 1
    # Everything a stop owes is durable by now (the logs closed, the marker written): end without
    # the interpreter freeing the heap object by object, seconds at 100,000 logs (process_exit).
    exit_process(status)
