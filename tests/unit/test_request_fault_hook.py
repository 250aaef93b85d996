"""broker/request_fault_hook.py: a delay fault serves an API whose appends keep the connection's
order (its table row says `ordered_appends`) at once and holds its answer; any other API is
served after the delay."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from broker.handlers.context import ApiRow, ClientInfo
from broker.request_fault_hook import start_faulted
from broker.request_faults import ActiveFault, FaultSpec
from broker.request_handler import API_TABLE, ROWS
from broker.server import Later
from common.protocol.api_keys import ApiKey

CLIENT = ClientInfo.of("app", "127.0.0.1")
ANSWER = [b"answer"]


def test_produce_is_the_one_api_whose_row_says_its_appends_keep_the_connections_order() -> None:
    assert [row.api_key for row in API_TABLE if row.ordered_appends] == [ApiKey.PRODUCE]


@pytest.mark.parametrize("ordered_appends", [True, False])
def test_a_delay_serves_an_ordered_row_at_once_and_any_other_after_the_delay(ordered_appends: bool) -> None:
    # Metadata's row with the flag set or not: the hook must read the row, not the API's name.
    row = dataclasses.replace(ROWS[ApiKey.METADATA], ordered_appends=ordered_appends)
    fault = ActiveFault(1, FaultSpec("delay", row.api_key, delay_ms=1))
    served: list[ApiRow] = []

    def serve(served_row: ApiRow) -> list[bytes]:
        served.append(served_row)
        return ANSWER

    async def run() -> tuple[int, list[bytes] | None]:
        answer = start_faulted(fault, row, object(), 0, CLIENT, serve)  # type: ignore[arg-type]
        assert isinstance(answer, Later)
        at_start = len(served)
        return at_start, await answer.answer

    at_start, answer = asyncio.run(run())
    assert at_start == (1 if ordered_appends else 0)
    assert answer == ANSWER and served == [row]
