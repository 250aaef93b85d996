"""Listeners, SASL and TLS with real processes and real clients (issue 29).

One combined node (controller and broker in one process) serves five listeners:
PLAINTEXT (the cluster's own tools and readiness checks), SASL_PLAINTEXT with PLAIN and
SCRAM-SHA-256/512, SASL_SSL, SSL with required client certificates mapped to principals by
listener-prefixed ssl.principal.mapping.rules, and INTERNAL (SASL_PLAINTEXT) whose PLAIN users
come from its own listener.name.internal.plain.sasl.jaas.config. The StandardAuthorizer runs
with allow.everyone.if.no.acl.found=true, so only resources a test puts ACLs on are closed. Users: PLAIN's from sasl.jaas.config, SCRAM's created through
AlterUserScramCredentials by `tidelog users create`. Each client produces, consumes with a
group and makes an admin call; a wrong password fails fast with the client's authentication
error; the broker survives every bad input and closes only the connection that sent it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from common.kafka_client import EARLIEST_TIMESTAMP, KafkaClient, SaslRefused
from common.records import build_batch
from common.waiting import wait_until
from localcluster.launcher import LocalCluster, free_ports
from security.sasl_client import client_security
from security.tls import issue, new_ca
from tests.integration.cluster_fixtures import spawn_node

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

HOST = "127.0.0.1"  # the combined node's address
READY_S = 30.0
CLIENT_TIMEOUT_S = 15.0
PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")
AUTH_TIMEOUT_MS = 1500  # connections.max.idle.ms: a client that never authenticates
INTERNAL_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="bob-secret";'
MAPPING_RULES = "RULE:^CN=([^,]*)$/$1/L"  # CN=Carol -> carol; a subject with more than a CN: no rule
LOG_WAIT_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("sasl")
    raft, admin, kafka, metrics, sasl, sasl_ssl, ssl_port, internal = free_ports([HOST], 8)
    now = datetime.now(timezone.utc)
    ca = new_ca("test CA", now=now)
    (root / "ca.pem").write_bytes(ca.certificate_pem)
    (root / "broker.pem").write_bytes(issue(ca, "broker", hosts=[HOST], now=now).chain_and_key_pem)
    for name, unit in (("Carol", None), ("Dave", None), ("eve", "ops")):  # SSL clients
        (root / f"{name}.pem").write_bytes(issue(ca, name, hosts=[], now=now, organizational_unit=unit)
                                           .chain_and_key_pem)
    listeners = (f"PLAINTEXT://{HOST}:{kafka},SASL_PLAINTEXT://{HOST}:{sasl},SASL_SSL://{HOST}:{sasl_ssl},"
                 f"SSL://{HOST}:{ssl_port},INTERNAL://{HOST}:{internal}")
    properties = {"listeners": listeners, "advertised.listeners": listeners,
                  "inter.broker.listener.name": "PLAINTEXT",
                  "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                                    "SASL_SSL:SASL_SSL,SSL:SSL,INTERNAL:SASL_PLAINTEXT",
                  "listener.name.ssl.ssl.client.auth": "required",
                  "listener.name.ssl.ssl.principal.mapping.rules": MAPPING_RULES,
                  "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
                  "listener.name.internal.plain.sasl.jaas.config": INTERNAL_JAAS,
                  "authorizer.class.name": "standard", "allow.everyone.if.no.acl.found": "true",
                  "ssl.keystore.location": str(root / "broker.pem"), "ssl.truststore.location": str(root / "ca.pem"),
                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "sasl.jaas.config": JAAS,
                  "connections.max.idle.ms": str(AUTH_TIMEOUT_MS)}
    with LocalCluster.start(root, controllers=1, combined=True, raft_port=raft, admin_port=admin,
                            kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S,
                            extra_properties=properties, spawn=spawn_node) as started:
        info = {"local": started, "plaintext": f"{HOST}:{kafka}", "sasl": f"{HOST}:{sasl}",
                "sasl_ssl": f"{HOST}:{sasl_ssl}", "ssl": f"{HOST}:{ssl_port}", "internal": f"{HOST}:{internal}",
                "root": root, "ca": str(root / "ca.pem"), "log": started.brokers[0].spec.log_path}
        for user, mechanism in (("scram512", "SCRAM-SHA-512"), ("scram256", "SCRAM-SHA-256")):
            tidelog(info, "users", "create", "--user", user, "--password", f"{user}-secret", "--mechanism", mechanism)
        yield info
        started.stop()


def tidelog(cluster: dict[str, Any], *args: str) -> str:
    """A tidelog command against the cluster's PLAINTEXT listener; its stdout (it must succeed)."""
    done = subprocess.run([sys.executable, "-m", "tidelog", *args[:2], *args[2:], "--bootstrap-server",
                           cluster["plaintext"]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def sasl_config(cluster: dict[str, Any], mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster["sasl"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def round_trip(config: dict[str, Any], topic: str) -> None:
    """Create `topic`, produce 3 records, read them back in a group: over `config`'s listener."""
    admin = confluent_admin.AdminClient(config)
    admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    producer = confluent_kafka.Producer(config)
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [b"v0", b"v1", b"v2"]
    metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert metadata.brokers[1].port == int(cluster_port(config))  # the SASL listener's address


def create_topic(cluster: dict[str, Any], topic: str) -> None:
    admin = confluent_admin.AdminClient(sasl_config(cluster, "PLAIN", "alice", "alice-secret"))
    admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)


def logged(cluster: dict[str, Any], text: str) -> None:
    """Wait (bounded) until the broker's log holds `text`: its line follows the close a client sees."""
    wait_until(f"{text!r} in the broker log", lambda: text in cluster["log"].read_text(errors="replace"),
               LOG_WAIT_S, poll_s=0.05)


def cluster_port(config: dict[str, Any]) -> str:
    return str(config["bootstrap.servers"]).rpartition(":")[2]


def test_confluent_plain(cluster: dict[str, Any]) -> None:
    round_trip(sasl_config(cluster, "PLAIN", "alice", "alice-secret"), "plain-confluent")


def test_confluent_wrong_password_fails_fast(cluster: dict[str, Any]) -> None:
    errors: list[Any] = []
    config = {**sasl_config(cluster, "PLAIN", "alice", "wrong"), "error_cb": errors.append}
    started = time.monotonic()
    admin = confluent_admin.AdminClient(config)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0.5)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors
    assert time.monotonic() - started < 6


def test_confluent_scram_512(cluster: dict[str, Any]) -> None:
    round_trip(sasl_config(cluster, "SCRAM-SHA-512", "scram512", "scram512-secret"), "scram512-confluent")


def test_confluent_scram_256(cluster: dict[str, Any]) -> None:
    round_trip(sasl_config(cluster, "SCRAM-SHA-256", "scram256", "scram256-secret"), "scram256-confluent")


def test_users_list_and_describe(cluster: dict[str, Any]) -> None:
    out = tidelog(cluster, "users", "list")
    assert "SCRAM credential configs for user-principal 'scram512' are SCRAM-SHA-512=iterations=4096" in out
    assert "SCRAM credential configs for user-principal 'scram256' are SCRAM-SHA-256=iterations=4096" in out
    admin = confluent_admin.AdminClient(sasl_config(cluster, "SCRAM-SHA-512", "scram512", "scram512-secret"))
    described = admin.describe_user_scram_credentials(["scram512"])["scram512"].result(CLIENT_TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == \
        [(confluent_admin.ScramMechanism.SCRAM_SHA_512, 4096)]


def test_deleted_user_can_no_longer_log_in(cluster: dict[str, Any]) -> None:
    tidelog(cluster, "users", "create", "--user", "temp", "--password", "temp-secret")
    config = sasl_config(cluster, "SCRAM-SHA-512", "temp", "temp-secret")
    confluent_admin.AdminClient(config).list_topics(timeout=CLIENT_TIMEOUT_S)
    tidelog(cluster, "users", "delete", "--user", "temp")
    with pytest.raises(confluent_kafka.KafkaException):
        confluent_admin.AdminClient(config).list_topics(timeout=3)


def test_scram_wrong_password_fails_fast(cluster: dict[str, Any]) -> None:
    errors: list[Any] = []
    config = {**sasl_config(cluster, "SCRAM-SHA-512", "scram512", "wrong"), "error_cb": errors.append}
    admin = confluent_admin.AdminClient(config)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0.5)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.parametrize("mechanism, user", [("PLAIN", "alice"), ("SCRAM-SHA-512", "scram512")])
def test_kafka_python(cluster: dict[str, Any], mechanism: str, user: str) -> None:
    topic = f"kp-{mechanism.lower()}"
    secret = PLAIN_USERS.get(user, f"{user}-secret")
    common = {"bootstrap_servers": cluster["sasl"], "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": secret}
    admin = kafka.KafkaAdminClient(**common)
    admin.create_topics([kafka.admin.NewTopic(topic, 1, 1)])
    admin.close()
    producer = kafka.KafkaProducer(**common)
    for i in range(3):
        producer.send(topic, f"v{i}".encode())
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest",
                                   consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000), **common)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 3:
            break
    consumer.close()
    assert values == [b"v0", b"v1", b"v2"]


def test_kafka_python_wrong_password(cluster: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python 3 retries a bootstrap whose authentication failed until its timeout, logging
    Kafka's error each time; it never connects."""
    started = time.monotonic()
    with pytest.raises(kafka.errors.KafkaError) as info:
        kafka.KafkaAdminClient(bootstrap_servers=cluster["sasl"], security_protocol="SASL_PLAINTEXT",
                               sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="scram512",
                               sasl_plain_password="wrong", bootstrap_timeout_ms=3000)
    assert isinstance(info.value, (kafka.errors.SaslAuthenticationFailedError, kafka.errors.KafkaTimeoutError))
    # kafka-python usually logs Kafka's error; under load it may read the close first ("socket disconnected")
    assert "SaslAuthenticationFailedError" in caplog.text or "socket disconnected" in caplog.text
    assert "Failed authentication with" in cluster["log"].read_text(errors="replace")
    assert time.monotonic() - started < 10


def test_aiokafka(cluster: dict[str, Any]) -> None:
    topic = "aio-scram"
    common = {"bootstrap_servers": cluster["sasl"], "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "scram512",
              "sasl_plain_password": "scram512-secret"}

    async def run() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **common)
        await consumer.start()
        values: list[bytes] = []
        try:
            async with asyncio.timeout(CLIENT_TIMEOUT_S):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 3:
                        break
        finally:
            await consumer.stop()
        return values

    create_topic(cluster, topic)
    assert asyncio.run(run()) == [b"v0", b"v1", b"v2"]


def kcat(cluster: dict[str, Any], mechanism: str, user: str, password: str, *args: str,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kcat", "-b", cluster["sasl"], "-X", "security.protocol=SASL_PLAINTEXT",
                           "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}",
                           "-X", f"sasl.password={password}", *args],
                          input=stdin, capture_output=True, text=True, timeout=30)


def test_kcat(cluster: dict[str, Any]) -> None:
    topic = "kcat-scram"
    create_topic(cluster, topic)
    produced = kcat(cluster, "SCRAM-SHA-512", "scram512", "scram512-secret", "-P", "-t", topic, stdin="a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat(cluster, "SCRAM-SHA-512", "scram512", "scram512-secret", "-C", "-t", topic, "-o", "beginning",
                    "-c", "3", "-e")
    assert consumed.stdout.split() == ["a", "b", "c"], consumed.stderr
    refused = kcat(cluster, "PLAIN", "alice", "wrong", "-L", "-m", "5")
    assert refused.returncode != 0 and "uthentication" in refused.stderr


# --- bad input: each closes one connection with one log line, never the broker -------------------

def _frame(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _connect(cluster: dict[str, Any]) -> socket.socket:
    host, _, port = cluster["sasl"].rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


METADATA_V1_ALL_TOPICS = struct.pack(">i", -1)
BAD_INPUTS = [
    # a Metadata request before authentication
    ("metadata-first", _frame(3, 1, METADATA_V1_ALL_TOPICS), "unexpected Kafka request of API key 3"),
    # SaslAuthenticate before any SaslHandshake
    ("authenticate-first", _frame(36, 1, struct.pack(">i", 3) + b"abc"), "unexpected Kafka request of API key 36"),
    # a frame larger than sasl.server.max.receive.size before authentication
    ("oversized", struct.pack(">i", 600 * 1024) + b"x" * 1024, "outside 0..524288 bytes"),
    # garbage instead of a Kafka header
    ("garbage", struct.pack(">i", 3) + b"\xff\xff\xff", "Closing connection from"),
]


@pytest.mark.parametrize("name, data, line", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_closes_one_connection(cluster: dict[str, Any], name: str, data: bytes, line: str) -> None:
    bystander = confluent_admin.AdminClient(sasl_config(cluster, "PLAIN", "alice", "alice-secret"))
    bystander.list_topics(timeout=CLIENT_TIMEOUT_S)
    with _connect(cluster) as sock:
        sock.sendall(data)
        assert _closed(sock)
    logged(cluster, line)
    bystander.list_topics(timeout=CLIENT_TIMEOUT_S)  # the broker and other connections carry on


def test_truncated_scram_exchange(cluster: dict[str, Any]) -> None:
    """A client that sends a client-first message and then a cut final message fails and is closed."""
    with _connect(cluster) as sock:
        sock.sendall(_frame(17, 1, struct.pack(">h", 13) + b"SCRAM-SHA-512"))
        first = b"n,,n=scram512,r=abcdefgh"
        sock.sendall(_frame(36, 1, struct.pack(">i", len(first)) + first, 2))
        final = b"c=biws,r=abcdefgh"
        sock.sendall(_frame(36, 1, struct.pack(">i", len(final)) + final, 3))
        assert _closed(sock)
    logged(cluster, "Failed authentication with")


def test_client_that_never_authenticates_is_closed(cluster: dict[str, Any]) -> None:
    started = time.monotonic()
    with _connect(cluster) as sock:
        assert _closed(sock, timeout=AUTH_TIMEOUT_MS / 1000 + 5)
    assert time.monotonic() - started >= AUTH_TIMEOUT_MS / 1000 - 0.2
    logged(cluster, "did not authenticate within 1500 ms")


# --- SASL_SSL: TLS from security.tls's throwaway CA, then SASL --------------------------------------

def sasl_ssl_config(cluster: dict[str, Any], mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {**sasl_config(cluster, mechanism, user, password), "bootstrap.servers": cluster["sasl_ssl"],
            "security.protocol": "SASL_SSL", "ssl.ca.location": cluster["ca"]}


def test_confluent_sasl_ssl_scram(cluster: dict[str, Any]) -> None:
    round_trip(sasl_ssl_config(cluster, "SCRAM-SHA-512", "scram512", "scram512-secret"), "sasl-ssl-confluent")


def test_kafka_python_sasl_ssl_plain(cluster: dict[str, Any]) -> None:
    import ssl
    topic = "sasl-ssl-kp"
    create_topic(cluster, topic)
    context = ssl.create_default_context(cafile=cluster["ca"])
    common = {"bootstrap_servers": cluster["sasl_ssl"], "security_protocol": "SASL_SSL", "ssl_context": context,
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
    producer = kafka.KafkaProducer(**common)
    producer.send(topic, b"over-tls").get(timeout=CLIENT_TIMEOUT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest",
                                   consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000), **common)
    assert next(iter(consumer)).value == b"over-tls"
    consumer.close()


def test_kcat_sasl_ssl_and_a_plaintext_client_on_the_tls_port(cluster: dict[str, Any]) -> None:
    listed = subprocess.run(["kcat", "-b", cluster["sasl_ssl"], "-X", "security.protocol=SASL_SSL",
                             "-X", f"ssl.ca.location={cluster['ca']}", "-X", "sasl.mechanism=SCRAM-SHA-512",
                             "-X", "sasl.username=scram512", "-X", "sasl.password=scram512-secret", "-L", "-m", "10"],
                            capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and f"at {cluster['sasl_ssl']}" in listed.stdout, listed.stderr
    host, _, port = cluster["sasl_ssl"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:  # a Kafka frame where TLS is due
        sock.sendall(_frame(18, 0, b""))
        assert _closed(sock)
    logged(cluster, "TLS handshake with")


# --- per-listener keys: the INTERNAL listener's own PLAIN users ------------------------------------

def _login_fails(config: dict[str, Any]) -> None:
    errors: list[Any] = []
    admin = confluent_admin.AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0.5)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


def test_a_listener_takes_its_own_jaas_line(cluster: dict[str, Any]) -> None:
    """listener.name.internal.plain.sasl.jaas.config names bob only: bob logs in there and not on
    SASL_PLAINTEXT (the unprefixed line's users), alice the other way round."""
    internal = {**sasl_config(cluster, "PLAIN", "bob", "bob-secret"), "bootstrap.servers": cluster["internal"]}
    metadata = confluent_admin.AdminClient(internal).list_topics(timeout=CLIENT_TIMEOUT_S)
    assert metadata.brokers[1].port == int(cluster_port(internal))
    _login_fails(sasl_config(cluster, "PLAIN", "bob", "bob-secret"))
    _login_fails({**sasl_config(cluster, "PLAIN", "alice", "alice-secret"), "bootstrap.servers": cluster["internal"]})


# --- SSL: client certificates mapped by ssl.principal.mapping.rules --------------------------------

def ssl_config(cluster: dict[str, Any], name: str) -> dict[str, Any]:
    pem = str(cluster["root"] / f"{name}.pem")
    return {"bootstrap.servers": cluster["ssl"], "security.protocol": "SSL", "ssl.ca.location": cluster["ca"],
            "ssl.certificate.location": pem, "ssl.key.location": pem}


def test_certificate_principals_are_mapped_by_the_listener_rules(cluster: dict[str, Any]) -> None:
    """An ACL for User:carol (CN=Carol lower-cased by the rule) lets Carol write the topic and not
    Dave (User:dave); with the DEFAULT rule Carol would have been User:CN=Carol."""
    topic = "mapped"
    plaintext = confluent_admin.AdminClient({"bootstrap.servers": cluster["plaintext"]})
    plaintext.create_topics([confluent_admin.NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    binding = confluent_admin.AclBinding(confluent_admin.ResourceType.TOPIC, topic,
                                         confluent_admin.ResourcePatternType.LITERAL, "User:carol", "*",
                                         confluent_admin.AclOperation.WRITE, confluent_admin.AclPermissionType.ALLOW)
    plaintext.create_acls([binding])[binding].result(CLIENT_TIMEOUT_S)
    outcomes: dict[str, Any] = {}
    for name in ("Carol", "Dave"):
        producer = confluent_kafka.Producer({**ssl_config(cluster, name), "message.timeout.ms": 10_000})
        producer.produce(topic, name.encode(), on_delivery=lambda err, msg, n=name: outcomes.__setitem__(n, err))
        producer.flush(CLIENT_TIMEOUT_S)
    assert outcomes["Carol"] is None
    assert outcomes["Dave"] is not None and outcomes["Dave"].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_certificate_no_rule_maps_fails_authentication(cluster: dict[str, Any]) -> None:
    import ssl
    context = ssl.create_default_context(cafile=cluster["ca"])
    context.load_cert_chain(str(cluster["root"] / "eve.pem"))
    host, _, port = cluster["ssl"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as sock:
            try:  # TLS 1.3: the handshake ends client-side before the server reads the certificate
                sock.sendall(_frame(18, 0, b""))  # ApiVersions: never answered
                closed = _closed(sock)
            except (ssl.SSLError, OSError):  # the close seen as a TLS alert or EOF
                closed = True
            assert closed
    logged(cluster, "no ssl.principal.mapping.rules rule applies to CN=eve,OU=ops")


# --- the SASL handshake fuzzed (bench/fuzz_sasl.py) -------------------------------------------------

FUZZ_CASES = 200
FUZZ_CASE_TIMEOUT_S = 0.2  # a truncated frame waits this long; every refusal comes sooner (100 ms delay)
FUZZ_SEED = int(__import__("os").environ.get("TIDELOG_FUZZ_SEED", "20261129"))


def test_fuzzed_sasl_handshakes_close_only_their_connection(cluster: dict[str, Any]) -> None:
    """Mutated handshakes, tokens and SCRAM finals, each on its own connection: a real SCRAM login
    still succeeds every 25 cases and at the end, and the broker log holds no traceback."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fuzz_sasl", Path(__file__).resolve().parents[2] / "bench" / "fuzz_sasl.py")
    assert spec is not None and spec.loader is not None
    fuzz_sasl = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fuzz_sasl  # dataclasses look their module up while being created
    spec.loader.exec_module(fuzz_sasl)
    host, _, port = cluster["sasl"].rpartition(":")
    target = fuzz_sasl.Target(host, int(port), "scram512", "scram512-secret", "SCRAM-SHA-512")
    assert fuzz_sasl.fuzz(target, FUZZ_CASES, FUZZ_SEED, cluster["log"], FUZZ_CASE_TIMEOUT_S) == []
    # the fuzzer's bad inputs were refused, each with the broker's line, not silently
    text = cluster["log"].read_text(errors="replace")
    assert "Failed authentication with" in text and "Closing connection from" in text


# --- tidelog's own client (common.kafka_client: the CLI's, chaos', the Spark sink's) -------------

RAW_CLIENT_CASES = {  # listener -> librdkafka settings, as `tidelog up` prints them
    "sasl-plain": ("sasl", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                            "sasl.username": "alice", "sasl.password": "alice-secret"}),
    "sasl-scram-256": ("sasl", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                "sasl.username": "scram256", "sasl.password": "scram256-secret"}),
    "sasl-ssl-scram-512": ("sasl_ssl", {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                        "sasl.username": "scram512", "sasl.password": "scram512-secret"}),
    "ssl-client-certificate": ("ssl", {"security.protocol": "SSL"}),
}


def raw_settings(cluster: dict[str, Any], case: str) -> tuple[tuple[str, int], dict[str, str]]:
    listener, settings = RAW_CLIENT_CASES[case]
    if settings["security.protocol"].endswith("SSL"):
        settings = {**settings, "ssl.ca.location": cluster["ca"]}
    if listener == "ssl":
        pem = str(cluster["root"] / "Carol.pem")
        settings = {**settings, "ssl.certificate.location": pem, "ssl.key.location": pem}
    host, _, port = cluster[listener].rpartition(":")
    return (host, int(port)), settings


def leader_of(client: KafkaClient, topic: str) -> int:
    def found() -> tuple[int] | None:
        available = client.metadata([topic]).topics[topic].available()
        return (client.metadata([topic]).topics[topic].partitions[0].leader,) if available else None
    return wait_until(f"{topic} has a leader", found, CLIENT_TIMEOUT_S)[0]


@pytest.mark.parametrize("case", sorted(RAW_CLIENT_CASES))
def test_raw_client_produces_and_fetches_over_each_protocol(cluster: dict[str, Any], case: str) -> None:
    """Metadata, Produce, ListOffsets and Fetch through one authenticated connection per broker:
    the metadata answers the listener the client came in on."""
    topic = f"raw-{case}"
    create_topic(cluster, topic)
    address, settings = raw_settings(cluster, case)
    with KafkaClient([address], client_id="raw-security-test", security=client_security(settings)) as client:
        info = client.metadata([topic])
        assert list(info.brokers.values()) == [address]
        leader = leader_of(client, topic)
        answer = client.produce(leader, topic, {0: build_batch([(None, b"raw-v0"), (None, b"raw-v1")])}, acks=-1,
                                timeout_ms=5_000)
        assert answer[0].error_code == 0 and answer[0].base_offset == 0
        assert client.list_offsets(leader, topic, {0: EARLIEST_TIMESTAMP})[0].offset == 0
        fetched = client.fetch(leader, topic, {0: 0}, max_wait_ms=100)[0]
        assert fetched.error_code == 0 and fetched.high_watermark == 2
        assert b"raw-v1" in bytes(fetched.records or b"")


@pytest.mark.parametrize("mechanism, user", [("PLAIN", "alice"), ("SCRAM-SHA-512", "scram512")])
def test_raw_client_wrong_password_fails_fast(cluster: dict[str, Any], mechanism: str, user: str) -> None:
    """A refused login is SaslRefused with the broker's message at once: not a broker to retry."""
    host, _, port = cluster["sasl"].rpartition(":")
    settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": "wrong"}
    started = time.monotonic()
    with KafkaClient([(host, int(port))], security=client_security(settings)) as client:
        with pytest.raises(SaslRefused, match=f"SASL authentication as {user} to {host}:{port} failed: "
                                              "Authentication failed"):
            client.metadata([])
    assert time.monotonic() - started < CLIENT_TIMEOUT_S / 3


def test_raw_client_refuses_a_broker_certificate_for_another_name(cluster: dict[str, Any]) -> None:
    """ssl.endpoint.identification.algorithm=https (the default) checks the broker's name: the
    certificate names 127.0.0.1, so `localhost` fails the handshake; none skips the check."""
    _, settings = raw_settings(cluster, "sasl-ssl-scram-512")
    port = int(cluster["sasl_ssl"].rpartition(":")[2])
    with KafkaClient([("localhost", port)], security=client_security(settings)) as client:
        with pytest.raises(ConnectionError, match="TLS handshake with localhost:.* failed"):
            client.metadata([])
    unchecked = client_security({**settings, "ssl.endpoint.identification.algorithm": "none"})
    with KafkaClient([("localhost", port)], security=unchecked) as client:
        assert client.metadata([]).brokers  # answered over TLS without the name check


def test_share_heartbeat_needs_read_on_each_subscribed_topic(cluster: dict[str, Any]) -> None:
    """KIP-932 as KafkaApis checks it: alice holds READ on the share group but not on the topic, so
    her ShareGroupHeartbeat answers TOPIC_AUTHORIZATION_FAILED; scram512, who holds both, joins."""
    import uuid

    from common.protocol import messages
    from common.protocol.api_keys import ApiKey

    topic, group = "share-acl", "share-acl-group"
    create_topic(cluster, topic)
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster["plaintext"]})
    bindings = [confluent_admin.AclBinding(kind, name, confluent_admin.ResourcePatternType.LITERAL, who, "*",
                                           confluent_admin.AclOperation.READ, confluent_admin.AclPermissionType.ALLOW)
                for kind, name, who in ((confluent_admin.ResourceType.GROUP, group, "User:alice"),
                                        (confluent_admin.ResourceType.GROUP, group, "User:scram512"),
                                        (confluent_admin.ResourceType.TOPIC, topic, "User:scram512"))]
    for future in admin.create_acls(bindings).values():
        future.result(CLIENT_TIMEOUT_S)
    api = ApiKey.SHARE_GROUP_HEARTBEAT
    m = messages.request_module(api, 1)
    host, _, port = cluster["sasl"].rpartition(":")

    def join(mechanism: str, user: str, password: str) -> Any:
        settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
                    "sasl.password": password}
        with KafkaClient([(host, int(port))], security=client_security(settings)) as client:
            request = messages.build(m.ShareGroupHeartbeatRequest, group_id=group, member_id=str(uuid.uuid4()),
                                     member_epoch=0, rack_id=None, subscribed_topic_names=(topic,))
            return client.call(None, api, 1, request, messages.encode_request, messages.response_decoder(api))

    refused = join("PLAIN", "alice", "alice-secret")
    assert refused.error_code == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    assert topic in refused.error_message
    logged(cluster, f"topic(s) {topic}")  # the refusal's one INFO line
    allowed = join("SCRAM-SHA-512", "scram512", "scram512-secret")  # past the gate: the coordinator answers
    assert allowed.error_code not in (confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                      confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED), allowed


@pytest.mark.parametrize("password, code", [("scram512-secret", 0), ("wrong", 1)])
def test_cli_over_sasl_ssl_with_command_config(cluster: dict[str, Any], tmp_path: Path, password: str,
                                               code: int) -> None:
    """`tidelog users list` (a Kafka API through our raw client) against the SASL_SSL listener with
    Kafka tools' --command-config; refused credentials exit 1 naming the failed login."""
    properties = tmp_path / "client.properties"
    properties.write_text(f"# as kafka-configs.sh --command-config takes it\nsecurity.protocol=SASL_SSL\n"
                          f"sasl.mechanism=SCRAM-SHA-512\nsasl.username=scram512\nsasl.password={password}\n"
                          f"ssl.ca.location={cluster['ca']}\n")
    done = subprocess.run([sys.executable, "-m", "tidelog", "users", "list", "--bootstrap-server", cluster["sasl_ssl"],
                           "--command-config", str(properties)], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    if code == 0:
        assert "SCRAM credential configs for user-principal 'scram512'" in done.stdout
    else:
        assert "Error: SASL_AUTHENTICATION_FAILED: SASL authentication as scram512" in done.stderr
