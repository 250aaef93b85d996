"""The pytest plugin, tested as its users meet it: small test suites run by pytester in a subprocess
against real clusters.

Each case checks one promise of issue 16: the fixtures work (ini options and markers shape the
cluster), topics are deleted after their test, every xdist worker has its own cluster, a node that
cannot start or dies mid-test shows its log, isolate skips with a reason, and a session that is
interrupted (Ctrl-C) or killed (SIGKILL) leaves no node process and no data dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cluster_fixtures import processes_mentioning, wait_until

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ("-p", "tidelog.testing.plugin")
ONE_NODE = "[pytest]\ntidelog_brokers = 1\ntidelog_combined = true\n"  # the fastest cluster: one process


@pytest.fixture(autouse=True)
def _sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner pytest and its nodes import this checkout's tidelog."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *args, timeout=240)


def no_node_left(base: Path) -> None:
    """No process mentions a path under `base`, and no tidelog data dir is left there."""
    assert processes_mentioning(str(base)) == []
    assert list(base.rglob("tidelog-*")) == []


def test_fixtures_ini_options_and_markers(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntidelog_brokers = 2\ntidelog_controllers = 1\n"
                     "tidelog_topic_config =\n    retention.ms=3600000\n")
    pytester.makepyfile(test_inner="""
        import pytest
        from confluent_kafka import Consumer, Producer, TopicPartition

        def test_produce_consume(tidelog_cluster, tidelog_bootstrap, tidelog_topic):
            assert tidelog_cluster.broker_ids == [2, 3] and tidelog_cluster.controller_ids == [1]
            assert tidelog_bootstrap == tidelog_cluster.bootstrap_servers
            topic = tidelog_topic(partitions=2)
            view = tidelog_cluster.local  # the launcher's cluster underneath
            from tidelog.testing.observe import admin
            described = admin(view).topic(topic)
            assert len(described["partitions"]) == 2
            assert {len(p["replicas"]) for p in described["partitions"]} == {2}  # min(3, brokers)
            assert described["configs"]["retention.ms"] == "3600000"  # tidelog_topic_config
            producer = Producer({"bootstrap.servers": tidelog_bootstrap, "acks": "all"})
            for i in range(10):
                producer.produce(topic, value=b"%d" % i, partition=i % 2)
            assert producer.flush(20) == 0
            consumer = Consumer({"bootstrap.servers": tidelog_bootstrap, "group.id": "unused",
                                 "enable.auto.commit": False})
            consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
            got = []
            for _ in range(200):
                message = consumer.poll(0.1)
                if message is not None and not message.error():
                    got.append(message.value())
                if len(got) == 10:
                    break
            consumer.close()
            assert sorted(got) == [b"%d" % i for i in range(10)]

        @pytest.mark.tidelog(brokers=1, combined=True, topic_config={"retention.bytes": 1048576})
        def test_marker(tidelog_cluster, tidelog_topic):
            assert tidelog_cluster.broker_ids == [1] and tidelog_cluster.spec.combined
            topic = tidelog_topic(replication_factor=1)
            from tidelog.testing.observe import admin
            assert admin(tidelog_cluster.local).topic(topic)["configs"]["retention.bytes"] == "1048576"

        def test_same_cluster_again(tidelog_cluster):
            assert tidelog_cluster.broker_ids == [2, 3]
    """)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_marker?1x-config? PASSED*"])
    no_node_left(pytester.path)


def test_topics_are_deleted_after_their_test(pytester: pytest.Pytester) -> None:
    pytester.makeini(ONE_NODE)
    pytester.makepyfile(test_inner="""
        import json, pathlib

        def test_a_creates(tidelog_topic):
            names = [tidelog_topic(), tidelog_topic(partitions=3, name="chosen-name")]
            pathlib.Path("created.json").write_text(json.dumps(names))

        def test_b_finds_none(tidelog_cluster):
            created = json.loads(pathlib.Path("created.json").read_text())
            assert created[0].startswith("test_a_creates-") and created[1] == "chosen-name"
            assert not set(created) & set(tidelog_cluster.topic_names())
    """)
    run(pytester).assert_outcomes(passed=2)


def test_each_xdist_worker_has_its_own_cluster(pytester: pytest.Pytester) -> None:
    pytester.makeini(ONE_NODE)
    pytester.makepyfile(test_inner="""
        import json, os, pathlib

        def test_where(tidelog_cluster, tidelog_topic):
            tidelog_topic(name="same-name-on-every-worker")  # would collide on a shared cluster
            pathlib.Path(os.environ["PYTEST_XDIST_WORKER"] + ".json").write_text(json.dumps(
                {"bootstrap": tidelog_cluster.bootstrap_servers, "data_dir": str(tidelog_cluster.data_dir)}))
    """)
    run(pytester, "-n", "2", "--dist", "each").assert_outcomes(passed=2)
    seen = [json.loads((pytester.path / f"gw{n}.json").read_text()) for n in (0, 1)]
    assert seen[0]["bootstrap"] != seen[1]["bootstrap"]
    assert seen[0]["data_dir"] != seen[1]["data_dir"]
    no_node_left(pytester.path)


def test_a_node_that_cannot_start_shows_its_log(pytester: pytest.Pytester) -> None:
    pytester.makeini(ONE_NODE + "tidelog_broker_config =\n    log.segment.bytess=1024\n")
    pytester.makepyfile(test_inner="""
        def test_needs_cluster(tidelog_bootstrap):
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ClusterStartError*did not start*",
                                 "*combined 1*exited with status*",
                                 "*unknown config 'log.segment.bytess'*did you mean 'log.segment.bytes'*"])
    no_node_left(pytester.path)


def test_a_node_dying_mid_test_fails_its_teardown_with_its_log(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntidelog_brokers = 2\ntidelog_controllers = 1\n")
    pytester.makepyfile(test_inner="""
        import os, signal, time

        def test_broker_dies(tidelog_cluster):
            broker = tidelog_cluster.node(3)
            os.kill(broker.pid, signal.SIGKILL)  # a crash: behind the fault helpers' back
            for _ in range(100):  # bounded: until it is gone, as a crash during the test would be
                if not broker.running():
                    break
                time.sleep(0.05)

        def test_next_test_has_a_healthy_cluster(tidelog_cluster):
            assert all(node.running() for node in tidelog_cluster.local.nodes)
    """)
    result = run(pytester)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*NodeCrashed: broker 3 exited on its own (now restarted)*",
                                 "*broker 3 (pid *, exited with status -9)*"])


def test_isolate_skips_with_a_reason(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no /usr/sbin: no iptables, so no network faults
    pytester.makeini(ONE_NODE)
    pytester.makepyfile(test_inner="""
        def test_cut(tidelog_cluster):
            tidelog_cluster.isolate(1)
    """)
    result = run(pytester, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*network partitions need iptables*"])


SLEEPER = """
    import json, pathlib, time

    def test_sleeps(tidelog_cluster):
        pids = [n.pid for n in tidelog_cluster.local.nodes]
        pathlib.Path("started.txt").write_text(json.dumps([str(tidelog_cluster.data_dir), pids]))
        time.sleep(120)
"""


def alive(pids: list[int]) -> list[int]:
    """The pids that are still processes (forked nodes' command lines are their zygote's: by pid)."""
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_an_interrupted_session_leaves_no_process(pytester: pytest.Pytester, sig: signal.Signals) -> None:
    pytester.makeini("[pytest]\ntidelog_brokers = 2\ntidelog_controllers = 1\n")
    pytester.makepyfile(test_inner=SLEEPER)
    inner = subprocess.Popen([sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", "test_inner.py"],
                             cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        started = pytester.path / "started.txt"
        wait_until("the inner session's cluster", lambda: started.exists() and started.read_text(), 120)
        data_dir, pids = json.loads(started.read_text())
        data_dir = Path(data_dir)
        assert len(alive(pids)) == 3  # controller, two brokers
        inner.send_signal(sig)
        inner.wait(60)
        wait_until("every node of the interrupted session gone",
                   lambda: not alive(pids) and not processes_mentioning(str(data_dir)) and not data_dir.exists(),
                   30)
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait(10)
    output = inner.stdout.read().decode(errors="replace") if inner.stdout else ""
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in output, output[-2000:]


@pytest.mark.parametrize("also_by_hand", [False, True], ids=["entry-point", "entry-point-and-p"])
def test_the_entry_point_registers_the_plugin_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                   also_by_hand: bool) -> None:
    """An installed tidelog (its pyproject's pytest11 entry point) loads the plugin, and our own
    `-p tidelog.testing.plugin` beside it registers nothing twice."""
    import tomllib

    entry_points = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    site = pytester.mkdir("site")
    dist = site / "tidelog_installed-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tidelog-installed\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ["PYTHONPATH"]]))
    pytester.makepyfile(test_inner="""
        def test_loaded(pytestconfig, request):
            assert pytestconfig.pluginmanager.has_plugin("tidelog.testing.plugin")
    """)
    args = [*PLUGIN] if also_by_hand else []
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", "--fixtures", timeout=120)
    result.stdout.fnmatch_lines(["tidelog_cluster*", "tidelog_topic*"])
    pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", timeout=120).assert_outcomes(passed=1)
