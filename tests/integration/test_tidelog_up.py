"""`tidelog up` / `tidelog down` through the real CLI, each a subprocess, on 127.0.0.1-3.

Detached: up → READY → cluster.json names three live controllers whose admin API has an
active controller → a topic is created → down leaves no process (no pid of cluster.json, and
no process at all whose command line names the data dir: no orphan) → up again brings back
the same cluster id, password and topic → down. The default shape (3 controllers + 3
brokers) comes READY with every field of cluster.json filled in, and down stops all six. Foreground: up until READY, SIGINT, exit 0, no
node left. A SIGKILLed broker of a detached cluster: `up --detach` starts it alone, says so, and
leaves the running nodes (and a process that took the dead broker's pid) untouched. Taken ports: a clear error and nothing started. The time to READY is printed,
never asserted. Teardown SIGKILLs every node pid the test ever saw, whatever happened.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import msgpack
import pytest

from localcluster.cluster_layout import RPC_SECRET_FILE
from security.rpc_secret import cluster_signer, signed_headers
from tests.integration.cli_cluster import CLI_TIMEOUT_S, GONE_TIMEOUT_S, REPO
from tests.integration.cli_cluster import CliCluster as Cluster
from tests.integration.cluster_fixtures import alive, processes_mentioning
from tests.integration.cluster_fixtures import wait_until as shared_wait_until

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
WAIT_S = 15.0
HTTP_TIMEOUT_S = 5.0
POLL_S = 0.05
BROKER_ID = 4
BROKER_HOST = "127.0.0.4"
NOT_CONTROLLER = 41


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():  # measurements belong in the test output even when it passes
        print(f"\n[tidelog up measurement] {line}")


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """The shared bounded poll, with this module's default timeout and interval."""
    return shared_wait_until(what, condition, timeout_s, poll_s=POLL_S)


def http(url: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def rpc(url: str, name: str, body: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """One broker RPC as broker BROKER_ID, signed with the data dir's RPC secret (issue 29)."""
    data = msgpack.packb(body)
    proof = signed_headers(cluster_signer(data_dir / RPC_SECRET_FILE, BROKER_ID), url.removeprefix("http://"),
                           f"/rpc/{name}", data)
    request = urllib.request.Request(f"{url}/rpc/{name}", data=data, method="POST",
                                     headers={"Content-Type": "application/x-msgpack", **proof})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return msgpack.unpackb(answer.read())
    except urllib.error.HTTPError as exc:
        return msgpack.unpackb(exc.read())


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[Callable[[str], Cluster]]:
    made: list[Cluster] = []

    def make(name: str, hosts: tuple[str, ...] = (*HOSTS, BROKER_HOST)) -> Cluster:
        made.append(Cluster(tmp_path / name, hosts))
        return made[-1]

    try:
        yield make
    finally:
        for cluster in made:  # even when the test failed half-way
            cluster.cleanup()


def up_detached(cluster: Cluster, capsys: pytest.CaptureFixture[str], what: str) -> tuple[dict[str, Any], str]:
    started = time.monotonic()
    done = cluster.run(*cluster.up_args(), "--brokers", "0", "--detach")  # the test registers broker 4 itself
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    ready = [line for line in done.stdout.splitlines() if line.startswith("READY ")]
    assert len(ready) == 1, done.stdout
    report(capsys, f"{what}: `tidelog up --detach` printed READY and returned after {elapsed:.2f} s")
    assert "brokers: none (--brokers 0)" in done.stdout
    return cluster.layout(), ready[0]


def check_running(cluster: Cluster, document: dict[str, Any], ready: str) -> str:
    """Three live controllers on their own addresses, agreeing on one active controller; its admin URL."""
    nodes = document["nodes"]
    assert [(n["id"], n["role"], n["host"]) for n in nodes] == [
        (i, "controller", host) for i, host in enumerate(HOSTS, start=1)]
    assert all(alive(n["pid"]) for n in nodes), nodes
    assert ready == f"READY bootstrap=none admin={document['admin_url']}"
    for n in nodes:
        assert n["admin_url"] == f"http://{n['host']}:{cluster.admin_port}" and n["raft_port"] == cluster.raft_port
        assert Path(n["log_file"]).is_file() and Path(n["data_dir"]).is_dir()
    views = [http(f"{n['admin_url']}/v1/cluster")[1] for n in nodes]
    assert {v["cluster_id"] for v in views} == {document["cluster_id"]}
    active = {v["active_controller"] for v in views}
    assert len(active) == 1 and None not in active, views
    return next(n["admin_url"] for n in nodes if n["id"] in active)


def create_topic(active_url: str, name: str, data_dir: Path) -> None:
    """A topic needs an unfenced broker: register one through the broker RPCs, heartbeat, create."""
    registered = rpc(active_url, "broker-registration", {
        "broker_id": BROKER_ID, "incarnation_id": f"up-test-{time.time_ns()}",
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.4", "port": 9092}], "rack": None}, data_dir)
    assert registered["error_code"] == 0, registered
    epoch = registered["broker_epoch"]

    def unfenced() -> bool:
        offset = rpc(active_url, "metadata-fetch", {"offset": 0, "max_records": 1}, data_dir)["last_offset"]
        beat = rpc(active_url, "broker-heartbeat", {
            "broker_id": BROKER_ID, "broker_epoch": epoch, "current_metadata_offset": offset,
            "want_fence": False, "want_shut_down": False}, data_dir)
        assert beat["error_code"] == 0, beat
        return not beat["is_fenced"]
    wait_until("the test broker unfenced", unfenced)
    status, created = http(f"{active_url}/v1/topics", "POST",
                           {"name": name, "partitions": 2, "replication_factor": 1})
    assert status == 201, created


def down(cluster: Cluster) -> None:
    pids = [n["pid"] for n in cluster.layout()["nodes"]]
    done = cluster.run("down")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": stopped") == len(pids), done.stdout
    wait_until("every node process gone", lambda: not any(alive(pid) for pid in pids), GONE_TIMEOUT_S)
    wait_until("no orphan process of the data dir", lambda: not processes_mentioning(str(cluster.data_dir)),
               GONE_TIMEOUT_S)
    assert all(n["pid"] is None for n in cluster.layout()["nodes"])


def test_up_detached_down_and_restart(clusters: Callable[[str], Cluster],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    cluster = clusters("detached")
    first, ready = up_detached(cluster, capsys, "first start")
    active_url = check_running(cluster, first, ready)
    password_file = cluster.data_dir / "quorum.password"
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    for n in first["nodes"]:  # each holds the password too
        assert stat.S_IMODE((Path(n["data_dir"]) / "server.properties").stat().st_mode) == 0o600
    password = password_file.read_text()
    create_topic(active_url, "kept", cluster.data_dir)
    down(cluster)

    again, ready = up_detached(cluster, capsys, "restart")
    assert again["cluster_id"] == first["cluster_id"] and password_file.read_text() == password
    assert not set(n["pid"] for n in again["nodes"]) & set(n["pid"] for n in first["nodes"])
    check_running(cluster, again, ready)
    for n in again["nodes"]:
        topic = wait_until(f"topic 'kept' on controller {n['id']}", lambda: (
            lambda answer: answer[1] if answer[0] == 200 else None)(http(f"{n['admin_url']}/v1/topics/kept")))
        assert len(topic["partitions"]) == 2
    refused = cluster.run(*cluster.up_args(), "--detach")
    assert refused.returncode == 1 and "already running" in refused.stderr, refused.stderr
    down(cluster)


def test_up_foreground_stops_on_sigint(clusters: Callable[[str], Cluster],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    cluster = clusters("foreground")
    started = time.monotonic()
    cluster.foreground = subprocess.Popen(cluster.command(*cluster.up_args(), "--brokers", "1"), cwd=REPO,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read(out: IO[str]) -> None:
        for line in out:  # until up's stdout closes
            lines.put(line)
    assert cluster.foreground.stdout is not None
    threading.Thread(target=read, args=(cluster.foreground.stdout,), daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while not any(line.startswith("Press Ctrl-C") for line in seen):  # bounded by the deadline
        seen.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
    report(capsys, f"foreground `tidelog up` printed READY after {time.monotonic() - started:.2f} s")
    bootstrap = f"{BROKER_HOST}:{cluster.kafka_port}"
    assert any(line.startswith(f"READY bootstrap={bootstrap} admin=http://") for line in seen), seen
    document = cluster.layout()
    assert document["bootstrap_servers"] == bootstrap
    assert [(n["id"], n["role"]) for n in document["nodes"]] == [
        (1, "controller"), (2, "controller"), (3, "controller"), (4, "broker")]
    _, brokers = http(f"{document['admin_url']}/v1/brokers")
    assert [(b["broker_id"], b["fenced"]) for b in brokers] == [(BROKER_ID, False)], brokers
    pids = [n["pid"] for n in document["nodes"]]
    assert len(pids) == 4 and all(alive(pid) for pid in pids)

    cluster.foreground.send_signal(signal.SIGINT)
    assert cluster.foreground.wait(CLI_TIMEOUT_S) == 0
    wait_until("every node process gone", lambda: not any(alive(pid) for pid in pids), GONE_TIMEOUT_S)


def test_up_refuses_taken_ports(clusters: Callable[[str], Cluster]) -> None:
    cluster = clusters("taken")
    with socket.socket() as squatter:
        squatter.bind((HOSTS[1], cluster.admin_port))
        squatter.listen()
        done = cluster.run(*cluster.up_args(), "--detach")
    assert done.returncode == 1
    assert f"{HOSTS[1]}:{cluster.admin_port} (admin API of controller 2) is in use" in done.stderr, done.stderr
    assert not (cluster.data_dir / "cluster.json").exists()
    assert not (cluster.data_dir / "quorum.password").exists()


def test_up_default_shape_writes_every_field_and_down_leaves_nothing(
        clusters: Callable[..., Cluster], capsys: pytest.CaptureFixture[str]) -> None:
    cluster = clusters("default-shape", tuple(f"127.0.0.{n}" for n in range(1, 7)))
    started = time.monotonic()
    done = cluster.run(*cluster.up_args(), "--detach")  # 3 controllers + 3 brokers
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    report(capsys, f"3 controllers + 3 brokers: `tidelog up --detach` printed READY and returned after {elapsed:.2f} s")
    document = cluster.layout()
    brokers = ",".join(f"127.0.0.{n}:{cluster.kafka_port}" for n in (4, 5, 6))
    assert f"READY bootstrap={brokers} admin=http://127.0.0.1:{cluster.admin_port}" in done.stdout.splitlines()
    assert document["cluster_id"] and document["bootstrap_servers"] == brokers
    assert [(n["id"], n["role"], n["host"]) for n in document["nodes"]] == [
        (i, "controller" if i <= 3 else "broker", f"127.0.0.{i}") for i in range(1, 7)]
    for n in document["nodes"]:
        common = {"pid", "data_dir", "log_file", "config_file"}
        ports = {"raft_port", "admin_port", "admin_url"} if n["role"] == "controller" else {
            "kafka_port", "metrics_port", "bootstrap", "metrics_url"}
        assert all(n.get(key) is not None for key in common | ports), n
        assert alive(n["pid"]) and Path(n["log_file"]).is_file() and Path(n["data_dir"]).is_dir()
    _, listed = http(f"{document['admin_url']}/v1/brokers")
    assert [(b["broker_id"], b["state"]) for b in listed] == [(i, "UNFENCED") for i in (4, 5, 6)]
    down(cluster)


def test_broker_config_option_sets_what_the_brokers_run_with(clusters: Callable[[str], Cluster]) -> None:
    """`tidelog up --broker-config num.partitions=3`: an auto-created topic gets 3 partitions; a
    restart without the option keeps it; a bad key is refused naming it, and nothing starts."""
    from confluent_kafka.admin import AdminClient

    cluster = clusters("broker-config")
    refused = cluster.run(*cluster.up_args(), "--controllers", "1", "--brokers", "1", "--detach",
                          "--broker-config", "num.partitons=3")
    assert refused.returncode == 1 and "'num.partitons'" in refused.stderr and "--broker-config" in refused.stderr, \
        refused.stderr
    assert not processes_mentioning(str(cluster.data_dir))
    for extra in (["--broker-config", "num.partitions=3", "--controller-config", "broker.session.timeout.ms=8000"],
                  []):  # the second start keeps what the first one set
        done = cluster.run(*cluster.up_args(), "--controllers", "1", "--brokers", "1", "--detach", *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        bootstrap = cluster.layout()["bootstrap_servers"]
        topic = f"auto-{len(extra)}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(f"{topic} auto-created", lambda t=topic: admin.list_topics(t, timeout=5).topics[t].error is None)
        assert len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == 3
        down(cluster)
    broker_file = next(Path(n["config_file"]) for n in cluster.layout()["nodes"] if n["role"] == "broker")
    assert broker_file.read_text().count("num.partitions=3") == 1


def test_up_detached_starts_the_one_killed_node(clusters: Callable[[str], Cluster],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """As `docker compose up`: a SIGKILLed broker comes back, named; the others keep their pids;
    `already running` only once every node runs; a recycled pid is no proof of life."""
    cluster = clusters("restart-one")
    done = cluster.run(*cluster.up_args(), "--controllers", "1", "--brokers", "2", "--detach")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "was not running" not in done.stdout  # a first start names no node
    before = {n["id"]: n["pid"] for n in cluster.layout()["nodes"]}
    assert sorted(before) == [1, 2, 3] and all(alive(pid) for pid in before.values())

    def incarnation_of_3() -> str:
        _, brokers = http(f"{cluster.layout()['admin_url']}/v1/brokers")
        return str(next(b["incarnation_id"] for b in brokers if b["broker_id"] == 3))

    def restart_broker_3(what: str) -> dict[int, int]:
        killed_incarnation = incarnation_of_3()  # still registered: its session has not expired
        started = time.monotonic()
        done = cluster.run(*cluster.up_args(), "--detach")
        assert done.returncode == 0, done.stdout + done.stderr
        report(capsys, f"{what}: `tidelog up --detach` restarted broker 3 in {time.monotonic() - started:.2f} s")
        pids = {n["id"]: n["pid"] for n in cluster.layout()["nodes"]}
        lines = done.stdout.splitlines()
        assert f"node 3 (broker) was not running: started (pid {pids[3]})" in lines, done.stdout
        for node_id, role in ((1, "controller"), (2, "broker")):
            assert f"node {node_id} ({role}) is running (pid {before[node_id]}): left as it is" in lines, done.stdout
        assert any(line.startswith("READY bootstrap=") for line in lines) and "already running" not in done.stdout
        assert pids[1] == before[1] and pids[2] == before[2] and pids[3] != before[3]
        assert all(alive(pid) for pid in pids.values())
        _, brokers = http(f"{cluster.layout()['admin_url']}/v1/brokers")
        assert [(b["broker_id"], b["state"]) for b in brokers] == [(2, "UNFENCED"), (3, "UNFENCED")], brokers
        assert incarnation_of_3() != killed_incarnation  # READY waited for the new process's registration
        return pids

    os.killpg(before[3], signal.SIGKILL)
    wait_until("broker 3 gone", lambda: not alive(before[3]), GONE_TIMEOUT_S)
    after = restart_broker_3("SIGKILLed broker")
    refused = cluster.run(*cluster.up_args(), "--detach")  # now every node runs
    assert refused.returncode == 1 and "already running" in refused.stderr, refused.stdout + refused.stderr

    # a dead broker whose recorded pid now belongs to another process: that process is not the
    # node (its command line names no server.properties of this data dir), so it is started
    # and the other process is left alone
    os.killpg(after[3], signal.SIGKILL)
    wait_until("broker 3 gone again", lambda: not alive(after[3]), GONE_TIMEOUT_S)
    decoy = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        document = cluster.layout()
        next(n for n in document["nodes"] if n["id"] == 3)["pid"] = decoy.pid
        (cluster.data_dir / "cluster.json").write_text(json.dumps(document))
        before = {**after, 3: decoy.pid}
        restart_broker_3("broker 3's pid recycled")
        assert decoy.poll() is None  # never signalled
    finally:
        decoy.kill()
        decoy.wait(GONE_TIMEOUT_S)
    down(cluster)
