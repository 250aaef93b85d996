"""What the benchmarks share: the admin API over HTTP, bounded waits, a process's CPU and
memory from /proc, a broker's /metrics gauges. One home, so every bench measures alike.

The benches run as scripts (`python bench/x.py`): bench/ is on sys.path, so `import
bench_common` works from any of them.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from common.prometheus import samples
from common import waiting
from localcluster.node_process import NodeProcess

CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
HTTP_TIMEOUT_S: Final = 120.0  # a controller creating 10,000 partitions answers slowly
WAIT_S: Final = 300.0


def http(url: str, method: str = "GET", body: Any = None, timeout: float = HTTP_TIMEOUT_S) -> Any:
    """One admin API call with a JSON body (or none); its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def wait_until(what: str, condition: Callable[[], Any], timeout: float = WAIT_S, poll: float = 0.05) -> Any:
    """`common.waiting.wait_until`, where a half-started node's odd answer is also "not yet"."""
    return waiting.wait_until(what, condition, timeout, poll_s=poll,
                              not_yet=(*waiting.NOT_YET_ERRORS, ValueError, KeyError))


def process_cpu_s(pid: int) -> float:
    """utime + stime of `pid` (every thread), in seconds (fields 14 and 15 of proc(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    """Resident memory of `pid` in MiB (VmRSS), NaN once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return float("nan")


def broker_gauge(node: NodeProcess, name: str, timeout: float = HTTP_TIMEOUT_S) -> float:
    """One unlabelled `tidelog_broker_<name>` value from a broker's /metrics (KeyError if absent)."""
    with urllib.request.urlopen(node.spec.metrics_url, timeout=timeout) as answer:
        return samples(answer.read().decode())[f"tidelog_broker_{name}"]


class AnswerChain:
    """A fake leader connection's `KafkaConnection.requests` (the in-turn answer chain the replica
    fetcher drives) over its own `request`: each answer handed to `on_answer`, whose next payload
    is sent, until it returns None. A real connection hands each answer on in its read callback;
    the fetcher's work per round is the same."""

    async def request(self, api_key: int, version: int, payload: Any, decode: Any, **kw: Any) -> Any:
        raise NotImplementedError

    async def requests(self, api_key: int, version: int, payload: Any, decode: Any, on_answer: Any,
                       **kw: Any) -> None:
        while payload is not None:  # until the fetcher stops asking (or the bench ends first)
            payload = on_answer(await self.request(api_key, version, payload, decode, **kw))
