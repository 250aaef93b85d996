"""The transactional chaos client's bound on send_offsets_to_transaction (librdkafka #5456 /
#5511: the call can hang past its own timeout): `bounded` returns, raises the call's error, or
gives up with CallHung; a hung call is then aborted when librdkafka lets it, and otherwise
recorded as a transaction of unknown outcome, never as committed or aborted."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from chaos.engine import txn_client
from chaos.engine.txn_client import CallHung, Client, bounded

confluent_kafka: Any = pytest.importorskip("confluent_kafka")

SHORT_S = 0.05  # the bound a test gives a call that blocks
CONFLICT = confluent_kafka.KafkaException(confluent_kafka.KafkaError(confluent_kafka.KafkaError._CONFLICT))


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What a blocking call waits on; set when the test ends, so no thread outlives it."""
    event = threading.Event()
    yield event
    event.set()


def test_bounded_returns_when_the_call_does() -> None:
    calls: list[int] = []
    bounded(lambda: calls.append(1), 5.0, "call")
    assert calls == [1]


def test_bounded_raises_the_calls_own_error() -> None:
    def fails() -> None:
        raise CONFLICT
    with pytest.raises(confluent_kafka.KafkaException):
        bounded(fails, 5.0, "call")


def test_bounded_gives_up_on_a_call_that_does_not_return(gate: threading.Event) -> None:
    with pytest.raises(CallHung, match="send_offsets_to_transaction still running after 0.05 s"):
        bounded(lambda: gate.wait() and None, SHORT_S, "send_offsets_to_transaction")


class Producer:
    """A producer whose send_offsets_to_transaction blocks on `gate`, as librdkafka's does on a
    decommissioned group coordinator; abort_transaction answers `abort`."""

    def __init__(self, gate: threading.Event, abort: BaseException | None) -> None:
        self.gate, self.abort = gate, abort
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append("produce")

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.calls.append("send_offsets")
        self.gate.wait()

    def commit_transaction(self, *args: Any) -> None:
        self.calls.append("commit")

    def abort_transaction(self, *args: Any) -> None:
        self.calls.append("abort")
        if self.abort is not None:
            raise self.abort


def run_hung(monkeypatch: pytest.MonkeyPatch, producer: Producer) -> tuple[str, list[dict[str, Any]]]:
    monkeypatch.setattr(txn_client, "SEND_OFFSETS_BOUND_S", SHORT_S)
    events: list[dict[str, Any]] = []
    client = Client(argparse.Namespace(name="tp0"), lambda kind, **fields: events.append({"kind": kind, **fields}))
    outcome, _ = client.run_one(producer, "tp0-0-1", [("a", 0, "tp0-0-1-0")], [], lambda: ([], None))
    return outcome, events


@pytest.mark.parametrize(("abort", "outcome", "last"), [
    (CONFLICT, "info", "txn-info"),  # librdkafka refuses a second call while one runs
    (None, "fail", "txn-fail"),      # were it to accept, the transaction is aborted
])
def test_a_hung_send_offsets_is_never_a_commit(monkeypatch: pytest.MonkeyPatch, gate: threading.Event,
                                              abort: BaseException | None, outcome: str, last: str) -> None:
    producer = Producer(gate, abort)
    got, events = run_hung(monkeypatch, producer)
    assert got == outcome
    assert producer.calls == ["begin", "produce", "send_offsets", "abort"]
    kinds = [e["kind"] for e in events]
    assert kinds == ["txn-invoke", "note", last]
    assert events[1]["what"] == "txn-call-hung" and events[1]["call"] == "send_offsets_to_transaction"
    assert events[2]["committing"] is False
