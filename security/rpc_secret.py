"""The RPC secret file (`controller.rpc.secret.file`, issue 29): read it, or make it once.

    secret = load_or_create_secret(path)     # a controller, `tidelog up`: generated (0600) when missing
    secret = load_secret(path)               # the master secret: controllers and operator tools
    text = broker_key_text(master, 4)        # `tidelog up`, `tidelog format`: broker 4's own key file
    signer = signer_from_config(config, 4)   # None when the key is unset: RPCs go unsigned

A controller's file (and a combined node's) holds the cluster's master secret as hex text (64
hex characters, 256 bits). A broker's holds only its own key (`security.rpc_auth.broker_key`) as
`tidelog-broker-rpc-key-v1 node=<id> <64 hex>`, the node id written out so a key copied to the
wrong broker is refused at start with a clear error rather than at every RPC. A broker whose file
holds the master (a data dir made before per-broker keys) still signs with its derived key, so
old clusters keep working; it just holds more than it needs.

A controller whose key names a file that does not exist yet generates one and says where in one
line: that is the upgrade path of a cluster made before RPC authentication. A broker refuses to
start without its file instead, since a key of its own would never match the controllers'.
"""

from __future__ import annotations

import logging
import os
import re
import secrets as random_secrets
import time
from pathlib import Path
from typing import Final

from common.config_schema import Config, ConfigError
from security.rpc_auth import (
    BROKER_KEY_LABEL,
    MIN_SECRET_BYTES,
    NONCE_HEX_CHARS,
    SECRET_FILE_KEY,
    RpcSigner,
    RpcVerifier,
    broker_key,
)

logger = logging.getLogger(__name__)

MAX_SECRET_FILE_BYTES: Final = 4096  # a secret file larger than this is not one: refused before reading
BROKER_KEY_FILE: Final = "rpc.key"  # a broker's own key, in its node directory (`tidelog up`, `tidelog format`)
_BROKER_KEY_TEXT: Final = re.compile(re.escape(BROKER_KEY_LABEL) + r" node=(\d{1,10}) ([0-9a-f]{64})")


def _read(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_SECRET_FILE_BYTES:
            raise ConfigError(f"config {SECRET_FILE_KEY!r}: {path} is larger than {MAX_SECRET_FILE_BYTES} bytes; "
                              "it should hold the cluster's RPC secret or a broker's key")
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {SECRET_FILE_KEY!r}: cannot read {path}: {exc}") from None


def load_secret(path: Path) -> bytes:
    """The master secret `path` holds; ConfigError naming the key and the file when missing or
    malformed, or when it holds a broker's key (which can verify nothing)."""
    text = _read(path)
    if _BROKER_KEY_TEXT.fullmatch(text):
        raise ConfigError(f"config {SECRET_FILE_KEY!r}: {path} holds one broker's RPC key, not the cluster's "
                          "master secret a controller (or an operator's tool) needs: point it at the "
                          "data dir's rpc.secret")
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise ConfigError(f"config {SECRET_FILE_KEY!r}: {path} does not hold hex text") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"config {SECRET_FILE_KEY!r}: {path} holds {len(secret)} bytes, fewer than "
                          f"{MIN_SECRET_BYTES}")
    if os.stat(path).st_mode & 0o077:
        logger.warning("%s is readable by others: anyone who reads it can speak for any broker; "
                       "chmod 600 it", path)
    return secret


def load_or_create_secret(path: Path) -> tuple[bytes, bool]:
    """(the secret, whether this call generated it). Generated with O_EXCL, mode 0600, so two
    processes starting at once agree: the loser reads the winner's file."""
    if not path.exists():
        text = random_secrets.token_hex(MIN_SECRET_BYTES) + "\n"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return load_secret(path), False
        except OSError as exc:
            raise ConfigError(f"config {SECRET_FILE_KEY!r}: cannot create {path}: {exc}") from None
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        return bytes.fromhex(text.strip()), True
    return load_secret(path), False


def load_node_key(path: Path, node_id: int) -> bytes:
    """The key node `node_id` signs with: its broker key file's (which must name this node), or
    the one derived from a master secret file."""
    match = _BROKER_KEY_TEXT.fullmatch(_read(path))
    if match is None:
        return broker_key(load_secret(path), node_id)
    if int(match[1]) != node_id:
        raise ConfigError(f"config {SECRET_FILE_KEY!r}: {path} holds broker {match[1]}'s RPC key, but this is "
                          f"node {node_id}: each broker needs its own (tidelog up writes it as "
                          f"{BROKER_KEY_FILE} in the broker's directory)")
    if os.stat(path).st_mode & 0o077:
        logger.warning("%s is readable by others: anyone who reads it can speak for broker %d; chmod 600 it",
                       path, node_id)
    return bytes.fromhex(match[2])


def broker_key_text(master: bytes, node_id: int) -> str:
    """The text of broker `node_id`'s key file."""
    return f"{BROKER_KEY_LABEL} node={node_id} {broker_key(master, node_id).hex()}\n"


def _path(config: Config) -> Path | None:
    value = config[SECRET_FILE_KEY]
    return Path(value) if isinstance(value, str) and value else None


def signer_from_config(config: Config, node_id: int) -> RpcSigner | None:
    """A broker's signer, or None when the key is unset (its RPCs go unsigned). A combined node's
    broker half may make the file (its controller half would), so which half starts first does
    not matter; a broker alone cannot."""
    path = _path(config)
    if path is None:
        return None
    roles = config["process.roles"]
    if isinstance(roles, tuple) and "controller" in roles:
        return RpcSigner.from_master(node_id, load_or_create_secret(path)[0])
    return RpcSigner(node_id, load_node_key(path, node_id))


def verifier_from_file(path: str | None, node_id: int) -> RpcVerifier | None:
    """A controller's verifier, generating the secret file when `path` names a missing one; None
    (and a warning) when `path` is None (controller.rpc.secret.file unset)."""
    if path is None:
        logger.warning("Controller %d: broker RPCs under /rpc are NOT authenticated (%s is unset): anyone who "
                       "reaches this port can register, heartbeat or fence a broker", node_id, SECRET_FILE_KEY)
        return None
    secret, created = load_or_create_secret(Path(path))
    if created:
        logger.warning("Controller %d: generated the cluster's RPC secret in %s (%s named a missing file); "
                       "copy it to every broker and controller and set %s there", node_id, path,
                       SECRET_FILE_KEY, SECRET_FILE_KEY)
    logger.info("Controller %d: broker RPCs under /rpc require a proof signed with the secret in %s",
                node_id, path)
    return RpcVerifier(secret)


def signed_headers(signer: RpcSigner | None, address: str, path: str, body: bytes) -> dict[str, str]:
    """The Authorization header of one POST signed now with a fresh nonce (none without a signer):
    the client's shell (broker.controller_client) and tools or tests that speak raw HTTP."""
    if signer is None:
        return {}
    return {"Authorization": signer.authorization("POST", address, path, body, now_ms=int(time.time() * 1000),
                                                  nonce=os.urandom(NONCE_HEX_CHARS // 2).hex())}


def cluster_signer(secret_file: Path, node_id: int) -> RpcSigner | None:
    """A signer for node `node_id` from a data dir's master secret file (the operator's side: the
    chaos engine, tests); None when there is none (a cluster started before RPC authentication, or
    with controller.rpc.secret.file left empty)."""
    return RpcSigner.from_master(node_id, load_secret(secret_file)) if secret_file.exists() else None
