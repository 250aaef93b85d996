"""Dynamic broker configs (KIP-226 as KRaft keeps them): which broker keys may change without a
restart, how a change is checked, and what a broker's effective config is.

    checked = check_broker_changes({"log.retention.ms": "60000"})    # canonical strings, or raises
    layers = DynamicLayers.of(cluster_default, per_broker)           # from the image's Config records
    config, problems = effective_config(static, layers)              # per-broker > default > static > Kafka's default
    entries = describe_broker_configs(static, layers, per_broker=True)   # DescribeConfigs of a BROKER

Kafka stores a dynamic broker config as a `Config` record of resource type BROKER, named after
the broker id ("4") or "" for the cluster-wide default; every node applies them from the
metadata log, so they survive restarts. Only the keys of `DYNAMIC_BROKER_KEYS` may be set that
way: the broker synonyms of the topic configs a partition's log applies (Kafka's
DynamicLogConfig.ReconfigurableConfigs, restricted to those tidelog honours live) and the
election defaults. Another known broker key is INVALID_REQUEST "Cannot update these configs
dynamically" (Kafka's ConfigAdminManager wraps DynamicBrokerConfig.validate's ConfigException
that way), as is a bare SSL key (Kafka takes those only with a listener prefix); a value of the
wrong type is INVALID_CONFIG naming the key. A key no broker knows (`cleanup.policy` for
`log.cleanup.policy`) is stored and described as Kafka does (its type unknown, so its value is
hidden), and nothing reads it: the controller logs that when it commits one (`unread_keys`).

Adding a dynamic key is one line in `_MORE_DYNAMIC_KEYS` (its ConfigKey lives in
common.config's BROKER_KEYS); a component reads it through broker.dynamic_config.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from common.config import BROKER_CHECKS, BROKER_KEYS
from common.config_schema import Config, ConfigError, ConfigType, parse_keys
from common.errors import ErrorCode, KafkaError
from common.topic_config import (
    CONFIG_TYPE_IDS,
    MIN_INSYNC_REPLICAS,
    TOPIC_CONFIGS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    UNKNOWN_CONFIG_TYPE,
    ConfigSource,
    ConfigSynonym,
    DescribedConfig,
    config_string,
    config_synonyms,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

EMPTY: Final[Mapping[str, str]] = MappingProxyType({})
CLUSTER_DEFAULT: Final = ""  # the resource name of the cluster-wide dynamic defaults

# Dynamic keys beyond the log defaults, each with the component that applies it live. One line
# per further key (its ConfigKey in common.config's BROKER_KEYS; the broker reads it through
# broker.dynamic_config's `reader(key)` or a change listener).
_MORE_DYNAMIC_KEYS: Final[tuple[str, ...]] = (
    MIN_INSYNC_REPLICAS,  # ReplicaManager's default (acks=all), the controller's ELR rules
    UNCLEAN_LEADER_ELECTION_ENABLE,  # the controller's elections (cluster default)
    "log.cleaner.backoff.ms",  # the log cleaner's idle sleep, read each pass (Kafka's LogCleaner set)
    "leader.replication.throttled.rate",  # the reassignment throttles read them on every check
    "follower.replication.throttled.rate",
)

# Kafka's per-broker-only dynamic keys (DynamicListenerConfig's SASL set): a change names a
# broker; at the cluster default it is INVALID_REQUEST. tidelog serves PLAINTEXT, so no
# component applies them: they are stored, described and kept as Kafka keeps them.
PER_BROKER_ONLY_KEYS: Final[frozenset[str]] = frozenset(
    key.name for key in BROKER_KEYS if key.name.startswith("sasl."))

# Kafka's DynamicSecurityConfigs (SslConfigs.RECONFIGURABLE_CONFIGS): settable only with a listener
# prefix (listener.name.<listener>.ssl.keystore.location), never bare.
LISTENER_SECURITY_KEYS: Final[frozenset[str]] = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates"})

# The broker keys a change applies to without a restart: every broker synonym of a topic config
# that a partition's LogConfig applies (the broker rebuilds each log's config on the change).
DYNAMIC_BROKER_KEYS: Final[frozenset[str]] = frozenset(
    [s for d in TOPIC_CONFIGS if d.log_field for s in d.broker_synonyms] + list(_MORE_DYNAMIC_KEYS)
    + list(PER_BROKER_ONLY_KEYS))

_KEYS_BY_NAME: Final = {key.name: key for key in BROKER_KEYS}
assert DYNAMIC_BROKER_KEYS <= _KEYS_BY_NAME.keys(), "a dynamic key needs its ConfigKey in BROKER_KEYS"
_DYNAMIC_KEYS: Final = tuple(_KEYS_BY_NAME[name] for name in sorted(DYNAMIC_BROKER_KEYS))
_DYNAMIC_CHECKS: Final = tuple(check for check in BROKER_CHECKS if check.needs <= DYNAMIC_BROKER_KEYS)

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: keys that say the same thing, the winning one first.
_SYNONYM_GROUPS: Final[tuple[tuple[str, ...], ...]] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
_GROUP_OF: Final = {name: group for group in _SYNONYM_GROUPS for name in group}


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker keys Kafka reports as `name`'s synonyms (itself included)."""
    group = _GROUP_OF.get(name)
    if group is None or name == "log.flush.scheduler.interval.ms":
        return (name,)  # Kafka lists the scheduler interval only as flush.interval.ms's fallback
    return group


class BrokerConfigError(KafkaError):
    """A dynamic broker config change refused: Kafka's code, why, and the key at fault."""

    def __init__(self, code: ErrorCode, message: str, key: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.key = key


def check_resource_name(name: str) -> None:
    """A BROKER resource is "" (the cluster default) or a broker id (Kafka's validateBrokerName)."""
    if name != CLUSTER_DEFAULT and not (name.isascii() and name.isdigit()):
        raise BrokerConfigError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}",
                                None)


def is_broker_key(name: str) -> bool:
    return name in _KEYS_BY_NAME


def is_list_key(name: str) -> bool:
    key = _KEYS_BY_NAME.get(name)
    return key is not None and key.type is ConfigType.LIST


def default_string(name: str) -> str | None:
    """Kafka's default of broker key `name` as a string (None: none); APPEND/SUBTRACT start here."""
    key = _KEYS_BY_NAME.get(name)
    return None if key is None or key.default is None else config_string(key.default)


def check_broker_changes(changes: Mapping[str, str | None], *, per_broker: bool = True) -> dict[str, str | None]:
    """The canonical string of each set value (None: delete) of one BROKER resource's change
    (`per_broker`: of one broker, not the cluster default); BrokerConfigError naming the first
    bad key (sorted), in Kafka's order of checks."""
    # Kafka validates the resulting properties: deleting a static key that is not set is a no-op
    # Kafka checks the listener prefix of SSL keys first: a bare ssl.keystore.location (a static
    # key of tidelog's SSL listeners) gets the listener-prefix refusal, as in Kafka
    static = sorted(name for name, value in changes.items()
                    if name in _KEYS_BY_NAME and name not in DYNAMIC_BROKER_KEYS and value is not None
                    and name not in LISTENER_SECURITY_KEYS)
    if static:
        raise BrokerConfigError(ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: "
                                + ", ".join(static), static[0])
    unprefixed = sorted(name for name in changes if name in LISTENER_SECURITY_KEYS)
    if unprefixed:
        raise BrokerConfigError(ErrorCode.INVALID_REQUEST, "These security configs can be dynamically updated "
                                "only per-listener using the listener prefix: " + ", ".join(unprefixed),
                                unprefixed[0])
    broker_only = sorted(name for name in changes if name in PER_BROKER_ONLY_KEYS)
    if broker_only and not per_broker:
        raise BrokerConfigError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                                "broker id must be specified: " + ", ".join(broker_only), broker_only[0])
    values = {name: value for name, value in changes.items() if value is not None and name in _KEYS_BY_NAME}
    try:
        parsed = parse_keys(values, _DYNAMIC_KEYS, _DYNAMIC_CHECKS)
    except ConfigError as e:
        bad = next((n for n in sorted(values) if any(repr(n) in p for p in e.problems)), None)
        raise BrokerConfigError(ErrorCode.INVALID_CONFIG, "; ".join(e.problems), bad) from None
    # a key no broker knows is kept as given: Kafka stores it (nothing parses it)
    return {name: value if value is None or name not in values else config_string(parsed.originals[name])
            for name, value in sorted(changes.items())}


def unread_keys(changes: Iterable[str]) -> list[str]:
    """The keys of a change that no broker reads (stored and described, as Kafka does), sorted."""
    return sorted(name for name in changes if name not in _KEYS_BY_NAME)


def unread_key_hint(name: str) -> str:
    """Why `name` does nothing, with the broker key it is nearest to (a typo, or a topic key)."""
    near = difflib.get_close_matches(name, DYNAMIC_BROKER_KEYS, n=1)
    if not near:
        near = [f"log.{name}"] if f"log.{name}" in DYNAMIC_BROKER_KEYS else []
    return "not a broker config" + (f" (did you mean {near[0]!r}?)" if near else "")


@dataclass(frozen=True, slots=True)
class DynamicLayers:
    """The dynamic values over a broker's static config: the cluster default, then its own."""

    cluster_default: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    per_broker: Mapping[str, str] = field(default_factory=lambda: EMPTY)

    @classmethod
    def of(cls, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]) -> DynamicLayers:
        return cls(MappingProxyType(dict(cluster_default)), MappingProxyType(dict(per_broker)))


def _usable(values: Mapping[str, str], problems: list[str], where: str) -> dict[str, str]:
    """The values a broker can apply: dynamic keys that parse (the controller checked them, but a
    record written by an older or other node must not stop this one)."""
    usable: dict[str, str] = {}
    for name, value in sorted(values.items()):
        if name not in _KEYS_BY_NAME:
            continue  # stored as Kafka stores it; nothing reads it (the controller logged that)
        if name not in DYNAMIC_BROKER_KEYS:
            problems.append(f"{where} config {name!r} is not a dynamic broker config: ignored")
            continue
        try:
            _KEYS_BY_NAME[name].parse(value)
        except ConfigError as e:
            problems.append(f"{where} config {name!r} ignored: {'; '.join(e.problems)}")
            continue
        usable[name] = value
    return usable


def usable_layers(layers: DynamicLayers) -> tuple[DynamicLayers, list[str]]:
    """`layers` without what this broker cannot apply, and why each dropped value was dropped."""
    problems: list[str] = []
    default = _usable(layers.cluster_default, problems, "cluster default")
    own = _usable(layers.per_broker, problems, "per-broker")
    return DynamicLayers.of(default, own), problems


def effective_config(static: Config, layers: DynamicLayers) -> tuple[Config, list[str]]:
    """Kafka's precedence: dynamic per-broker > dynamic cluster default > static > default. The
    layers merge as Kafka merges properties, key by key, so a static log.retention.ms still wins
    over a dynamic log.retention.hours. Unusable values are left out and reported."""
    usable, problems = usable_layers(layers)
    overrides = {**usable.cluster_default, **usable.per_broker}
    if not overrides:
        return static, problems
    try:
        return static.with_overrides(overrides), problems
    except ConfigError as e:  # a cross-key rule over static and dynamic values together
        problems.append(f"dynamic broker configs ignored: {'; '.join(e.problems)}")
        return static, problems


def _describe_unread(name: str, layers: DynamicLayers, *, per_broker: bool) -> DescribedConfig:
    """A stored key no broker knows, as Kafka's ConfigHelper shows one: its type is unknown, so
    it is treated as sensitive (value hidden), read-only, with no documentation."""
    synonyms = [ConfigSynonym(name, None, ConfigSource.DYNAMIC_BROKER_CONFIG)] \
        if per_broker and name in layers.per_broker else []
    if name in layers.cluster_default:
        synonyms.append(ConfigSynonym(name, None, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    return DescribedConfig(name, None, synonyms[0].source, tuple(synonyms), UNKNOWN_CONFIG_TYPE, None,
                           read_only=True, sensitive=True)


def describe_broker_configs(static: Config, layers: DynamicLayers, *, per_broker: bool,
                            keys: Iterable[str] | None = None) -> list[DescribedConfig]:
    """Kafka's ConfigHelper for a BROKER resource. Per broker: every key the broker reads (sorted),
    its effective value, synonyms in Kafka's order (dynamic per-broker, dynamic default, static,
    default, from the key itself on) and the source of the first. The cluster default ("") lists
    only the keys set there. read_only is "not dynamic"; a PASSWORD's value is hidden."""
    usable, _ = usable_layers(layers)
    config, _ = effective_config(static, usable)
    unread = {**{k: v for k, v in layers.cluster_default.items() if k not in _KEYS_BY_NAME},
              **({k: v for k, v in layers.per_broker.items() if k not in _KEYS_BY_NAME} if per_broker else {})}
    names = sorted([*config.definitions, *unread] if per_broker else [*usable.cluster_default, *unread])
    asked = None if keys is None else list(keys)
    if asked:  # Kafka: an empty or null list asks for every key
        names = [name for name in asked if name in names]
    own = usable.per_broker if per_broker else EMPTY
    described = []
    for name in names:
        if name in unread:
            described.append(_describe_unread(name, layers, per_broker=per_broker))
            continue
        key = config.definitions[name]
        sensitive = key.type is ConfigType.PASSWORD
        synonyms = config_synonyms(broker_synonyms(name), static, usable.cluster_default, own, name)
        if per_broker:
            raw = config[name]
            value = None if sensitive or raw is None else config_string(raw)
        else:
            value = usable.cluster_default[name]
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        described.append(DescribedConfig(name, value, source, tuple(synonyms),
                                         CONFIG_TYPE_IDS.get(key.type, UNKNOWN_CONFIG_TYPE), key.doc,
                                         read_only=name not in DYNAMIC_BROKER_KEYS, sensitive=sensitive))
    return described
