"""The pytest plugin: a real tidelog cluster per test session, topics per test.

`pytest --tidelog-reuse` keeps the clusters running after the run for the next one of the same
shape (tidelog.testing.reuse): an edit-test loop pays the start once.

Installing tidelog registers it (the `pytest11` entry point); `-p tidelog.testing.plugin` loads it
by hand. Fixtures:

    tidelog_cluster     session: a started tidelog.testing.Cluster (fault helpers included)
    tidelog_bootstrap   session: its bootstrap.servers string (the PLAINTEXT listener)
    tidelog_client_config  session: a confluent-kafka config dict (the secured listener, if any)
    tidelog_topic       function: a factory, tidelog_topic(partitions=1, replication_factor=None,
                        configs=None, name=None) -> a new topic's name; deleted after the test

The cluster's shape comes from the ini options (`tidelog_brokers`, `tidelog_controllers`,
`tidelog_combined`, `tidelog_broker_config`, `tidelog_topic_config`), overridden per test, class
or module by a marker:

    @pytest.mark.tidelog(brokers=1, combined=True, broker_config={"num.partitions": 3})
    @pytest.mark.tidelog(brokers=3, racks=3)   # brokers in rack-1, rack-2, rack-3 (broker.rack)
    @pytest.mark.tidelog(power_loss=True)      # the power-loss layer under every node: power_loss(node)
    @pytest.mark.tidelog(security="SASL_SSL")  # or SSL, SASL_PLAINTEXT: a secured listener on every
                        # broker, its CA, certificates and user made for the session's cluster;
                        # connect with tidelog_client_config (confluent-kafka) or
                        # tidelog_cluster.python_client_config() (kafka-python, aiokafka)

A marked test gets its cluster through a session-scoped indirect parameter, so pytest starts one
cluster per distinct shape, groups the tests that share it, and keeps only one running at a time.
After a test that broke the cluster (a fault helper, or a node that died), the cluster is recovered
before the next test: every node back, every ISR full; a node that died on its own fails that
test's teardown with its log. Each pytest-xdist worker is its own session: its own cluster, free
ports and data dir.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import pytest

from tidelog.testing.cluster import READY_TIMEOUT, Cluster, ClusterSpec
from tidelog.testing.reuse import DEFAULT_IDLE_MINUTES
from tidelog.testing.zygote import Zygote
from common.limits import MAX_TOPIC_NAME_LENGTH

MARKER = "tidelog"
_ILLEGAL_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._-]+")
_interned: dict[ClusterSpec, ClusterSpec] = {}  # pytest compares session params by identity


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tidelog", "tidelog test cluster")
    parser.addini("tidelog_brokers", "brokers (Kafka listeners) of the test cluster (default 3)", default="3")
    parser.addini("tidelog_controllers", "controllers (quorum voters); default 3, or min(brokers, 3) combined",
                  default="")
    parser.addini("tidelog_combined", "combined mode: controllers run inside brokers (default false)",
                  type="bool", default=False)
    parser.addini("tidelog_broker_config", "key=value lines for every node's server.properties",
                  type="linelist", default=[])
    parser.addini("tidelog_topic_config", "key=value lines every tidelog_topic gets unless it says otherwise",
                  type="linelist", default=[])
    group.addoption("--tidelog-ready-timeout", type=float, default=READY_TIMEOUT,
                    help=f"seconds a test cluster may take to start (default {READY_TIMEOUT:.0f})")
    group.addoption("--tidelog-reuse", action="store_true", default=False,
                    help="keep the session's clusters running after the run and use them again in the next "
                         "run of the same shape (cleaned: faults undone, topics deleted); stopped after "
                         "tidelog_reuse_idle_minutes without a run")
    parser.addini("tidelog_fast_start", "fork the test clusters' nodes from one process that imported their "
                  "modules once (tidelog.testing.zygote; default true)", type="bool", default=True)
    parser.addini("tidelog_reuse_idle_minutes", "with --tidelog-reuse: minutes a kept cluster may stay unused "
                  f"before its watchdog stops it (default {DEFAULT_IDLE_MINUTES:g})",
                  default=str(DEFAULT_IDLE_MINUTES))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(brokers=3, controllers=None, combined=False, broker_config=None, topic_config=None, "
        "racks=0, power_loss=False, security=None): "
        "the shape and configs of the tidelog cluster this test runs against (default: the tidelog_* ini options)")


def _pairs(lines: list[str], option: str) -> dict[str, str]:
    config = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"{option}: {line!r} is not key=value")
        config[key.strip()] = value.strip()
    return config


def ini_spec(config: pytest.Config) -> ClusterSpec:
    controllers = str(config.getini("tidelog_controllers")).strip()
    try:
        spec = ClusterSpec.of(int(config.getini("tidelog_brokers")), int(controllers) if controllers else None,
                              bool(config.getini("tidelog_combined")),
                              _pairs(config.getini("tidelog_broker_config"), "tidelog_broker_config"),
                              _pairs(config.getini("tidelog_topic_config"), "tidelog_topic_config"))
    except ValueError as exc:
        raise pytest.UsageError(f"tidelog ini options: {exc}") from None
    return _interned.setdefault(spec, spec)


def marker_spec(marker: pytest.Mark, default: ClusterSpec) -> ClusterSpec:
    if marker.args:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keyword arguments only, got {marker.args!r}")
    fields: dict[str, Any] = {"brokers": default.brokers, "controllers": default.controllers, "combined": default.combined,
              "broker_config": dict(default.broker_config), "topic_config": dict(default.topic_config),
              "racks": default.racks, "power_loss": default.power_loss, "security": default.security}
    unknown = set(marker.kwargs) - set(fields)
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: unknown argument(s) {sorted(unknown)}; "
                                f"known: {sorted(fields)}")
    fields.update(marker.kwargs)
    try:
        spec = ClusterSpec.of(**fields)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}({marker.kwargs}): {exc}") from None
    return _interned.setdefault(spec, spec)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run with tests on a cluster starts the zygote now: its imports overlap the run's start
    instead of delaying the first cluster."""
    if session.config.getini("tidelog_fast_start") and any(
            "tidelog_cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        Zygote.shared()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Every session cluster is stopped by now: end the zygote (its stdin's EOF would, at exit)."""
    if Zygote._shared is not None:
        Zygote._shared.close()
        Zygote._shared = None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tidelog_cluster" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    default = ini_spec(metafunc.config)
    spec = marker_spec(marker, default)
    if spec is not default:
        metafunc.parametrize("tidelog_cluster", [spec], indirect=True, scope="session", ids=[spec.id])


@pytest.fixture(scope="session")
def tidelog_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A running tidelog cluster for the session (one per marker shape); stopped at the end."""
    spec: ClusterSpec = getattr(request, "param", None) or ini_spec(request.config)
    cluster = Cluster(spec.brokers, controllers=spec.controllers, combined=spec.combined,
                      broker_config=dict(spec.broker_config), topic_config=dict(spec.topic_config),
                      racks=spec.racks, power_loss=spec.power_loss, security=spec.security,
                      base_dir=tmp_path_factory.getbasetemp(),
                      ready_timeout=request.config.getoption("--tidelog-ready-timeout"),
                      reuse_idle_minutes=reuse_idle_minutes(request.config),
                      fast_start=bool(request.config.getini("tidelog_fast_start")))
    with cluster:
        yield cluster


def reuse_idle_minutes(config: pytest.Config) -> float | None:
    """None without --tidelog-reuse; else the ini option's minutes (> 0)."""
    if not config.getoption("--tidelog-reuse"):
        return None
    raw = str(config.getini("tidelog_reuse_idle_minutes")).strip()
    try:
        minutes = float(raw)
    except ValueError:
        minutes = -1.0
    if not minutes > 0:
        raise pytest.UsageError(f"tidelog_reuse_idle_minutes: {raw!r} is not a number of minutes > 0")
    return minutes


@pytest.fixture(scope="session")
def tidelog_bootstrap(tidelog_cluster: Cluster) -> str:
    """bootstrap.servers of the session's cluster: "127.0.0.4:port,..."."""
    return tidelog_cluster.bootstrap_servers


@pytest.fixture(scope="session")
def tidelog_client_config(tidelog_cluster: Cluster) -> dict[str, str]:
    """A confluent-kafka config for the session's cluster: bootstrap.servers naming its secured
    listener with the security settings when the marker asks for `security`, else the PLAINTEXT one."""
    return tidelog_cluster.client_config()


@pytest.fixture(autouse=True)
def _tidelog_recover(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the cluster: undo its faults so the next test starts on a healthy cluster."""
    if "tidelog_cluster" not in request.fixturenames:
        yield
        return
    cluster: Cluster = request.getfixturevalue("tidelog_cluster")
    yield
    cluster.recover()


def topic_name(node_name: str, serial: int) -> str:
    """A legal, unique-per-session Kafka topic name from a test's name."""
    base = _ILLEGAL_TOPIC_CHARS.sub("-", node_name).strip("-.") or "topic"
    suffix = f"-{serial}"
    return base[:MAX_TOPIC_NAME_LENGTH - len(suffix)] + suffix


_serial = iter(range(1, 2**62))


@pytest.fixture
def tidelog_topic(tidelog_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """A factory of topics on the session's cluster, each deleted after the test."""
    created: list[str] = []

    def make(partitions: int = 1, replication_factor: int | None = None,
             configs: Mapping[str, Any] | None = None, name: str | None = None) -> str:
        topic = name or topic_name(request.node.name, next(_serial))
        tidelog_cluster.create_topic(topic, partitions, replication_factor, configs)
        created.append(topic)
        return topic

    yield make
    tidelog_cluster.recover()  # a test that killed the controllers must not fail the deletes
    for topic in created:
        tidelog_cluster.delete_topic(topic)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                               ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test on the cluster gets a "tidelog nodes" section: the end of every node's log."""
    report: pytest.TestReport = yield
    if report.failed and "tidelog_cluster" in getattr(item, "fixturenames", ()):
        cluster = getattr(item, "funcargs", {}).get("tidelog_cluster")
        if isinstance(cluster, Cluster) and cluster.running:
            report.sections.append(("tidelog nodes", cluster.log_tails(lines=15)))
    return report
