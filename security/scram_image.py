"""The SCRAM credentials of a metadata image, pure: DescribeUserScramCredentials (KIP-554) as
Kafka answers it from its ScramImage, for brokers (from their image) and the admin API alike.

    describe_credentials(image, None)        # every user with a credential
    describe_credentials(image, ["alice"])   # RESOURCE_NOT_FOUND / DUPLICATE_RESOURCE per user
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from common.errors import ErrorCode
from metadata.image import MetadataImage

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

DESCRIBE_DUPLICATE_MESSAGE: Final = "Cannot describe SCRAM credentials for the same user twice in a single request"


@dataclass(frozen=True, slots=True)
class UserCredentials:
    """DescribeUserScramCredentials' result for one user: (mechanism, iterations) pairs."""

    user: str
    credentials: tuple[tuple[int, int], ...] = ()
    error: ErrorCode | None = None
    message: str | None = None


def describe_credentials(image: MetadataImage, users: Sequence[str] | None) -> list[UserCredentials]:
    """Every user with a credential (None), or the users named, as Kafka's describe answers."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for (name, mechanism), record in sorted(image.scram.credentials.items()):
        by_user.setdefault(name, []).append((mechanism, record.iterations))
    if users is None:
        return [UserCredentials(name, tuple(found)) for name, found in by_user.items()]
    out: list[UserCredentials] = []
    counted: dict[str, int] = {}
    for user in users:
        counted[user] = counted.get(user, 0) + 1
    for user in dict.fromkeys(users):  # each name once, in the request's order
        if counted[user] > 1:
            out.append(UserCredentials(user, error=ErrorCode.DUPLICATE_RESOURCE, message=DESCRIBE_DUPLICATE_MESSAGE))
        elif user not in by_user:
            out.append(UserCredentials(user, error=ErrorCode.RESOURCE_NOT_FOUND,
                                       message=f"Attempt to describe a user credential that does not exist: {user}"))
        else:
            out.append(UserCredentials(user, tuple(by_user[user])))
    return out
