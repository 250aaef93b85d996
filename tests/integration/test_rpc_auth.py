"""Authenticated broker <-> controller RPCs (issue 29) against real processes.

A `tidelog up`-style cluster (one controller, two brokers; `localcluster` writes the data dir's
RPC secret and names it in every node's controller.rpc.secret.file) carries a replicated
topic that confluent-kafka produces to and consumes from. Then a process that is not a
registered broker tries, over raw HTTP, to register as a broker, heartbeat, fence one, ask for
its controlled shutdown, allocate producer ids, shrink an ISR and follow the metadata log: with
no proof, a wrong secret, a proof older than the replay window, and a valid proof of one broker
speaking for the other, the last made both by the operator's master secret and with the other
broker's own key file as `tidelog up` wrote it into that broker's directory (a compromised broker
holds only that key). Each is refused (401, or 403 for the last two) and the cluster is unchanged:
brokers, partitions and the metadata offset read the same before and after, nobody is fenced,
and the client still produces and consumes. The controller's log names the claimed and the
proven broker of each 403. Starting a controller whose admin API binds beyond loopback without
admin.token fails with a clear error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from common.properties import set_entries
from common.waiting import wait_until
from localcluster.cluster_layout import RPC_SECRET_FILE
from localcluster.launcher import LauncherError, LocalCluster, free_ports
from localcluster.rpc_keys import rpc_key_file
from security.rpc_auth import REPLAY_WINDOW_MS, RpcSigner
from security.rpc_secret import BROKER_KEY_FILE, cluster_signer, load_node_key, signed_headers
from tests.integration.cluster_fixtures import spawn_node

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]  # the controller, then the two brokers
READY_S = 60.0
HTTP_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 20.0
TOPIC = "rpc-auth"
TOKEN = "rpc-auth-admin-token"
STRANGER_ID, STRANGER_HOST = 9, "127.0.0.9"  # a broker the cluster's layout does not have
UNAUTHENTICATED, FORBIDDEN = 401, 403
CLUSTER_AUTHORIZATION_FAILED = 31
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("rpc-auth")
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=1, brokers=2, raft_port=raft, admin_port=admin, kafka_port=kafka,
                            metrics_port=metrics, ready_timeout=READY_S,
                            spawn=spawn_node) as started:  # stopped even on failure
        admin_client = confluent_admin.AdminClient({"bootstrap.servers": started.bootstrap_servers})
        admin_client.create_topics([confluent_admin.NewTopic(TOPIC, 2, 2)])[TOPIC].result(CLIENT_TIMEOUT_S)
        yield started


def get(cluster: LocalCluster, path: str) -> Any:
    with urllib.request.urlopen(f"{cluster.admin_url}{path}", timeout=HTTP_TIMEOUT_S) as answer:
        return json.loads(answer.read())


def post(cluster: LocalCluster, name: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    data = msgpack.packb(body, use_bin_type=True)
    request = urllib.request.Request(f"{cluster.admin_url}/rpc/{name}", data=data, method="POST",
                                     headers={"Content-Type": "application/x-msgpack", **headers})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return answer.status, msgpack.unpackb(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, msgpack.unpackb(exc.read())


def address(cluster: LocalCluster) -> str:
    return cluster.controllers[0].spec.admin_address


def state(cluster: LocalCluster) -> dict[str, Any]:
    """What an intruder could change: the brokers, the topic's partitions, the metadata offset."""
    brokers = [{k: v for k, v in b.items() if k != "heartbeat_age_ms"} for b in get(cluster, "/v1/brokers")]
    topic = get(cluster, f"/v1/topics/{TOPIC}")
    return {"brokers": brokers, "topic_id": topic["topic_id"], "partitions": topic["partitions"],
            "metadata_offset": get(cluster, "/v1/cluster")["metadata_offset"]}


def settled(cluster: LocalCluster) -> dict[str, Any]:
    """The state once both brokers are unfenced and every replica is in its ISR."""
    def ready() -> dict[str, Any] | None:
        now = state(cluster)
        ok = all(not b["fenced"] for b in now["brokers"]) and len(now["brokers"]) == 2 \
            and all(len(p["isr"]) == 2 for p in now["partitions"])
        return now if ok else None
    return wait_until("both brokers unfenced and every ISR full", ready, READY_S)


def round_trip(cluster: LocalCluster, tag: str) -> None:
    """confluent-kafka produces 5 records and reads them back in a group."""
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    producer = confluent_kafka.Producer({**config, "acks": "all"})
    for i in range(5):
        producer.produce(TOPIC, f"{tag}-{i}".encode(), partition=i % 2)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({**config, "group.id": f"g-{tag}", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    try:
        seen: set[bytes] = set()
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while not {f"{tag}-{i}".encode() for i in range(5)} <= seen and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.value())
    finally:
        consumer.close()
    assert {f"{tag}-{i}".encode() for i in range(5)} <= seen


def intrusions(now: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(RPC, the broker it speaks for, a body that would change the cluster if accepted)."""
    brokers = {b["broker_id"]: b for b in now["brokers"]}
    victim = max(brokers)
    epoch = brokers[victim]["broker_epoch"]
    p = now["partitions"][0]
    leader, leader_epoch = p["leader"], brokers[p["leader"]]["broker_epoch"]
    return [
        ("broker-registration", victim, {"broker_id": victim, "incarnation_id": "intruder-incarnation",
                                         "listeners": [{"name": "PLAINTEXT", "host": "10.9.9.9", "port": 9092}],
                                         "rack": None}),
        ("broker-heartbeat", victim, {"broker_id": victim, "broker_epoch": epoch, "current_metadata_offset": 0,
                                      "want_fence": True, "want_shut_down": False}),  # fence it
        ("broker-heartbeat", victim, {"broker_id": victim, "broker_epoch": epoch,
                                      "current_metadata_offset": now["metadata_offset"], "want_fence": False,
                                      "want_shut_down": True}),  # its controlled shutdown
        ("allocate-producer-ids", victim, {"broker_id": victim, "broker_epoch": epoch}),
        ("alter-partition", leader, {"broker_id": leader, "broker_epoch": leader_epoch, "topics": [{
            "topic_id": now["topic_id"], "partitions": [{
                "partition_index": p["partition"], "leader_epoch": p["leader_epoch"],
                "partition_epoch": p["partition_epoch"],
                "new_isr_with_epochs": [{"broker_id": leader, "broker_epoch": leader_epoch}]}]}]}),  # shrink the ISR
        ("metadata-fetch", victim, {"offset": 0, "broker_id": victim}),
    ]


def _proof(kind: str, cluster: LocalCluster, claimed: int, other: int, path: str, body: bytes) -> dict[str, str]:
    secret = cluster.root / RPC_SECRET_FILE
    own = cluster_signer(secret, claimed)
    assert own is not None, "localcluster writes the data dir's RPC secret"
    if kind == "no proof":
        return {}
    if kind == "wrong secret":
        return signed_headers(RpcSigner(claimed, os.urandom(32)), address(cluster), path, body)
    if kind == "outside the replay window":  # a captured request replayed later
        then = int(time.time() * 1000) - REPLAY_WINDOW_MS - 5000
        return {"Authorization": own.authorization("POST", address(cluster), path, body, now_ms=then,
                                                   nonce=os.urandom(16).hex())}
    if kind == "another broker's own key file":  # what a compromised broker `other` holds
        node = next(n for n in cluster.brokers if n.spec.node_id == other)
        return signed_headers(RpcSigner(other, load_node_key(node.spec.directory / BROKER_KEY_FILE, other)),
                              address(cluster), path, body)
    assert kind == "another broker's valid proof"
    signer = cluster_signer(secret, other)
    assert signer is not None
    return signed_headers(signer, address(cluster), path, body)


@pytest.mark.parametrize(("kind", "status"), [("no proof", UNAUTHENTICATED), ("wrong secret", UNAUTHENTICATED),
                                              ("outside the replay window", UNAUTHENTICATED),
                                              ("another broker's valid proof", FORBIDDEN),
                                              ("another broker's own key file", FORBIDDEN)])
def test_a_stranger_cannot_act_as_a_broker(cluster: LocalCluster, kind: str, status: int) -> None:
    before = settled(cluster)
    ids = [b["broker_id"] for b in before["brokers"]]
    for name, claimed, body in intrusions(before):
        other = next(i for i in ids if i != claimed)
        headers = _proof(kind, cluster, claimed, other, f"/rpc/{name}", msgpack.packb(body, use_bin_type=True))
        got, reply = post(cluster, name, body, headers)
        assert (got, reply["error_code"]) == (status, CLUSTER_AUTHORIZATION_FAILED), (name, kind, reply)
    after = state(cluster)
    assert after == before  # nothing registered, fenced, shut down, allocated or shrunk
    assert not any(b["fenced"] or b["in_controlled_shutdown"] for b in after["brokers"])
    if status == FORBIDDEN:
        log = cluster.controllers[0].spec.log_path.read_text(encoding="utf-8", errors="replace")
        victim = max(ids)
        assert f"speaks for broker {victim} but is signed as node {min(ids)}" in log


def test_a_broker_holds_its_own_key_and_not_the_master(cluster: LocalCluster) -> None:
    master = (cluster.root / RPC_SECRET_FILE).read_text().strip()
    for node in cluster.brokers:
        key_file = node.spec.directory / BROKER_KEY_FILE
        assert f"controller.rpc.secret.file={key_file}" in node.spec.properties_path.read_text()
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert all(master not in f.read_text(errors="replace") for f in node.spec.directory.rglob("*") if f.is_file())


def test_a_valid_proof_is_accepted_once(cluster: LocalCluster) -> None:
    broker = settled(cluster)["brokers"][0]["broker_id"]
    signer = cluster_signer(cluster.root / RPC_SECRET_FILE, broker)
    assert signer is not None
    body = {"offset": 0, "max_records": 1, "broker_id": broker}
    headers = signed_headers(signer, address(cluster), "/rpc/metadata-fetch", msgpack.packb(body, use_bin_type=True))
    assert post(cluster, "metadata-fetch", body, headers)[1]["error_code"] == 0
    replayed, reply = post(cluster, "metadata-fetch", body, headers)  # the same proof again, within the window
    assert (replayed, reply["error_code"]) == (UNAUTHENTICATED, CLUSTER_AUTHORIZATION_FAILED)
    assert "replayed" in reply["error_message"]


def test_the_cluster_works_with_signed_rpcs(cluster: LocalCluster) -> None:
    """The brokers sign their RPCs: they registered, stay unfenced and replicate (ISR of 2)."""
    settled(cluster)
    round_trip(cluster, "signed")
    assert settled(cluster)["metadata_offset"] >= 0


def test_an_admin_api_beyond_loopback_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    raft, admin = free_ports(["127.0.0.1"], 2)
    properties.write_text(f"node.id=1\nprocess.roles=controller\ncontroller.quorum.voters=1@127.0.0.1:{raft}\n"
                          f"controller.cluster.password=s3cret-quorum-password\n"
                          f"controller.listener=0.0.0.0:{admin}\nmetadata.log.dir={tmp_path / 'meta'}\n")
    done = subprocess.run([sys.executable, "-m", "quorum.node", "--config", str(properties)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done
    assert "binds 0.0.0.0, beyond loopback, so config 'admin.token' must be set" in done.stderr


def test_beyond_loopback_reads_need_the_token_and_a_missing_secret_is_generated(tmp_path: Path) -> None:
    """A controller on 0.0.0.0 with admin.token: GET /v1/cluster needs the token (the write rule
    alone left reads open), an unsigned RPC is refused, and the RPC secret its key names but
    which does not exist yet (a data dir from before) is generated, private, and said so."""
    raft, admin = free_ports(["127.0.0.1"], 2)
    secret = tmp_path / "rpc.secret"
    properties = tmp_path / "server.properties"
    properties.write_text(f"node.id=1\nprocess.roles=controller\ncontroller.quorum.voters=1@127.0.0.1:{raft}\n"
                          f"controller.cluster.password=s3cret-quorum-password\nadmin.token={TOKEN}\n"
                          f"controller.listener=0.0.0.0:{admin}\nmetadata.log.dir={tmp_path / 'meta'}\n"
                          f"controller.rpc.secret.file={secret}\n")
    log = tmp_path / "controller.log"
    with log.open("w") as out:
        node = subprocess.Popen([sys.executable, "-m", "quorum.node", "--config", str(properties), "--no-control"],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{admin}/v1/cluster"

        def status(headers: dict[str, str]) -> int | None:
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=HTTP_TIMEOUT_S):
                    return 200
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:  # not listening yet
                return None
        assert wait_until("the controller's API answers", lambda: status({}), READY_S) == UNAUTHENTICATED
        assert status({"Authorization": "Bearer wrong"}) == FORBIDDEN
        assert status({"Authorization": f"Bearer {TOKEN}"}) == 200
        request = urllib.request.Request(f"http://127.0.0.1:{admin}/rpc/metadata-fetch", method="POST",
                                         data=msgpack.packb({"offset": 0}),
                                         headers={"Authorization": f"Bearer {TOKEN}"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # the admin token is no broker proof
            urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)
        assert refused.value.code == UNAUTHENTICATED
        assert secret.stat().st_mode & 0o777 == 0o600 and len(bytes.fromhex(secret.read_text())) == 32
        assert f"generated the cluster's RPC secret in {secret}" in log.read_text()
    finally:
        node.terminate()
        try:
            node.wait(HTTP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()


def test_a_broker_with_another_secret_stops_with_a_clear_error(cluster: LocalCluster, tmp_path: Path) -> None:
    """A broker whose secret file holds another cluster's secret is refused at registration: it
    exits, saying so and naming the key, and the cluster does not register it."""
    before = settled(cluster)
    wrong = tmp_path / "rpc.secret"
    wrong.write_text(os.urandom(32).hex() + "\n")
    wrong.chmod(0o600)
    kafka, metrics = free_ports([STRANGER_HOST], 2)
    template = cluster.brokers[0].spec.properties_path
    listener = f"PLAINTEXT://{STRANGER_HOST}:{kafka}"
    properties = tmp_path / "server.properties"
    properties.write_text(set_entries(template.read_text(), {
        "node.id": str(STRANGER_ID), "listeners": listener, "advertised.listeners": listener,
        "log.dirs": str(tmp_path / "logs"), "metrics.listener": f"{STRANGER_HOST}:{metrics}",
        "controller.rpc.secret.file": str(wrong)}, str(properties), "a broker of another cluster's secret"))
    done = subprocess.run([sys.executable, "-m", "tidelog", "broker", "--config", str(properties)], cwd=ROOT,
                          capture_output=True, text=True, timeout=READY_S, stdin=subprocess.DEVNULL)
    assert done.returncode != 0, done
    assert "signature does not match" in done.stderr and "controller.rpc.secret.file" in done.stderr, done.stderr
    assert state(cluster)["brokers"] == before["brokers"]  # broker 9 never registered


def test_an_older_data_dir_is_upgraded_when_started_whole(tmp_path: Path) -> None:
    """A data dir whose server.properties predate RPC authentication: its next start (all stopped)
    generates the secret and names it in every node's file, and the cluster runs signed. A node
    restarted alone while the others run from old files is refused with what to do instead."""
    hosts = HOSTS[:2]
    raft, admin, kafka, metrics = free_ports(hosts, 4)
    with LocalCluster.start(tmp_path, controllers=1, brokers=1, raft_port=raft, admin_port=admin, kafka_port=kafka,
                            metrics_port=metrics, ready_timeout=READY_S, spawn=spawn_node) as first:
        pass  # stopped on exit
    secret = tmp_path / RPC_SECRET_FILE

    def make_old() -> None:  # the files as written before issue 29
        secret.unlink(missing_ok=True)
        for node in first.nodes:
            path = node.spec.properties_path
            path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                                    if not line.startswith("controller.rpc.secret.file")))
            node.spec.log_path.write_text("")
    make_old()
    with LocalCluster.start(tmp_path, ready_timeout=READY_S, spawn=spawn_node) as upgraded:  # ready: the broker registered
        assert secret.exists()
        for node in upgraded.nodes:  # a broker names its own key, derived from the new secret
            assert f"controller.rpc.secret.file={rpc_key_file(node.spec, secret)}" in \
                node.spec.properties_path.read_text()
        assert "require a proof signed with the secret" in upgraded.controllers[0].spec.log_path.read_text()
        upgraded.brokers[0].kill()
        make_old()  # as if the controller still ran from its old file
        with pytest.raises(LauncherError, match="made before broker<->controller RPC authentication.*stop the "
                                                "cluster once"):
            LocalCluster.start(tmp_path, ready_timeout=READY_S, spawn=spawn_node)
