"""The RPC secret file (`controller.rpc.secret.file`, issue 29): read it, or make it once.

    secret = load_or_create_secret(path)     # a controller, `tidelog up`: generated (0600) when missing
    secret = load_secret(path)               # a broker: it must exist (a broker cannot make the cluster's)
    signer = signer_from_config(config, 4)   # None when the key is unset: RPCs go unsigned

The file holds the secret as hex text (64 hex characters, 256 bits). A controller whose key
names a file that does not exist yet generates one and says where in one line: that is the
upgrade path of a cluster made before RPC authentication (copy the file to every broker, set the
key there, restart). A broker refuses to start without it instead, since a secret of its own
would never match the controllers'.
"""

from __future__ import annotations

import logging
import os
import secrets as random_secrets
import time
from pathlib import Path
from typing import Final

from common.config_schema import Config, ConfigError
from security.rpc_auth import MIN_SECRET_BYTES, NONCE_HEX_CHARS, SECRET_FILE_KEY, RpcSigner, RpcVerifier

logger = logging.getLogger(__name__)

MAX_SECRET_FILE_BYTES: Final = 4096  # a secret file larger than this is not one: refused before reading


def load_secret(path: Path) -> bytes:
    """The secret `path` holds; ConfigError naming the key and the file when missing or malformed."""
    try:
        if path.stat().st_size > MAX_SECRET_FILE_BYTES:
            raise ConfigError(f"config {SECRET_FILE_KEY!r}: {path} is larger than {MAX_SECRET_FILE_BYTES} bytes; "
                              "it should hold the cluster's RPC secret as 64 hex characters")
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {SECRET_FILE_KEY!r}: cannot read {path}: {exc}") from None
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
    combined = isinstance(roles, tuple) and "controller" in roles
    return RpcSigner(node_id, load_or_create_secret(path)[0] if combined else load_secret(path))


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
    """A signer for node `node_id` from a data dir's secret file; None when there is none (a cluster
    started before RPC authentication, or with controller.rpc.secret.file left empty)."""
    return RpcSigner(node_id, load_secret(secret_file)) if secret_file.exists() else None
