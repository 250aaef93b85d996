"""Three real `tidelog controller` processes on 127.0.0.1-3 and their HTTP API.

Admin writes sent to a follower are forwarded to the active controller; reads are served
by every controller from its committed image; a broker test double speaks the real broker
RPCs (HTTP + msgpack) from this process: it registers three brokers, heartbeats them until
unfenced, then lets one session expire and checks that the broker is fenced and its
partitions' leaders move. Killing the active controller leaves the API answering on the
other two with every committed topic. Timings are printed, never asserted.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from common.prometheus import samples
from console.routes import OPENAPI_PATHS as CONSOLE_PATHS
from tests.integration.cluster_fixtures import spawn_node
from tests.integration.cluster_fixtures import wait_until as shared_wait_until
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
TOKEN = "controller-api-test-token"
SESSION_TIMEOUT_MS = 1500
HEARTBEAT_INTERVAL_MS = 300
BROKERS = (4, 5, 6)
HTTP_TIMEOUT_S = 15.0
WAIT_S = 15.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05
LATENCY_WRITES = 30
EXPECTED_PATHS = {
    "/v1/cluster", "/v1/brokers", "/v1/brokers/{id}", "/v1/brokers/{id}/shutdown", "/v1/topics", "/v1/topics/{name}",
    "/v1/topics/{name}/partitions", "/v1/topics/{name}/configs", "/v1/elections", "/metrics",
    "/openapi.json", "/rpc/broker-registration", "/rpc/broker-heartbeat", "/rpc/alter-partition",
    "/rpc/allocate-producer-ids", "/rpc/metadata-fetch",
    "/v1/groups", "/v1/groups/{id}", "/v1/groups/{id}/offsets",  # consumer groups (issue 12)
    "/v1/groups/{id}/configs",  # KIP-848's per-group configs (issue 31)
    "/v1/topics/{name}/partitions/{partition}/delete-records",  # DeleteRecords (issue 18)
    "/v1/brokers/configs", "/v1/brokers/{id}/configs",  # dynamic broker configs (issue 18)
    "/v1/reassignments",  # partition reassignment (issue 18)
    "/v1/transactions", "/v1/transactions/{id}", "/v1/hanging-transactions",  # KIP-664 (issue 27)
    "/v1/topics/{name}/partitions/{partition}/producers", "/v1/topics/{name}/partitions/{partition}/abort-transaction",
    "/v1/quorum", "/rpc/describe-quorum",  # DescribeQuorum (issue 28)
    "/v1/quorum/voters", "/v1/quorum/voters/{id}", "/v1/quorum/replica",  # KIP-853 (issue 28)
    "/rpc/add-raft-voter", "/rpc/remove-raft-voter", "/rpc/update-raft-voter",
    "/v1/acls", "/v1/acls/delete",  # CreateAcls / DescribeAcls / DeleteAcls (issue 29)
    "/v1/features", "/rpc/update-features",  # UpdateFeatures, KIP-584 (issue 28)
    "/v1/scram-credentials",  # Describe/AlterUserScramCredentials, KIP-554 (issue 29)
    # every controller process registers the web console (issue 32) as an extension, which adds its own
    # paths to /openapi.json; tests/console checks those against the console's routes
    *CONSOLE_PATHS,
}


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():  # measurements belong in the test output even when it passes
        print(f"\n[controller api measurement] {line}")


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """The shared bounded poll, with this module's default timeout and interval."""
    return shared_wait_until(what, condition, timeout_s, poll_s=POLL_S)


def http(address: str, method: str, path: str, body: Any = None, *, token: str | None = TOKEN,
         raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            status, payload, kind = response.status, response.read(), response.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        status, payload, kind = exc.code, exc.read(), exc.headers.get_content_type()
    return status, json.loads(payload) if kind == "application/json" else payload.decode()


def get(address: str, path: str) -> Any:
    status, body = http(address, "GET", path)
    assert status == 200, (address, path, status, body)
    return body


def rpc(address: str, name: str, body: Any, *, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else msgpack.packb(body, use_bin_type=True)
    request = urllib.request.Request(f"http://{address}/rpc/{name}", data=data, method="POST")
    request.add_header("Content-Type", "application/x-msgpack")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, msgpack.unpackb(response.read(), raw=False)
    except urllib.error.HTTPError as exc:
        return exc.code, msgpack.unpackb(exc.read(), raw=False)


class Controller:
    """One controller of the `LocalCluster`, as these tests drive it."""

    def __init__(self, node: NodeProcess, cluster: LocalCluster) -> None:
        self.node, self.cluster = node, cluster
        self.node_id, self.api, self.log_path = node.spec.node_id, node.spec.admin_address, node.spec.log_path

    def restart(self) -> None:
        """Start the node again (forked, as the cluster started it); the cluster stops it on exit."""
        self.node = spawn_node(self.node.spec)
        self.cluster.nodes = [self.node if n.spec.node_id == self.node_id else n for n in self.cluster.nodes]

    @property
    def running(self) -> bool:
        return self.node.running()

    def kill(self) -> None:
        self.node.kill()

    def stop(self) -> int | None:
        """SIGTERM and wait; the exit status (0 is a clean stop), None if it needed SIGKILL."""
        stopped = self.node.stop(STOP_TIMEOUT_S)
        return stopped.exit_status if stopped.outcome == "stopped" else None


class BrokerDouble:
    """Brokers as the controller sees them: real registration and heartbeat RPCs, on a thread."""

    def __init__(self, controllers: list[Controller]) -> None:
        self.controllers = controllers
        self.epochs: dict[int, int] = {}
        self.alive: set[int] = set()
        self.target = controllers[0].api
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="broker-double", daemon=True)
        self.errors: list[str] = []

    def call(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """An RPC to the active controller, following NOT_CONTROLLER redirects (bounded)."""
        reply: dict[str, Any] = {}
        for _ in range(20):  # bounded: a failover takes a few seconds at most
            try:
                _, reply = rpc(self.target, name, body)
            except OSError:  # that controller is gone: try the others
                others = [c.api for c in self.controllers if c.running and c.api != self.target]
                self.target = others[0] if others else self.target
                time.sleep(0.2)
                continue
            if reply["error_code"] != 41:
                return reply
            self.target = reply.get("controller_address") or self.target
            time.sleep(0.2)
        return reply

    def register(self, broker_id: int) -> int:
        reply = self.call("broker-registration", {
            "broker_id": broker_id, "incarnation_id": f"incarnation-{broker_id}-{time.time_ns()}",
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + broker_id}], "rack": None})
        assert reply["error_code"] == 0, reply
        self.epochs[broker_id] = reply["broker_epoch"]
        self.alive.add(broker_id)
        return reply["broker_epoch"]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL_MS / 1000):  # until stop()
            for broker_id in sorted(self.alive):
                try:
                    _, fetched = rpc(self.target, "metadata-fetch", {"offset": 0, "max_records": 1})
                    reply = self.call("broker-heartbeat", {
                        "broker_id": broker_id, "broker_epoch": self.epochs[broker_id],
                        "current_metadata_offset": fetched["last_offset"], "want_fence": False,
                        "want_shut_down": False})
                except OSError as exc:
                    self.errors.append(f"broker {broker_id}: {exc}")
                    continue
                if reply["error_code"] != 0:
                    self.errors.append(f"broker {broker_id}: {reply}")


@pytest.fixture
def controllers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[list[Controller]]:
    raft_port, admin_port = free_ports(HOSTS)
    started = time.monotonic()
    with LocalCluster.start(tmp_path, controllers=len(HOSTS), raft_port=raft_port, admin_port=admin_port,
                            extra_properties={"admin.token": TOKEN,
                                              # raw, unsigned RPCs here; test_rpc_auth covers their proofs
                                              "controller.rpc.secret.file": "",
                                              "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                                              "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS)},
                            ready_timeout=WAIT_S, spawn=spawn_node) as cluster:  # all stopped on exit, even on failure
        report(capsys, f"three controllers up, controller {cluster.active_controller} active, "
                       f"{time.monotonic() - started:.2f} s after start")
        yield [Controller(node, cluster) for node in cluster.controllers]


def active_controller(controllers: list[Controller]) -> Controller:
    """The one running controller that says it is active, once every running one agrees."""
    def agreed() -> Controller | None:
        views = [(c, get(c.api, "/v1/cluster")) for c in controllers if c.running]
        actives = [c for c, view in views if view["is_active"]]
        named = {view["active_controller"] for _, view in views}
        if len(actives) == 1 and named == {actives[0].node_id}:
            return actives[0]
        return None
    return wait_until("one active controller that every running controller names", agreed)


def caught_up(controllers: list[Controller], offset: int) -> None:
    wait_until(f"every running controller at metadata offset {offset}", lambda: all(
        get(c.api, "/v1/cluster")["metadata_offset"] >= offset for c in controllers if c.running))


def brokers_in(address: str, state: str) -> set[int]:
    return {b["broker_id"] for b in get(address, "/v1/brokers") if b["state"] == state}


def check_openapi(controller: Controller) -> None:
    document = get(controller.api, "/openapi.json")
    assert document["openapi"].startswith("3.") and set(document["paths"]) == EXPECTED_PATHS


def register_brokers(controllers: list[Controller], active: Controller, double: BrokerDouble) -> None:
    follower = next(c for c in controllers if c is not active)
    _, redirected = rpc(follower.api, "broker-heartbeat", {
        "broker_id": 4, "broker_epoch": 0, "current_metadata_offset": 0})
    assert redirected["error_code"] == 41 and redirected["controller_address"] == active.api, redirected
    double.target = follower.api  # the double follows the redirect itself
    for broker_id in BROKERS:
        double.register(broker_id)
    assert len(set(double.epochs.values())) == len(BROKERS)
    double.start()
    wait_until("every broker unfenced", lambda: brokers_in(active.api, "UNFENCED") == set(BROKERS))


def create_on_follower(controllers: list[Controller], active: Controller) -> dict[str, Any]:
    """POST on a follower is forwarded; the topic is then read back from all three."""
    follower = next(c for c in controllers if c is not active)
    status, created = http(follower.api, "POST", "/v1/topics", {
        "name": "orders", "partitions": 6, "replication_factor": 3, "configs": {"retention.ms": "60000"}})
    assert status == 201, created
    assert created["name"] == "orders" and len(created["partitions"]) == 6
    for p in created["partitions"]:
        assert len(p["replicas"]) == 3 and p["leader"] in BROKERS and sorted(p["isr"]) == sorted(BROKERS)
    # read-your-writes: the follower answers a write it relayed only once its own image has it
    assert get(follower.api, "/v1/topics/orders")["name"] == "orders"
    caught_up(controllers, created["metadata_offset"])
    views = [get(c.api, "/v1/topics/orders") for c in controllers]
    expected = {k: v for k, v in created.items() if k != "metadata_offset"}
    assert views == [expected] * 3
    assert expected["configs"] == {"retention.ms": "60000"}
    return expected


BAD_WRITES = [  # (method, path, body, status, error, field)
    ("POST", "/v1/topics", {"name": "x", "partitons": 1}, 400, "INVALID_REQUEST", "partitons"),
    ("POST", "/v1/topics", {"name": "x", "partitions": "3"}, 400, "INVALID_REQUEST", "partitions"),
    ("POST", "/v1/topics", {"name": "x", "replication_factor": 0}, 400, "INVALID_REPLICATION_FACTOR",
     "replication_factor"),
    ("POST", "/v1/topics", {"name": "x", "partitions": -1}, 400, "INVALID_PARTITIONS", "partitions"),
    ("POST", "/v1/topics", {"name": "bad/name"}, 400, "INVALID_TOPIC_EXCEPTION", "name"),
    ("POST", "/v1/topics", {"name": "x", "replication_factor": 4}, 400, "INVALID_REPLICATION_FACTOR",
     "replication_factor"),  # refused by the rule on the active controller: forwarded back
    ("POST", "/v1/topics", {"name": "orders"}, 409, "TOPIC_ALREADY_EXISTS", "name"),
    ("POST", "/v1/topics", {"name": "x", "configs": {"retention.ms": "soon"}}, 400, "INVALID_CONFIG",
     "configs.retention.ms"),
    ("POST", "/v1/topics", [1, 2], 400, "INVALID_REQUEST", None),
    ("POST", "/v1/topics/orders/partitions", {"count": 2}, 400, "INVALID_PARTITIONS", "count"),
    ("POST", "/v1/topics/nope/partitions", {"count": 2}, 404, "UNKNOWN_TOPIC_OR_PARTITION", "name"),
    ("PATCH", "/v1/topics/orders/configs", {"configs": {"no.such.key": "1"}}, 400, "INVALID_CONFIG",
     "configs.no.such.key"),
    ("DELETE", "/v1/topics/nope", None, 404, "UNKNOWN_TOPIC_OR_PARTITION", "name"),
    ("POST", "/v1/elections", {"type": "sideways"}, 400, "INVALID_REQUEST", "type"),
]


def bad_input(controllers: list[Controller], active: Controller) -> None:
    """Every refusal is a 4xx JSON naming the field, from a follower (forwarded or not) and the active."""
    follower = next(c for c in controllers if c is not active)
    for node in (follower, active):
        for method, path, body, status, error, field in BAD_WRITES:
            got_status, got = http(node.api, method, path, body)
            assert (got_status, got["error"], got["field"]) == (status, error, field), (method, path, body, got)
    for path in ("/v1/topics/nope", "/v1/topics/nope/configs"):
        status, got = http(follower.api, "GET", path)
        assert (status, got["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    status, got = http(follower.api, "GET", "/v1/brokers/99")
    assert (status, got["error"], got["field"]) == (404, "BROKER_ID_NOT_REGISTERED", "id")
    assert http(follower.api, "POST", "/v1/topics", {"name": "x"}, token=None)[0] == 401
    assert http(follower.api, "POST", "/v1/topics", {"name": "x"}, token="wrong")[0] == 403
    assert http(follower.api, "POST", "/v1/topics", raw=b"{not json")[0] == 400
    assert http(follower.api, "POST", "/v1/topics", raw=b"[" * 100_000)[0] == 400
    status, got = http(follower.api, "POST", "/v1/topics", raw=b" " * (2 * 1024 * 1024))
    assert status == 413, got
    assert http(follower.api, "GET", "/v1/nothing-here")[0] == 404
    assert http(follower.api, "PUT", "/v1/topics")[0] == 405
    status, reply = rpc(follower.api, "broker-heartbeat", {}, raw=b"\xc1 not msgpack")
    assert (status, reply["error_code"]) == (400, 42)
    status, reply = rpc(active.api, "broker-heartbeat", {"broker_id": "4", "broker_epoch": 0,
                                                         "current_metadata_offset": 0})
    assert (status, reply["error_code"], reply["field"]) == (400, 42, "broker_id")


def good_writes(controllers: list[Controller], active: Controller) -> None:
    """Configs, partitions, elections and delete, each through a follower."""
    follower = next(c for c in controllers if c is not active)
    status, body = http(follower.api, "PATCH", "/v1/topics/orders/configs",
                        {"configs": {"retention.ms": None, "min.insync.replicas": "2"}})
    assert (status, body["configs"]) == (200, {"min.insync.replicas": "2"}), body
    status, body = http(follower.api, "POST", "/v1/topics", {"name": "scratch", "partitions": 1,
                                                             "replication_factor": 1})
    assert status == 201, body
    status, body = http(follower.api, "POST", "/v1/topics/scratch/partitions", {"count": 3})
    assert status == 200 and len(body["partitions"]) == 3, body
    status, body = http(follower.api, "POST", "/v1/elections", {"type": "preferred", "partitions": [
        {"topic": "scratch", "partition": 0}]})
    assert status == 200 and body["results"] == [
        {"topic": "scratch", "partition": 0, "error": "ELECTION_NOT_NEEDED"}], body
    status, body = http(follower.api, "DELETE", "/v1/topics/scratch")
    assert status == 200 and body["deleted"], body
    caught_up(controllers, body["metadata_offset"])
    assert all(http(c.api, "GET", "/v1/topics/scratch")[0] == 404 for c in controllers)


def write_latency(controllers: list[Controller], active: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    """Config writes answered after commit, sent to the active controller and through a follower."""
    follower = next(c for c in controllers if c is not active)
    for node, how in ((active, "on the active controller"), (follower, "forwarded by a follower")):
        times = []
        for i in range(LATENCY_WRITES):
            started = time.perf_counter()
            status, body = http(node.api, "PATCH", "/v1/topics/orders/configs",
                                {"configs": {"retention.ms": str(60_000 + i)}})
            times.append((time.perf_counter() - started) * 1000)
            assert status == 200, body
        times.sort()
        report(capsys, f"PATCH /v1/topics/orders/configs {how}: p50 {times[len(times) // 2]:.1f} ms, "
                       f"max {times[-1]:.1f} ms over {LATENCY_WRITES} writes")


def thousand_partitions(active: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    status, body = http(active.api, "POST", "/v1/topics", {"name": "big", "partitions": 1000,
                                                          "replication_factor": 3})
    elapsed = time.perf_counter() - started
    assert status == 201 and len(body["partitions"]) == 1000, body
    report(capsys, f"create one topic with 1000 partitions (RF 3) on the active controller: "
                   f"{elapsed * 1000:.0f} ms, answer {len(json.dumps(body)) // 1024} KiB")


def broker_rpcs(controllers: list[Controller], active: Controller, double: BrokerDouble,
                capsys: pytest.CaptureFixture[str]) -> None:
    epoch = double.epochs[4]
    first = double.call("allocate-producer-ids", {"broker_id": 4, "broker_epoch": epoch})
    second = double.call("allocate-producer-ids", {"broker_id": 4, "broker_epoch": epoch})
    assert first["error_code"] == second["error_code"] == 0
    assert second["producer_id_start"] == first["producer_id_start"] + first["producer_id_len"]
    stale = double.call("allocate-producer-ids", {"broker_id": 4, "broker_epoch": epoch - 1})
    assert stale["error_code"] == 77, stale  # STALE_BROKER_EPOCH
    follower = next(c for c in controllers if c is not active)
    _, page = rpc(follower.api, "metadata-fetch", {"offset": 0, "max_records": 10})
    assert page["error_code"] == 0 and [at for at, _ in page["records"]] == list(range(10))
    end = page["last_offset"] + 1_000_000
    started = time.perf_counter()
    _, waited = rpc(follower.api, "metadata-fetch", {"offset": end, "max_wait_ms": 300})
    report(capsys, f"MetadataFetch long-poll with nothing new, max_wait_ms 300: "
                   f"{(time.perf_counter() - started) * 1000:.0f} ms")
    assert waited["error_code"] == 0 and waited["records"] == []
    topic = get(active.api, "/v1/topics/orders")
    p0 = topic["partitions"][0]
    reply = double.call("alter-partition", {"broker_id": p0["leader"], "broker_epoch": double.epochs[p0["leader"]],
                                            "topics": [{"topic_id": topic["topic_id"], "partitions": [{
                                                "partition_index": 0, "leader_epoch": p0["leader_epoch"] + 5,
                                                "partition_epoch": p0["partition_epoch"],
                                                "new_isr_with_epochs": []}]}]})
    assert reply["error_code"] == 0 and reply["topics"][0]["partitions"][0]["error_code"] != 0, reply


def fence_one(active: Controller, double: BrokerDouble, capsys: pytest.CaptureFixture[str]) -> None:
    """Broker 6 stops heartbeating: fenced after the session timeout, leaders move off it."""
    before = get(active.api, "/v1/topics/orders")
    assert any(p["leader"] == 6 for p in before["partitions"]), before
    double.alive.discard(6)
    stopped = time.monotonic()
    wait_until("broker 6 fenced", lambda: 6 in brokers_in(active.api, "FENCED"))
    report(capsys, f"broker fenced {(time.monotonic() - stopped) * 1000:.0f} ms after its last heartbeat "
                   f"(session timeout {SESSION_TIMEOUT_MS} ms, checked every {HEARTBEAT_INTERVAL_MS // 2} ms)")
    # The fence is a registration change first; its partition changes follow as decisions of
    # their own (bounded batches, issue 36), so the partitions may show it a moment later.
    after = wait_until("every partition moved off broker 6", lambda: (lambda view: view if all(
        6 not in p["isr"] for p in view["partitions"]) else None)(get(active.api, "/v1/topics/orders")))
    for old, new in zip(before["partitions"], after["partitions"]):
        assert new["leader"] in (4, 5) and 6 not in new["isr"], new
        if old["leader"] == 6:
            assert new["leader_epoch"] == old["leader_epoch"] + 1, (old, new)
    assert brokers_in(active.api, "UNFENCED") == {4, 5}
    # Heartbeat ages are soft state of the active controller; if it re-began its epoch
    # (an append of unknown outcome), sessions restart, so give the gauges a moment.
    def metrics_shown() -> bool:
        got = samples(http(active.api, "GET", "/metrics")[1])
        return (got.get("tidelog_controller_active_controller_count") == 1
                and got.get("tidelog_controller_fenced_broker_count") == 1
                and 'tidelog_controller_broker_heartbeat_age_seconds{broker_id="4"}' in got)
    wait_until("controller metrics for the live brokers", metrics_shown)


def kill_active(controllers: list[Controller], active: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL the active controller: the others keep answering, nothing committed is lost."""
    caught_up(controllers, get(active.api, "/v1/cluster")["metadata_offset"])
    topics_before = get(active.api, "/v1/topics")
    killed_at = time.monotonic()
    active.kill()
    survivors = [c for c in controllers if c.running]
    for c in survivors:  # reads never stop, even before a new controller is active
        assert get(c.api, "/v1/topics") == topics_before
    new_active = active_controller(survivors)
    report(capsys, f"new active controller {new_active.node_id} answering "
                   f"{time.monotonic() - killed_at:.2f} s after SIGKILL of controller {active.node_id}")
    follower = next(c for c in survivors if c is not new_active)
    status, body = wait_until("a topic created through the surviving follower", lambda: (
        lambda r: r if r[0] == 201 else None)(http(follower.api, "POST", "/v1/topics", {
            "name": "after-failover", "partitions": 2, "replication_factor": 2})))
    assert body["name"] == "after-failover"
    caught_up(survivors, body["metadata_offset"])
    names = {t["name"] for t in topics_before} | {"after-failover"}
    for c in survivors:
        assert {t["name"] for t in get(c.api, "/v1/topics")} == names
        assert get(c.api, "/v1/topics/big")["partitions"][999]["partition"] == 999
    time.sleep(3 * HEARTBEAT_INTERVAL_MS / 1000)  # a few beats against the new active controller
    assert brokers_in(new_active.api, "UNFENCED") == {4, 5} and brokers_in(new_active.api, "FENCED") == {6}
    restarted_reads(active, names)


def restarted_reads(controller: Controller, names: set[str]) -> None:
    """A restarted controller reads back its old log, which lacks what was written while it
    was down: until it has caught up it answers reads 503, never from that stale image."""
    controller.restart()

    def current() -> bool | None:
        try:
            status, body = http(controller.api, "GET", "/v1/topics")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None  # not listening yet
        if status == 503:
            assert body["error"] == "COORDINATOR_LOAD_IN_PROGRESS", body
            return None
        assert status == 200, body
        assert {t["name"] for t in body} == names  # includes the topic created while it was down
        return True
    wait_until(f"controller {controller.node_id} serving reads again after a restart", current)


def test_controller_api(controllers: list[Controller], capsys: pytest.CaptureFixture[str]) -> None:
    active = active_controller(controllers)
    check_openapi(active)
    double = BrokerDouble(controllers)
    try:
        register_brokers(controllers, active, double)
        create_on_follower(controllers, active)
        bad_input(controllers, active)
        good_writes(controllers, active)
        write_latency(controllers, active, capsys)
        thousand_partitions(active, capsys)
        broker_rpcs(controllers, active, double, capsys)
        fence_one(active, double, capsys)
        kill_active(controllers, active, capsys)
    finally:
        double.stop()
    assert [c.stop() for c in controllers if c.running] == [0, 0, 0]  # the killed one restarted
    logs = "".join(c.log_path.read_text(errors="replace") for c in controllers)
    assert "Traceback" not in logs, logs[-5000:]
