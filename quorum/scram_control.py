"""AlterUserScramCredentials (KIP-554) as a pure rule: Kafka's ScramControlManager.alterCredentials,
with Kafka's codes and messages (the describe, which brokers answer too, is security.scram_image's).

    result = alter_credentials(image, deletions=[...], upsertions=[...])   # ControllerResult
    result.records      # UserScramCredential / RemoveUserScramCredential, for the accepted ones
    result.response     # one ScramOutcome per user named, in Kafka's order

An upsertion carries the salted password (the client salts and hashes, as kafka-configs.sh
does), from which the rule keeps only the stored and server keys; the password never reaches a
controller. A user named twice in one request (two deletions, two upsertions, or both) gets
DUPLICATE_RESOURCE and no change; the others are judged one by one.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from common.errors import ErrorCode
from metadata.image import MetadataImage
from metadata.records import Record, RemoveUserScramCredential, UserScramCredential
from quorum.controller_result import ControllerResult
from security.scram import MAX_ITERATIONS, MECHANISMS_BY_TYPE, ScramCredential
from security.scram_image import DESCRIBE_DUPLICATE_MESSAGE, UserCredentials, describe_credentials

__all__ = ["DESCRIBE_DUPLICATE_MESSAGE", "DUPLICATE_MESSAGE", "Deletion", "ScramOutcome", "Upsertion",
           "UserCredentials", "alter_credentials", "describe_credentials"]

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

MAX_CHANGES_PER_REQUEST: Final = 1000  # deletions plus upsertions in one request (an admin API body bound)
DUPLICATE_MESSAGE: Final = "A user credential cannot be altered twice in the same request"


@dataclass(frozen=True, slots=True)
class Deletion:
    name: str
    mechanism: int  # Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True, slots=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class ScramOutcome:
    """One user's answer: error None is success."""

    user: str
    error: ErrorCode | None = None
    message: str | None = None


def _deletion_error(image: MetadataImage, d: Deletion) -> ScramOutcome | None:
    if d.mechanism not in MECHANISMS_BY_TYPE:
        return ScramOutcome(d.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if (d.name, d.mechanism) not in image.scram.credentials:
        return ScramOutcome(d.name, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    return None


def _upsertion_error(u: Upsertion) -> ScramOutcome | None:
    mechanism = MECHANISMS_BY_TYPE.get(u.mechanism)
    if not u.name:
        return ScramOutcome(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism is None:
        return ScramOutcome(u.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if u.iterations < mechanism.min_iterations:
        return ScramOutcome(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if u.iterations > MAX_ITERATIONS:
        return ScramOutcome(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    if not u.salt or not u.salted_password:
        return ScramOutcome(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    return None


def _record(u: Upsertion) -> UserScramCredential:
    credential = ScramCredential.from_salted_password(MECHANISMS_BY_TYPE[u.mechanism], u.salted_password,
                                                      u.salt, u.iterations)

    def text(data: bytes) -> str:
        return base64.b64encode(data).decode()
    return UserScramCredential(u.name, u.mechanism, text(credential.salt), text(credential.stored_key),
                               text(credential.server_key), u.iterations)


def alter_credentials(image: MetadataImage, deletions: Sequence[Deletion],
                      upsertions: Sequence[Upsertion]) -> ControllerResult[list[ScramOutcome]]:
    """Kafka's ScramControlManager.alterCredentials: deletions first, then upsertions, then the
    users named twice; a record per accepted change."""
    seen: set[str] = set()
    duplicated: set[str] = set()
    for name in [d.name for d in deletions] + [u.name for u in upsertions]:
        (duplicated if name in seen else seen).add(name)
    records: list[Record] = []
    outcomes: list[ScramOutcome] = []
    for d in deletions:
        if d.name in duplicated:
            continue
        error = _deletion_error(image, d)
        if error is None:
            records.append(RemoveUserScramCredential(d.name, d.mechanism))
        outcomes.append(error or ScramOutcome(d.name))
    for u in upsertions:
        if u.name in duplicated:
            continue
        error = _upsertion_error(u)
        if error is None:
            records.append(_record(u))
        outcomes.append(error or ScramOutcome(u.name))
    outcomes += [ScramOutcome(name, ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE) for name in sorted(duplicated)]
    return ControllerResult(records, outcomes)
