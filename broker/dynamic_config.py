"""The one accessor of a broker's dynamically alterable configs (Kafka's DynamicBrokerConfig).

    dynamic = DynamicBrokerConfig(broker_id, static_config)
    dynamic.update(image)                          # from the metadata follower, before the replicas
    dynamic.value("log.retention.ms")              # the effective value, wherever it came from
    dynamic.add_listener(on_change)                # on_change(old, new): Configs, after each change
    follower_callback = dynamic.applied_before(replicas.apply_changes)
    reconfigure_on_change(dynamic, replicas, cleaners)   # the node's components (broker.node)
    reader = dynamic.reader("log.cleaner.backoff.ms")   # a zero-argument callable for a component

Every node applies the cluster default (BROKER "") and its own (BROKER "<id>") `Config` records
from the metadata log over its server.properties (common.dynamic_config's precedence), so a
change reaches every live broker without a restart and is there again after one (the records are
in the log and the snapshot). A listener runs on the follower's apply path, in order, once per
change; a listener that raises is logged and the others still run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from common.config_schema import Config, Value
from common.dynamic_config import (
    CLUSTER_DEFAULT,
    DynamicLayers,
    effective_config,
    usable_layers,
)
from common.log_config import from_broker_config
from common.topic_config import BrokerTopicDefaults, broker_topic_defaults, config_string
from metadata.image import MetadataImage
from metadata.records import ConfigResourceType

if TYPE_CHECKING:
    from broker.log.cleaner_manager import LogCleanerManager
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

Listener = Callable[[Config, Config], None]
NO_LAYERS: Final = DynamicLayers()


class DynamicBrokerConfig:
    """This broker's static config with the dynamic broker configs of the last applied image."""

    def __init__(self, broker_id: int, static: Config) -> None:
        self.broker_id = broker_id
        self.static = static
        self.layers = NO_LAYERS  # as stored in the image (unusable values included)
        self.usable = NO_LAYERS  # what this broker applies
        self.current = static
        self.topic_defaults: BrokerTopicDefaults = broker_topic_defaults(static)
        self._listeners: list[Listener] = []

    def value(self, key: str) -> Value:
        """The effective value of `key` (KeyError, naming a near miss, for a key no broker reads)."""
        return self.current[key]

    def reader(self, key: str) -> Callable[[], Value]:
        """A callable reading `key`'s current value: inject it into a component that must not
        import the broker (the reassignment throttles read their rates this way)."""
        self.current[key]  # fail now on a typo, not at the first read
        return lambda: self.current[key]

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def applied_before(self, on_changes: Callable[[Any, MetadataImage], Any]) -> Callable[[Any, MetadataImage], Any]:
        """The metadata follower's callback: this config follows each image first, so that
        `on_changes` (the replicas) rebuilds topic configs over the new defaults."""
        def callback(changes: Any, image: MetadataImage) -> Any:
            self.update(image)
            return on_changes(changes, image)
        return callback

    def update(self, image: MetadataImage) -> bool:
        """Apply the image's dynamic broker configs; True (and listeners called) when the
        effective config changed."""
        layers = image_layers(image, self.broker_id)
        if layers == self.layers:
            return False
        self.layers = layers
        self.usable, _ = usable_layers(layers)
        new, problems = effective_config(self.static, layers)
        for problem in problems:
            log.error("Broker %d: %s", self.broker_id, problem)
        old, self.current = self.current, new
        self.topic_defaults = broker_topic_defaults(self.static, effective=new,
                                                    cluster_default=self.usable.cluster_default,
                                                    per_broker=self.usable.per_broker)
        changed = sorted(name for name in new.definitions if new[name] != old[name])
        for name in changed:
            source = ("per-broker" if name in self.usable.per_broker else "cluster default"
                      if name in self.usable.cluster_default else "static")
            log.info("Broker %d: dynamic config %s changed from %s to %s (%s) at metadata offset %d",
                     self.broker_id, name, _shown(old[name]), _shown(new[name]), source, image.offset)
        if not changed:
            return False
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:  # one component's bug must not stop the others' update
                log.exception("Broker %d: a dynamic config listener failed", self.broker_id)
        return True


def image_layers(image: MetadataImage, broker_id: int) -> DynamicLayers:
    """The dynamic broker configs an image holds for `broker_id`: the cluster default, then its own."""
    return DynamicLayers.of(image.config(ConfigResourceType.BROKER, CLUSTER_DEFAULT),
                            image.config(ConfigResourceType.BROKER, str(broker_id)))


def reconfigure_on_change(dynamic: DynamicBrokerConfig, replicas: ReplicaManager,
                          cleaners: LogCleanerManager) -> None:
    """What a broker node applies live (Kafka's BrokerReconfigurables): the log defaults and
    min.insync.replicas of every hosted partition, and the log cleaner's backoff."""
    dynamic.add_listener(lambda old, new: replicas.set_broker_defaults(
        from_broker_config(new), new.get_int("min.insync.replicas")))
    dynamic.add_listener(lambda old, new: cleaners.reconfigure(dataclasses.replace(
        cleaners.config, backoff_ms=new.get_int("log.cleaner.backoff.ms"))))


def _shown(value: Value) -> str:
    return "null" if value is None else config_string(value)
