"""`tidelog up --security SASL_SSL|SSL|SASL_PLAINTEXT`: a secured listener on every broker, a
throwaway CA and certificates, users, and the client settings to use (issue 29).

    per_node, client = plan(root, specs, "SASL_SSL")   # server.properties entries by node id
    client.lines()                                     # confluent-kafka / librdkafka settings
    controller_tls_entries(root, specs)                # https on the controllers' HTTP listener, by node id

Every broker keeps its PLAINTEXT listener (tidelog's own tools and readiness checks use it) and
gets a second one, named after its protocol, on its Kafka port + SECURE_PORT_OFFSET (9094 for
9092), which is also the inter-broker listener: followers fetch over it, authenticated. Files
live in the data dir and are made once (`tls/`: ca.pem, one keystore per broker, the admin
client's certificate; `client.properties`: the client settings, mode 0600); a restart reuses
them. SASL users are PLAIN users of sasl.jaas.config (`admin` for clients, `broker` for the
brokers themselves), with random passwords; SSL clients authenticate with a certificate
(ssl.client.auth=required, principal User:CN=admin).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final

from localcluster.cluster_layout import NodeSpec, runs_broker, runs_controller
from security.controller_tls import KEYSTORE_KEY, TRUSTSTORE_KEY
from security.tls import Issued, issue, new_ca

SECURITY_PROTOCOLS: Final = ("SASL_SSL", "SSL", "SASL_PLAINTEXT")
SECURE_PORT_OFFSET: Final = 2  # the secured listener's port: the Kafka port + 2 (9094 for 9092)
TLS_DIR: Final = "tls"
CLIENT_PROPERTIES: Final = "client.properties"
ADMIN_USER: Final = "admin"
BROKER_USER: Final = "broker"
PASSWORD_BYTES: Final = 18  # random bytes of a generated password


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What a client needs to talk to the secured listeners."""

    bootstrap_servers: str
    settings: tuple[tuple[str, str], ...]

    def lines(self) -> list[str]:
        return [f"bootstrap.servers={self.bootstrap_servers}", *(f"{k}={v}" for k, v in self.settings)]


def _private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chmod(path, 0o600)


def _passwords(root: Path) -> dict[str, str]:
    """The users' passwords: made once, kept in the data dir (mode 0600)."""
    path = root / TLS_DIR / "passwords"
    if path.exists():
        return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    made = {user: secrets.token_urlsafe(PASSWORD_BYTES) for user in (ADMIN_USER, BROKER_USER)}
    _private(path, "".join(f"{u}={p}\n" for u, p in made.items()).encode())
    return made


def _certificates(root: Path, brokers: Sequence[NodeSpec], controllers: Sequence[NodeSpec] = ()) -> None:
    """The CA, a keystore per broker (its address as subjectAltName), one per controller listener
    when asked (`controller-<id>.pem`) and the admin client's certificate; made once, except a
    node new since (its own keystore)."""
    tls = root / TLS_DIR
    now = datetime.now(timezone.utc)
    if not (tls / "ca-key.pem").exists():
        ca = new_ca("tidelog throwaway CA", now=now)
        _private(tls / "ca-key.pem", ca.key_pem)
        (tls / "ca.pem").write_bytes(ca.certificate_pem)
        admin = issue(ca, ADMIN_USER, hosts=[], now=now)
        _private(tls / "admin-key.pem", admin.key_pem)
        (tls / "admin.pem").write_bytes(admin.certificate_pem)
    ca = Issued((tls / "ca-key.pem").read_bytes(), (tls / "ca.pem").read_bytes())
    for kind, nodes in (("broker", brokers), ("controller", controllers)):
        for node in nodes:
            keystore = tls / f"{kind}-{node.node_id}.pem"
            if not keystore.exists():  # clients check the node's address: its host is a subjectAltName
                _private(keystore, issue(ca, f"{kind}-{node.node_id}", hosts=[node.host, "localhost"],
                                         now=now).chain_and_key_pem)


def controller_tls_entries(root: Path, nodes: Sequence[NodeSpec]) -> dict[int, dict[str, str]]:
    """Every node's `listener.name.controller.ssl.*` entries (by node id), certificates made as needed:
    a controller serves its HTTP listener over https with its own keystore, and every node (brokers,
    controllers forwarding to the active one) verifies the controllers against the throwaway CA."""
    controllers = [n for n in nodes if runs_controller(n.role)]
    tls = root / TLS_DIR
    tls.mkdir(mode=0o700, parents=True, exist_ok=True)
    _certificates(root, [], controllers)
    entries: dict[int, dict[str, str]] = {}
    for node in nodes:
        entries[node.node_id] = {TRUSTSTORE_KEY: str(tls / "ca.pem")}
        if runs_controller(node.role):
            entries[node.node_id][KEYSTORE_KEY] = str(tls / f"controller-{node.node_id}.pem")
    return entries


def read_client_config(root: Path) -> dict[str, str]:
    """The client settings plan() wrote to `root`, as a confluent-kafka config (the test plugin's and
    the chaos workload's clients connect with them as a user following `tidelog up`'s printout would)."""
    path = root / CLIENT_PROPERTIES
    config = {key.strip(): value.strip() for key, sep, value in
              (line.partition("=") for line in path.read_text().splitlines()) if sep and key.strip()}
    if "bootstrap.servers" not in config:
        raise ValueError(f"{path} names no bootstrap.servers: not written by the security setup")
    return config


def plan(root: Path, nodes: Sequence[NodeSpec], security: str) -> tuple[dict[int, dict[str, str]], ClientSettings]:
    """Every broker's security entries (by node id) and the client settings, files made as needed."""
    if security not in SECURITY_PROTOCOLS:
        raise ValueError(f"--security must be one of {', '.join(SECURITY_PROTOCOLS)}, got {security!r}")
    brokers = [n for n in nodes if runs_broker(n.role)]
    tls = root / TLS_DIR
    tls.mkdir(mode=0o700, parents=True, exist_ok=True)
    uses_tls, uses_sasl = security.endswith("SSL"), security.startswith("SASL_")
    if uses_tls:
        _certificates(root, brokers)
    passwords = _passwords(root) if uses_sasl else {}
    per_node: dict[int, dict[str, str]] = {}
    for node in brokers:
        secured = f"{security}://{node.host}:{node.kafka_port + SECURE_PORT_OFFSET}"
        listeners = f"PLAINTEXT://{node.bootstrap_address},{secured}"
        entries = {"listeners": listeners, "advertised.listeners": listeners,
                   "inter.broker.listener.name": security}
        if uses_tls:
            entries.update({"ssl.keystore.location": str(tls / f"broker-{node.node_id}.pem"),
                            "ssl.truststore.location": str(tls / "ca.pem"),
                            "ssl.client.auth": "none" if uses_sasl else "required"})
        if uses_sasl:
            users = " ".join(f'user_{u}="{p}"' for u, p in sorted(passwords.items()))
            entries.update({"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                                f'username="{BROKER_USER}" password="{passwords[BROKER_USER]}" {users};'})
        per_node[node.node_id] = entries
    settings: list[tuple[str, str]] = [("security.protocol", security)]
    if uses_tls:
        settings.append(("ssl.ca.location", str(tls / "ca.pem")))
        if not uses_sasl:
            settings += [("ssl.certificate.location", str(tls / "admin.pem")),
                         ("ssl.key.location", str(tls / "admin-key.pem"))]
    if uses_sasl:
        settings += [("sasl.mechanism", "PLAIN"), ("sasl.username", ADMIN_USER),
                     ("sasl.password", passwords[ADMIN_USER])]
    client = ClientSettings(",".join(f"{n.host}:{n.kafka_port + SECURE_PORT_OFFSET}" for n in brokers),
                            tuple(settings))
    _private(root / CLIENT_PROPERTIES, ("\n".join(client.lines()) + "\n").encode())
    return per_node, client
