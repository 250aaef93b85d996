"""`tidelog users create|delete|list`: SCRAM users over the Kafka protocol (KIP-554's
AlterUserScramCredentials and DescribeUserScramCredentials), with kafka-configs.sh's lines.

    tidelog users create --user alice --password alice-secret [--mechanism SCRAM-SHA-256] [--iterations 8192]
    tidelog users delete --user alice [--mechanism SCRAM-SHA-512]
    tidelog users list [--user alice]

As kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[password=...]' does, the password is
salted and hashed here (a random 32-byte salt, PBKDF2 with the mechanism's HMAC) and only the
salted password is sent: no broker or controller ever sees the password. --mechanism may be
given more than once; create defaults to SCRAM-SHA-512, delete to every mechanism the user has.
"""

from __future__ import annotations

import argparse
import secrets
from typing import Any, Final

from common.protocol.api_keys import ApiKey
from security.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISMS,
    MECHANISMS_BY_TYPE,
    SALT_BYTES,
    SCRAM_SHA_512,
    salted_password,
)
from tidelog import cli_common
from tidelog.cli_common import ClusterError, UsageError

VERSION: Final = 0  # both APIs have only v0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create or replace a user's SCRAM credentials")
    delete = actions.add_parser("delete", help="delete a user's SCRAM credentials")
    list_ = actions.add_parser("list", help="list the users with SCRAM credentials and their iterations")
    for action in (create, delete, list_):
        cli_common.add_cluster_options(action, admin=False)
    for action in (create, delete):
        action.add_argument("--user", required=True, help="the user name (the principal is User:<name>)")
        action.add_argument("--mechanism", action="append", default=[], choices=sorted(MECHANISMS),
                            help="SCRAM-SHA-256 or SCRAM-SHA-512; repeat for both")
    create.add_argument("--password", required=True, help="the user's password (salted and hashed here)")
    create.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                        help=f"PBKDF2 iterations, 4096 to {MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})")
    list_.add_argument("--user", action="append", default=[], help="only this user (repeatable)")
    create.set_defaults(run=cli_common.guarded("users create", run_create))
    delete.set_defaults(run=cli_common.guarded("users delete", run_delete))
    list_.set_defaults(run=cli_common.guarded("users list", run_list))


def _call(args: argparse.Namespace, api_key: ApiKey, request: Any) -> Any:
    from common.broker_connection import BrokerUnavailable
    from common.kafka_client import KafkaClient
    from common.protocol import messages

    found = cli_common.resolve(args, need_kafka=True)
    with KafkaClient(found.bootstrap_servers, client_id="tidelog-users", security=found.security) as client:
        try:
            return client.call(None, api_key, VERSION, request, messages.encode_request,
                               messages.response_decoder(api_key))
        except BrokerUnavailable as exc:
            raise ClusterError("NETWORK_EXCEPTION", f"cannot reach a broker: {exc}") from None


def _alter(args: argparse.Namespace, deletions: tuple[Any, ...], upsertions: tuple[Any, ...]) -> int:
    from common.kafka_client import error_name
    from common.protocol import messages

    m = messages.request_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, VERSION)
    answer = _call(args, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                   m.AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions))
    failed = [r for r in answer.results if int(r.error_code)]
    for r in failed:
        raise ClusterError(error_name(int(r.error_code)), r.error_message or f"user {r.user}")
    print(f"Completed updating config for user {args.user}.")
    return 0


def run_create(args: argparse.Namespace) -> int:
    from common.protocol import messages

    if not 4096 <= args.iterations <= MAX_ITERATIONS:
        raise UsageError(f"--iterations must be between 4096 and {MAX_ITERATIONS}")
    m = messages.request_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, VERSION)
    upsertions = []
    for name in dict.fromkeys(args.mechanism or [SCRAM_SHA_512.name]):
        mechanism = MECHANISMS[name]
        salt = secrets.token_bytes(SALT_BYTES)
        upsertions.append(m.ScramCredentialUpsertion(
            name=args.user, mechanism=mechanism.type_code, iterations=args.iterations, salt=salt,
            salted_password=salted_password(mechanism, args.password, salt, args.iterations)))
    if len(upsertions) > 1:  # one request may name a user once (KIP-554): one call per mechanism
        for upsertion in upsertions:
            _alter(args, (), (upsertion,))
        return 0
    return _alter(args, (), tuple(upsertions))


def _described(args: argparse.Namespace, users: list[str] | None) -> list[Any]:
    from common.kafka_client import error_name
    from common.protocol import messages

    m = messages.request_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, VERSION)
    request = m.DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(m.UserName(name=u) for u in users))
    answer = _call(args, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request)
    if int(answer.error_code):
        raise ClusterError(error_name(int(answer.error_code)), answer.error_message or "describe failed")
    for r in answer.results:
        if int(r.error_code):
            raise ClusterError(error_name(int(r.error_code)), r.error_message or f"user {r.user}")
    return list(answer.results)


def run_delete(args: argparse.Namespace) -> int:
    from common.protocol import messages

    codes = [MECHANISMS[name].type_code for name in dict.fromkeys(args.mechanism)]
    if not codes:
        codes = [int(info.mechanism) for r in _described(args, [args.user]) for info in r.credential_infos]
    m = messages.request_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, VERSION)
    for code in codes:  # one request may name a user once (KIP-554)
        _alter(args, (m.ScramCredentialDeletion(name=args.user, mechanism=code),), ())
    return 0


def credential_line(user: str, infos: list[tuple[int, int]]) -> str:
    """kafka-configs.sh --describe --entity-type users' line for one user."""
    shown = ", ".join(f"{MECHANISMS_BY_TYPE[code].name if code in MECHANISMS_BY_TYPE else code}=iterations={i}"
                      for code, i in infos)
    return f"SCRAM credential configs for user-principal '{user}' are {shown}"


def run_list(args: argparse.Namespace) -> int:
    for r in _described(args, args.user or None):
        print(credential_line(r.user, [(int(i.mechanism), int(i.iterations)) for i in r.credential_infos]))
    return 0
