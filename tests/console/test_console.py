"""The web console in a real browser against a real cluster (issue 32).

One module-scoped 3-controller + 3-broker cluster with `admin.token` set, a topic of 30 JSON records,
a consumer group that read 10 of them and left (lag 20), a share group with one member (lag 4), a
committed transaction and an open one, a finished chaos report and one still being written. Headless Debian chromium, driven by selenium through Debian's chromium-driver, opens every
page: no errors in the browser's console log, the expected numbers in the DOM, a screenshot per page
under the test's tmp dir (with UPDATE_SCREENSHOTS=1, the cluster and group ones are copied to docs/
for the README). Actions go
through the admin API as the CLI's do: refused without the token with the cluster unchanged, done
with it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from chaos.history import History
from chaos.report.html import write_report
from chaos.scenarios.spec import parse_scenario
from common.waiting import wait_until
from tests.integration import cluster_fixtures
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError
from tidelog.testing import Cluster

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium"),
    pytest.mark.skipif(DRIVER is None, reason="chromium-driver is not installed: apt-get install chromium-driver"),
    pytest.mark.timeout(180),
]

TOKEN = "console-test-token"
DOCS = Path(__file__).resolve().parents[2] / "docs"
UPDATE_SCREENSHOTS = "UPDATE_SCREENSHOTS"  # =1: copy the cluster and group screenshots to docs/
PAGE_TIMEOUT_S = 15.0
T = TypeVar("T")

SCENARIO = """
name = "console-hand-written"
summary = "a hand-written history the console opens"
[[topics]]
name = "chaos"
partitions = 2
[[faults]]
action = "kill"
target = "leader:chaos:0"
at_s = 2
duration_s = 2
"""


def _history(path: Path, writes: int) -> History:
    ticks = iter([0.0] + [i * 0.01 for i in range(1, 100_000)])
    history = History(path.open("w"), clock=lambda: next(ticks), wall=lambda: 0.0)
    history.record("note", what="scenario", name="console-hand-written", seed=7,
                   schedule=[{"id": "f1", "start_s": 2.0, "end_s": 4.0, "fault": "kill leader:chaos:0"}])
    history.record("phase", name="workload")
    for n in range(writes):
        history.record("invoke", process="p0", value=str(n), partition=n % 2)
        history.record("ok", process="p0", value=str(n), partition=n % 2, offset=n // 2)
        if n == 100:
            history.record("fault-start", id="f1", action="kill", description="kill leader:chaos:0", targets=[4])
        if n == 250:
            history.record("fault-end", id="f1", action="kill")
    return history


def _reports(root: Path) -> None:
    finished = root / "finished-run"
    finished.mkdir(parents=True)
    (finished / "scenario.toml").write_text(SCENARIO)
    history = _history(finished / "history.jsonl", 400)
    history.record("phase", name="verify")
    history.close()
    write_report(finished, parse_scenario(SCENARIO))
    running = root / "running-run"
    running.mkdir()
    live = _history(running / "history.jsonl", 50)
    live.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    reports = tmp_path_factory.mktemp("chaos-reports")
    _reports(reports)
    from confluent_kafka import Consumer, Producer, TopicPartition

    with Cluster(brokers=3, broker_config={"admin.token": TOKEN, "console.chaos.reports.dir": str(reports),
                                           "share.auto.offset.reset": "earliest"},
                 fast_start=cluster_fixtures.FORK_NODES) as cluster:
        admin = AdminClient([cluster.admin_url], token=TOKEN)
        admin.create_topic("orders", partitions=3, replication_factor=3, configs={"retention.ms": "3600000"})
        admin.create_topic("audit", partitions=1, replication_factor=3, configs={})
        cluster.wait_for_leaders("orders")
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for n in range(30):
            producer.produce("orders", key=f"k{n}", value=json.dumps({"n": n}), partition=n % 3,
                             headers={"source": b"test"})
        assert producer.flush(15) == 0
        del producer  # its connections close now, not at the cluster's stop
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "billing",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        # 10 of the 30 records read (partition 0 holds 10, committed 4; the others 10, committed 3): lag 20
        consumer.commit(offsets=[TopicPartition("orders", p, 3 + (p == 0)) for p in range(3)], asynchronous=False)
        consumer.close()
        # transactions: one committed, one left open (on its own topic: orders' last stable offset stays put)
        admin.create_topic("ledger", partitions=1, replication_factor=3, configs={})
        cluster.wait_for_leaders("ledger")
        done = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "ledger-done"})
        done.init_transactions(15)
        done.begin_transaction()
        done.produce("ledger", value=b"committed")
        done.commit_transaction(15)
        del done
        open_txn = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "ledger-open",
                             "transaction.timeout.ms": 600_000})  # open through the module's tests
        open_txn.init_transactions(15)
        open_txn.begin_transaction()
        open_txn.produce("ledger", value=b"pending")
        assert open_txn.flush(15) == 0
        share = _share_group(cluster.bootstrap_servers)
        try:
            yield {"cluster": cluster, "admin": admin, "reports": reports}
        finally:
            share.close()
            open_txn.abort_transaction(15)
            del open_txn


def _share_group(bootstrap: str) -> Any:
    """Share group "workers" on audit-0: one member that acknowledged the 8 records it was given,
    then 4 more written: its start offset (SPSO) 8, log end 12, lag 4. The member stays."""
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n in range(8):
        producer.produce("audit", value=f"a{n}")
    assert producer.flush(15) == 0
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "workers",
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe(["audit"])
    got: list[Any] = []

    def polled() -> bool:
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            got.append(m)
        return len(got) >= 8
    wait_until("the share consumer's 8 records", polled, 30.0)
    consumer.commit_sync(15)
    for n in range(8, 12):
        producer.produce("audit", value=f"a{n}")
    assert producer.flush(15) == 0
    return consumer


@pytest.fixture(scope="module")
def browser(env: dict[str, Any]) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--no-first-run", "--disable-background-networking", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any, env: dict[str, Any], tmp_path: Path) -> Callable[..., Any]:
    """Open a console page by its hash; returns a helper that waits for a CSS selector."""

    loads = iter(range(1_000_000))

    def open_page(hash_: str, *, token: str | None = None) -> None:
        browser.get(f"{env['cluster'].admin_url}/console/static/console.css")  # same origin, no requests
        browser.execute_script("sessionStorage.setItem('tidelog-token', arguments[0]);", token or "")
        browser.get_log("browser")  # from here on, the log is this page's
        # a new query string: a real load (a hash change alone would not reload the page)
        browser.get(f"{env['cluster'].admin_url}/console/?load={next(loads)}#{hash_}")
    return open_page


def wait(browser: Any, what: str, check: Callable[[], T | None]) -> T:
    return wait_until(what, check, PAGE_TIMEOUT_S, not_yet=(WebDriverException, IndexError, ValueError))


def texts(browser: Any, selector: str) -> list[str]:
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, selector)]


def wait_texts(browser: Any, selector: str, ok: Callable[[list[str]], bool]) -> list[str]:
    """The texts of `selector` once `ok` holds for them (the page draws after its fetches answer)."""
    return wait(browser, f"{selector} as expected", lambda: (lambda found: found if ok(found) else None)(
        texts(browser, selector)))


def message(browser: Any) -> str:
    box = browser.find_element(By.ID, "message")
    return box.text if box.is_displayed() else ""


def no_console_errors(browser: Any, allowed_statuses: tuple[int, ...] = ()) -> None:
    """No SEVERE line in the browser's log since the page opened, but an `allowed_statuses` answer
    and the origin's /favicon.ico: the console names its icon (`data:,`) and never asks for that
    URL, but `open_page` first shows the stylesheet as a document of the same origin, for which
    Chromium asks it, and that 404 may land in the log after it was read (once in a CI run)."""
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"
              and not any(f"status of {s}" in e["message"] for s in allowed_statuses)
              and "/favicon.ico - " not in e["message"]]
    assert errors == []


def shot(browser: Any, tmp_path: Path, name: str, docs: str | None = None) -> None:
    """A screenshot under the test's tmp dir; the README's two are refreshed in docs/ only when
    asked (UPDATE_SCREENSHOTS=1) or missing, so a test run leaves the work tree as it found it."""
    path = tmp_path / f"{name}.png"
    assert browser.save_screenshot(str(path)) and path.stat().st_size > 10_000
    if docs is not None and (os.environ.get(UPDATE_SCREENSHOTS) == "1" or not (DOCS / docs).exists()):
        shutil.copyfile(path, DOCS / docs)


def card(browser: Any, label: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, f'[data-card="{label}"] .value').text)


# --- the pages


def test_cluster_page(browser: Any, page: Callable[..., Any], env: dict[str, Any], tmp_path: Path) -> None:
    page("cluster")
    states = wait_texts(browser, "#brokers [data-state]", lambda s: s == ["RUNNING"] * 3)
    assert states == ["RUNNING"] * 3
    # ... as each broker tells it (its tidelog_broker_state on /metrics), not the controller's guess
    # (a poll: one /metrics read may time out on a loaded machine and fall back for that refresh)
    wait(browser, "the brokers' own states", lambda: [(c.text, c.get_attribute("data-source")) for c in
         browser.find_elements(By.CSS_SELECTOR, "#brokers [data-state]")] == [("RUNNING", "broker")] * 3)
    assert len(texts(browser, "#controllers tr[data-controller]")) == 3
    assert sum("(active)" in t for t in texts(browser, "#controllers tr[data-controller]")) == 1
    # partitions led: every partition of the cluster has exactly one leader among the brokers
    topics = env["admin"].topics()
    led = sum(int(t.replace(",", "")) for t in texts(browser, "#brokers [data-led]"))
    assert led == sum(t["partitions"] for t in topics)
    assert any("topic orders created" in t for t in texts(browser, "#history span"))
    # bytes in/s comes from each broker's /metrics once two samples were taken
    wait(browser, "a byte rate", lambda: any(c.text not in ("—", "") for c in browser.find_elements(
        By.CSS_SELECTOR, "#brokers tr[data-broker] td:nth-child(7)")))
    no_console_errors(browser)
    shot(browser, tmp_path, "cluster", docs="console-cluster.png")


def test_topics_page_counts_search_and_detail(browser: Any, page: Callable[..., Any], env: dict[str, Any],
                                              tmp_path: Path) -> None:
    page("topics?q=ord")
    wait(browser, "the topic list", lambda: texts(browser, "#topic-list tr[data-topic]") or None)
    assert [r.split()[0] for r in texts(browser, "#topic-list tr[data-topic]")] == ["orders"]
    total = sum(t["partitions"] for t in env["admin"].topics())
    assert card(browser, "partitions") == f"{total:,}" and card(browser, "offline") == "0"
    assert card(browser, "under min ISR") == "0"
    shot(browser, tmp_path, "topics")
    page("topic/orders")
    ends = wait_texts(browser, "#partitions [data-end]", lambda e: len(e) == 3 and "—" not in e)
    assert sum(int(e) for e in ends) == 30
    wait(browser, "the configs", lambda: "retention.ms" in browser.find_element(By.ID, "config-list").text)
    row = next(r for r in texts(browser, "#config-list tr") if r.startswith("retention.ms"))
    assert "3600000" in row and "DYNAMIC_TOPIC_CONFIG" in row
    no_console_errors(browser)
    shot(browser, tmp_path, "topic")


def test_topic_page_draws_the_consume_rate(browser: Any, page: Callable[..., Any], env: dict[str, Any]) -> None:
    """Beside the produce rate, the bytes consumers fetched per second, from the brokers'
    tidelog_broker_topic_bytes_out_total{topic}: zero until a consumer reads, then above it."""
    from confluent_kafka import Consumer, TopicPartition

    page("topic/orders")
    # read in one go: each poll redraws the element (a stale reference otherwise)
    text, first = wait(browser, "the consume rate", lambda: browser.execute_script(
        "const e = document.getElementById('consume-rate'); return e && [e.textContent, e.dataset.max];"))
    assert "no broker /metrics" not in text  # the cluster's brokers serve /metrics
    assert float(first) == 0  # nothing has fetched orders' records yet
    consumer = Consumer({"bootstrap.servers": env["cluster"].bootstrap_servers, "group.id": "consume-rate",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition("orders", p, 0) for p in range(3)])
        got: list[Any] = []
        wait_until("orders' 30 records", lambda: got.extend(consumer.consume(30, 0.5)) or len(got) >= 30, 30.0)
    finally:
        consumer.close()
    fastest = wait(browser, "a consume rate above zero", lambda: (lambda v: v if v > 0 else None)(
        float(browser.execute_script("return document.getElementById('consume-rate').dataset.max;"))))
    assert fastest > 0 and "bytes fetched by consumers per second" in browser.find_element(By.ID, "rates").text
    no_console_errors(browser)


def test_records_page(browser: Any, page: Callable[..., Any], tmp_path: Path) -> None:
    page("records/orders?partition=1&offset=2&limit=3&format=json")
    rows = wait_texts(browser, "#record-list tr[data-offset]", lambda r: len(r) == 3)
    assert [r.split()[0] for r in rows] == ["2", "3", "4"]
    first = browser.find_element(By.CSS_SELECTOR, "#record-list tr[data-offset='2']").text
    assert '"n": 7' in first and "k7" in first and "source: test" in first  # partition 1 holds n = 1, 4, 7, ...
    no_console_errors(browser)
    shot(browser, tmp_path, "records")


def test_groups_page_shows_lag(browser: Any, page: Callable[..., Any], tmp_path: Path) -> None:
    page("groups")
    wait(browser, "the group list", lambda: "billing" in browser.find_element(By.ID, "group-list").text)
    page("group/billing")
    lags = wait_texts(browser, "#offsets [data-lag]", lambda lag: len(lag) == 3)
    assert sorted(int(x) for x in lags) == [6, 7, 7] and card(browser, "total lag") == "20"
    assert card(browser, "state") == "Empty"
    wait(browser, "the lag chart", lambda: browser.find_elements(By.CSS_SELECTOR, "#lag-chart polyline") or None)
    no_console_errors(browser)
    shot(browser, tmp_path, "group", docs="console-group.png")


def test_groups_page_lists_transactions(browser: Any, page: Callable[..., Any], tmp_path: Path) -> None:
    page("groups")
    rows = {r.get_attribute("data-transaction"): r for r in wait(
        browser, "two transactions", lambda: browser.find_elements(By.CSS_SELECTOR, "#transaction-list tr[data-transaction]")
        if len(browser.find_elements(By.CSS_SELECTOR, "#transaction-list tr[data-transaction]")) == 2 else None)}
    assert sorted(rows) == ["ledger-done", "ledger-open"]
    assert rows["ledger-open"].find_element(By.CSS_SELECTOR, "[data-state]").text == "Ongoing"
    assert "ledger-0" in rows["ledger-open"].text
    started = rows["ledger-open"].find_element(By.CSS_SELECTOR, "[data-started]").text
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", started), started
    assert rows["ledger-done"].find_element(By.CSS_SELECTOR, "[data-state]").text == "CompleteCommit"
    assert "ledger-0" not in rows["ledger-done"].text  # a finished transaction holds no partitions
    no_console_errors(browser)
    shot(browser, tmp_path, "transactions")


def test_share_group_page(browser: Any, page: Callable[..., Any], tmp_path: Path) -> None:
    page("groups")
    wait(browser, "the share group listed", lambda: "workers" in browser.find_element(By.ID, "group-list").text)
    page("group/workers")
    starts = wait_texts(browser, "#share-partitions [data-start]", lambda s: s == ["8"])
    assert starts == ["8"] and texts(browser, "#share-partitions [data-lag]") == ["4"]
    assert card(browser, "type") == "share" and card(browser, "total lag") == "4"
    assert card(browser, "state") == "Stable" and texts(browser, "#members [data-assignment]") == ["audit-0"]
    assert not browser.find_elements(By.ID, "offsets")  # a share group commits no offsets
    no_console_errors(browser)
    shot(browser, tmp_path, "share-group")


def test_chaos_reports_and_live_view(browser: Any, page: Callable[..., Any], env: dict[str, Any],
                                     tmp_path: Path) -> None:
    page("chaos")
    wait(browser, "two reports", lambda: len(texts(browser, "#report-list tr[data-report]")) == 2 or None)
    page("chaos/finished-run")
    wait(browser, "the verdicts", lambda: browser.find_elements(By.CSS_SELECTOR, "#verdicts tr td") or None)
    assert card(browser, "writes acknowledged") == "400"
    assert "healed" in browser.find_element(By.ID, "faults").text
    wait(browser, "the report", lambda: browser.find_elements(By.CSS_SELECTOR, "iframe.report") or None)
    no_console_errors(browser)
    shot(browser, tmp_path, "chaos-finished")
    page("chaos/running-run")
    wait(browser, "the live count", lambda: card(browser, "writes acknowledged") == "50" or None)
    assert card(browser, "result") == "running"
    with (env["reports"] / "running-run" / "history.jsonl").open("a") as more:  # the run goes on
        for n in range(50, 80):
            more.write(json.dumps({"t": 3 + n / 100, "kind": "ok", "process": "p0", "value": str(n)}) + "\n")
    wait(browser, "the count to follow", lambda: card(browser, "writes acknowledged") == "80" or None)
    no_console_errors(browser)


# --- bad input: a clear message, nothing changed


def test_unknown_topic_and_offset_past_the_end(browser: Any, page: Callable[..., Any]) -> None:
    page("topic/no-such-topic")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in wait(browser, "the message", lambda: message(browser) or None)
    page("records/orders?partition=0&offset=999")
    text = wait(browser, "the message", lambda: message(browser) or None)
    assert "OFFSET_OUT_OF_RANGE" in text and "past the end" in text
    no_console_errors(browser, allowed_statuses=(400, 404))


# --- actions: the CLI's endpoints, refused without the token


def _submit(browser: Any, form: str, fields: dict[str, str], button: str | None = None) -> None:
    for name, value in fields.items():
        field = browser.find_element(By.CSS_SELECTOR, f"#{form} [name={name}]")
        if field.tag_name == "select":
            browser.execute_script("arguments[0].value = arguments[1];", field, value)
        else:
            field.clear()
            field.send_keys(value)
    target = f"#{form} button" + (f"[name={button}]" if button else "")
    browser.find_element(By.CSS_SELECTOR, target).click()


def test_create_topic_needs_the_token(browser: Any, page: Callable[..., Any], env: dict[str, Any]) -> None:
    admin: AdminClient = env["admin"]
    page("topics", token="wrong")
    wait(browser, "the form", lambda: browser.find_element(By.ID, "create"))
    _submit(browser, "create", {"name": "made-in-console", "partitions": "2", "rf": "3"})
    assert "CLUSTER_AUTHORIZATION_FAILED" in wait(browser, "a refusal", lambda: message(browser) or None)
    assert "made-in-console" not in [t["name"] for t in admin.topics()]
    page("topics", token=TOKEN)
    wait(browser, "the form", lambda: browser.find_element(By.ID, "create"))
    _submit(browser, "create", {"name": "made-in-console", "partitions": "2", "rf": "3"})
    wait(browser, "the new topic's page", lambda: browser.find_element(By.ID, "topic-name").text == "made-in-console"
         or None)
    created = admin.topic("made-in-console")
    assert len(created["partitions"]) == 2 and all(len(p["replicas"]) == 3 for p in created["partitions"])
    no_console_errors(browser, allowed_statuses=(403,))


def test_reset_offsets_dry_run_then_execute(browser: Any, page: Callable[..., Any], env: dict[str, Any]) -> None:
    admin: AdminClient = env["admin"]

    def committed() -> list[int]:
        return [o["committed_offset"] for o in admin.request("GET", "/v1/groups/billing")["offsets"]]

    before = committed()
    page("group/billing")  # no token
    wait(browser, "the offsets", lambda: texts(browser, "#offsets [data-lag]") or None)
    _submit(browser, "reset", {"topic": "orders", "to": "earliest"}, button="execute")
    assert "CLUSTER_AUTHORIZATION_FAILED" in wait(browser, "a refusal", lambda: message(browser) or None)
    assert committed() == before
    page("group/billing", token=TOKEN)
    wait(browser, "the offsets", lambda: texts(browser, "#offsets [data-lag]") or None)
    _submit(browser, "reset", {"topic": "orders", "to": "earliest"}, button="dry")
    plan = wait(browser, "the plan", lambda: texts(browser, "#reset-plan [data-new]") or None)
    assert plan == ["0", "0", "0"] and "dry run" in browser.find_element(By.ID, "plan").text
    assert committed() == before
    _submit(browser, "reset", {}, button="execute")
    wait(browser, "the reset", lambda: committed() == [0, 0, 0] or None)
    wait(browser, "lag 30", lambda: card(browser, "total lag") == "30" or None)
    no_console_errors(browser, allowed_statuses=(401,))


def test_every_controller_serves_the_console_and_describes_it(env: dict[str, Any]) -> None:
    import urllib.request

    from console.routes import OPENAPI_PATHS

    for node in env["cluster"].local.controllers:
        with urllib.request.urlopen(f"http://{node.spec.admin_address}/openapi.json", timeout=10) as answer:
            assert set(OPENAPI_PATHS) <= set(json.loads(answer.read())["paths"])
        with urllib.request.urlopen(f"http://{node.spec.admin_address}/console/", timeout=10) as answer:
            assert answer.status == 200 and b"console.js" in answer.read()


def test_a_topics_partitions_come_a_page_at_a_time(env: dict[str, Any]) -> None:
    admin: AdminClient = env["admin"]
    answer = admin.request("GET", "/console/api/topics/orders?page=1&size=2")
    assert (answer["partition_count"], answer["pages"], [p["partition"] for p in answer["partitions"]]) == (3, 2, [2])
    assert answer["partitions"][0]["log_end_offset"] == 10  # asked of partition 2's leader only
    with pytest.raises(ClusterError) as refused:
        admin.request("GET", "/console/api/topics/orders?size=0")
    assert refused.value.error == "INVALID_REQUEST" and "size" in refused.value.message


@pytest.mark.parametrize(("query", "offsets"), [
    ("partition=2", list(range(10))),  # the last 20: the whole partition of 10
    ("partition=2&limit=3", [7, 8, 9]),  # the last 3
    ("partition=2&timestamp=0&limit=2", [0, 1]),  # from the first record at or after t=0
    ("partition=2&offset=9", [9]),
])
def test_records_by_offset_timestamp_or_the_last(env: dict[str, Any], query: str, offsets: list[int]) -> None:
    answer = env["admin"].request("GET", f"/console/api/topics/orders/records?{query}")
    assert [r["offset"] for r in answer["records"]] == offsets and answer["high_watermark"] == 10


def test_a_timestamp_past_the_last_record_is_a_clear_error(env: dict[str, Any]) -> None:
    with pytest.raises(ClusterError) as refused:
        env["admin"].request("GET", "/console/api/topics/orders/records?partition=2&timestamp=99999999999999")
    assert refused.value.error == "OFFSET_OUT_OF_RANGE" and "timestamp" in refused.value.message
