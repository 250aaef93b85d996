"""quorum.scram_control: Kafka's ScramControlManager rules for KIP-554, as tables."""

from __future__ import annotations

import base64

import pytest

from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import RemoveUserScramCredential, UserScramCredential
from quorum.scram_control import (
    DESCRIBE_DUPLICATE_MESSAGE,
    DUPLICATE_MESSAGE,
    Deletion,
    ScramOutcome,
    Upsertion,
    UserCredentials,
    alter_credentials,
    describe_credentials,
)
from security.scram import SCRAM_SHA_512, ScramClient, ScramCredential, ScramServer, salted_password

SALT = b"s" * 32


def upsert(name: str, mechanism: int = 2, iterations: int = 4096, password: str = "pw") -> Upsertion:
    return Upsertion(name, mechanism, iterations, SALT, salted_password(SCRAM_SHA_512, password, SALT, iterations))


def image_with(*upsertions: Upsertion) -> MetadataImage:
    return apply(EMPTY_IMAGE, enumerate(alter_credentials(EMPTY_IMAGE, [], upsertions).records))


ALICE = image_with(upsert("alice"))
OK = None

ALTERS = [
    # (image, deletions, upsertions, outcomes as (user, error, message), record types)
    (EMPTY_IMAGE, [], [upsert("alice")], [("alice", OK, None)], [UserScramCredential]),
    (ALICE, [Deletion("alice", 2)], [], [("alice", OK, None)], [RemoveUserScramCredential]),
    (ALICE, [Deletion("alice", 1)], [],
     [("alice", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")], []),
    (ALICE, [Deletion("alice", 9)], [], [("alice", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")], []),
    (EMPTY_IMAGE, [], [upsert("bob", mechanism=3)],
     [("bob", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")], []),
    (EMPTY_IMAGE, [], [upsert("bob", iterations=4095)], [("bob", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")], []),
    (EMPTY_IMAGE, [], [upsert("bob", iterations=16385)],
     [("bob", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")], []),
    (EMPTY_IMAGE, [], [upsert("")], [("", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")], []),
    # a user named twice: DUPLICATE_RESOURCE, no change for them; others are judged alone
    (ALICE, [Deletion("alice", 2)], [upsert("alice"), upsert("bob")],
     [("bob", OK, None), ("alice", ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE)], [UserScramCredential]),
    (EMPTY_IMAGE, [], [upsert("bob"), upsert("bob", mechanism=1)],
     [("bob", ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE)], []),
]


@pytest.mark.parametrize("image, deletions, upsertions, outcomes, types", ALTERS)
def test_alter(image: MetadataImage, deletions: list[Deletion], upsertions: list[Upsertion],
               outcomes: list[tuple[str, ErrorCode | None, str | None]], types: list[type]) -> None:
    result = alter_credentials(image, deletions, upsertions)
    assert result.response == [ScramOutcome(*o) for o in outcomes]
    assert [type(r) for r in result.records] == types


def test_upsertion_keeps_keys_that_authenticate_the_password_and_not_the_password() -> None:
    record = alter_credentials(EMPTY_IMAGE, [], [upsert("alice", password="alice-secret")]).records[0]
    assert isinstance(record, UserScramCredential) and "alice-secret" not in repr(record)
    credential = ScramCredential(SCRAM_SHA_512, base64.b64decode(record.salt), base64.b64decode(record.stored_key),
                                 base64.b64decode(record.server_key), record.iterations)
    server = ScramServer(SCRAM_SHA_512, {"alice": credential}.get, "srv")
    client = ScramClient(SCRAM_SHA_512, "alice", "alice-secret", "cli")
    assert client.verify(server.evaluate(client.final(server.evaluate(client.first()))))


BOTH = image_with(upsert("alice"), upsert("bob", mechanism=1, iterations=8192))
DESCRIBES = [
    (None, [UserCredentials("alice", ((2, 4096),)), UserCredentials("bob", ((1, 8192),))]),
    (["bob"], [UserCredentials("bob", ((1, 8192),))]),
    (["carol"], [UserCredentials("carol", error=ErrorCode.RESOURCE_NOT_FOUND,
                                 message="Attempt to describe a user credential that does not exist: carol")]),
    (["bob", "bob"], [UserCredentials("bob", error=ErrorCode.DUPLICATE_RESOURCE, message=DESCRIBE_DUPLICATE_MESSAGE)]),
    ([], []),
]


@pytest.mark.parametrize("users, expected", DESCRIBES)
def test_describe(users: list[str] | None, expected: list[UserCredentials]) -> None:
    assert describe_credentials(BOTH, users) == expected
