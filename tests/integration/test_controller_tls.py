"""TLS on the controllers' HTTP listener (issue 29): with `listener.name.controller.ssl.*` set (as
security_setup.controller_tls_entries writes them) a controller serves its admin API and /rpc/
over https only, brokers register, heartbeat and follow the metadata log over it (verifying the
controller against the throwaway CA), and a client without the CA or speaking plain http gets
nothing; a controller that is not the active one forwards a write to it over https. One module
cluster: three controllers and two brokers, real processes."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.waiting import wait_until
from localcluster import cluster_layout as layout
from localcluster.cluster_layout import NodeSpec, load_or_create_secrets, replace_private, resolve_layout
from localcluster.launcher import free_ports
from localcluster.node_process import NodeProcess, stop_nodes
from localcluster.rpc_keys import write_node_key
from localcluster.security_setup import TLS_DIR, controller_tls_entries
from localcluster.server_properties import properties_files
from security.controller_tls_context import client_context
from security.rpc_secret import load_or_create_secret

confluent_kafka = pytest.importorskip("confluent_kafka")

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]  # three controllers, two brokers
READY_S = 60.0
HTTP_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 20.0
TOPIC = "controller-tls"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class TlsCluster:
    root: Path
    controllers: list[NodeSpec]
    brokers: list[NodeSpec]
    context: ssl.SSLContext  # trusts the throwaway CA only

    @property
    def controller(self) -> NodeSpec:
        return self.controllers[0]

    @property
    def admin_url(self) -> str:
        return f"https://{self.controller.admin_address}"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_address for b in self.brokers)

    def get(self, path: str, node: NodeSpec | None = None) -> Any:
        url = f"https://{(node or self.controller).admin_address}{path}"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S, context=self.context) as answer:
            return json.loads(answer.read())


def unfenced(cluster: TlsCluster) -> set[int]:
    return {b["broker_id"] for b in cluster.get("/v1/brokers") if b.get("fenced") is False}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    root = tmp_path_factory.mktemp("controller-tls")
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    specs = resolve_layout(root, controllers=3, raft_port=raft, admin_port=admin, brokers=2, kafka_port=kafka,
                           metrics_port=metrics)
    secrets = load_or_create_secrets(root)
    rpc_secret = root / layout.RPC_SECRET_FILE
    load_or_create_secret(rpc_secret)
    files = properties_files(specs, secrets, None, {}, {}, rpc_secret, controller_tls_entries(root, specs))
    nodes: list[NodeProcess] = []
    try:
        for spec in specs:
            spec.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_node_key(spec, rpc_secret)
            replace_private(spec.properties_path, files[spec.node_id])
            nodes.append(NodeProcess.spawn(spec))
        controllers = [s for s in specs if layout.runs_controller(s.role)]
        brokers = [s for s in specs if layout.runs_broker(s.role)]
        started = TlsCluster(root, controllers, brokers, client_context(str(root / TLS_DIR / "ca.pem")))
        wanted = {b.node_id for b in brokers}
        wait_until("both brokers registered and unfenced over https",
                   lambda: wanted <= unfenced(started), READY_S, not_yet=(OSError, ValueError))
        yield started
    finally:
        stop_nodes(nodes)


def test_the_controller_serves_https_with_a_certificate_of_the_ca(cluster: TlsCluster) -> None:
    views = [cluster.get("/v1/cluster", node) for node in cluster.controllers]
    assert len({view["active_controller"] for view in views}) == 1  # the quorum formed
    for node in cluster.controllers:
        assert f"HTTP API listening on https://{node.admin_address}" in node.log_path.read_text()


def test_a_follower_forwards_a_write_to_the_active_controller_over_https(cluster: TlsCluster) -> None:
    active = cluster.get("/v1/cluster")["active_controller"]
    follower = next(node for node in cluster.controllers if node.node_id != active)
    request = urllib.request.Request(f"https://{follower.admin_address}/v1/topics", method="POST",
                                     data=json.dumps({"name": "forwarded", "partitions": 1}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S, context=cluster.context) as answer:
        assert answer.headers["X-Tidelog-Served-By"] == str(active)
    assert "forwarded" in {t["name"] for t in cluster.get("/v1/topics", follower)}


def test_plain_http_and_an_untrusted_client_get_nothing(cluster: TlsCluster) -> None:
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://{cluster.controller.admin_address}/v1/cluster", timeout=HTTP_TIMEOUT_S)
    with pytest.raises(urllib.error.URLError) as refused:  # Python's default trust store lacks the throwaway CA
        urllib.request.urlopen(f"{cluster.admin_url}/v1/cluster", timeout=HTTP_TIMEOUT_S,
                               context=ssl.create_default_context())
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)


def test_brokers_follow_the_metadata_over_https(cluster: TlsCluster) -> None:
    """A topic created through a broker (CreateTopics forwarded to the controller over https) is
    served by both brokers, which learn it from their metadata fetches over https."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # kept: its futures need the handle
    admin.create_topics([NewTopic(TOPIC, 2, 2)])[TOPIC].result(CLIENT_TIMEOUT_S)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for partition in (0, 1):
        producer.produce(TOPIC, f"over-https-{partition}".encode(), partition=partition)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "tls",
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        seen: set[bytes] = set()

        def both() -> bool:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.add(message.value())
            return len(seen) == 2
        wait_until("both records consumed", both, CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    topics = {t["name"]: t for t in cluster.get("/v1/topics")}
    assert TOPIC in topics


def test_tidelog_cli_reads_the_controllers_over_https_with_the_ca(cluster: TlsCluster) -> None:
    done = subprocess.run([sys.executable, "-m", "tidelog", "topics", "list", "--admin-url", cluster.admin_url,
                           "--admin-ca", str(cluster.root / TLS_DIR / "ca.pem")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert TOPIC in done.stdout
    without_ca = subprocess.run([sys.executable, "-m", "tidelog", "topics", "list", "--admin-url", cluster.admin_url],
                                capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert without_ca.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in without_ca.stderr, without_ca.stderr
