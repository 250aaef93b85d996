"""tidelog/cli_transactions.py: kafka-transactions.sh's options, the abort forms, and the usage
errors that stop a command before it connects anywhere (exit 2, Kafka's message)."""

from __future__ import annotations

import pytest

from common import transaction_admin as ta
from common.topic_partition import TopicPartition
from tidelog.cli import build_parser, main
from tidelog.cli_common import UsageError
from tidelog.cli_transactions import abort_request

NOWHERE = ["--bootstrap-server", "127.0.0.1:1"]  # never reached: each case fails before connecting


@pytest.mark.parametrize(("argv", "expected"), [
    (["list"], {"duration_filter": None}),
    (["list", "--duration-filter", "60000"], {"duration_filter": 60000}),
    (["describe", "--transactional-id", "app-1"], {"transactional_id": "app-1"}),
    (["describe-producers", "--topic", "t", "--partition", "2"], {"topic": "t", "partition": 2, "broker_id": None}),
    (["describe-producers", "--topic", "t", "--partition", "2", "--broker-id", "3"], {"broker_id": 3}),
    (["abort", "--topic", "t", "--partition", "0", "--start-offset", "120"], {"start_offset": 120}),
    (["find-hanging", "--broker-id", "2"], {"broker_id": 2, "max_transaction_timeout": 15, "topic": None}),
    (["find-hanging", "--topic", "t", "--partition", "1", "--max-transaction-timeout", "0"],
     {"topic": "t", "partition": 1, "max_transaction_timeout": 0}),
])
def test_options_are_kafkas(argv: list[str], expected: dict[str, object]) -> None:
    args = build_parser().parse_args(["transactions", *argv])
    assert {k: getattr(args, k) for k in expected} == expected
    assert callable(args.run)


@pytest.mark.parametrize("argv", [
    ["describe"],                                                  # --transactional-id is required
    ["describe-producers", "--topic", "t"],                        # so is --partition
    ["abort", "--topic", "t", "--partition", "-1", "--start-offset", "0"],
    ["abort", "--topic", "t", "--partition", "0", "--start-offset", "x"],
    ["find-hanging", "--max-transaction-timeout", "-5", "--broker-id", "1"],
])
def test_bad_options_are_refused_by_the_parser(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["transactions", *argv])
    assert e.value.code == 2


def _abort_args(*extra: str):  # noqa: ANN202
    return build_parser().parse_args(["transactions", "abort", "--topic", "t", "--partition", "4", *extra])


def test_abort_by_start_offset_leaves_the_producer_to_the_leader() -> None:
    assert abort_request(_abort_args("--start-offset", "120")) == 120


def test_abort_older_form_takes_an_explicit_spec_and_clamps_epoch_minus_one_to_zero() -> None:
    spec = abort_request(_abort_args("--producer-id", "4000", "--producer-epoch", "3", "--coordinator-epoch", "-1"))
    assert spec == ta.AbortSpec(TopicPartition("t", 4), 4000, 3, 0)


@pytest.mark.parametrize(("extra", "message"), [
    ((), "either with --start-offset"),
    (("--producer-id", "1"), "Missing required argument --producer-epoch"),
    (("--producer-id", "1", "--producer-epoch", "0"), "Missing required argument --coordinator-epoch"),
])
def test_abort_needs_a_whole_identification(extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        abort_request(_abort_args(*extra))


@pytest.mark.parametrize(("argv", "message"), [
    (["find-hanging"], "requires either --topic or --broker-id"),
    (["find-hanging", "--partition", "0", "--broker-id", "1"], "--partition argument requires --topic"),
    (["abort", "--topic", "t", "--partition", "0"], "either with --start-offset"),
])
def test_usage_errors_exit_2_before_connecting(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transactions", *argv, *NOWHERE]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("tidelog transactions ")


def test_an_unreachable_cluster_exits_1_with_kafkas_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transactions", "list", *NOWHERE]) == 1
    assert capsys.readouterr().err.startswith("Error: NETWORK_EXCEPTION")
