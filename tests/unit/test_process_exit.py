"""Tests for broker/process_exit.py: a process ended by `exit_process` after a clean log stop
keeps what the stop promised (the last log lines, the clean-shutdown marker, the checkpoints and
the records, a producer snapshot) and ends with the status it was given, at once even with a
non-daemon thread still running (the interpreter's own exit would join it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from broker.log.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager
from broker.log.producer_snapshot import snapshot_offsets
from common.log_config import LogConfig
from common.topic_partition import TopicPartition

NOW = 1_700_000_000_000
ORDERS_0 = TopicPartition("orders", 0)
RECORDS = 5
CHILD_TIMEOUT_S = 60
LAST_LINE = "Broker 7 stopped (the last line before the exit)"

CHILD = textwrap.dedent("""
    import logging, sys, threading, time
    from pathlib import Path
    from broker.log.log_manager import LogManager
    from broker.process_exit import exit_process
    from common.log_config import LogConfig
    from common.log_setup import setup_logging
    from common.records import build_batch
    from common.topic_partition import TopicPartition

    setup_logging(7, "broker")
    manager = LogManager([Path(sys.argv[1])], LogConfig(), now_ms={now})
    log = manager.get_or_create_log(TopicPartition("orders", 0), now_ms={now})
    log.snapshot_source = lambda: b""
    log.append(build_batch([(b"k%d" % i, b"v") for i in range({records})]), now_ms={now})
    manager.shutdown()
    # a straggler the interpreter's exit would wait for: exit_process must not
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    logging.getLogger("broker.node").info("{last}")
    exit_process(int(sys.argv[2]))
""").format(now=NOW, records=RECORDS, last=LAST_LINE)


def test_a_clean_stop_then_exit_process_keeps_everything_and_the_status(tmp_path: Path) -> None:
    status = 3  # neither 0 nor 1: the status is the one given, not a default
    data = tmp_path / "data"
    child = subprocess.run([sys.executable, "-c", CHILD, str(data), str(status)], capture_output=True,
                           text=True, timeout=CHILD_TIMEOUT_S, cwd=Path(__file__).resolve().parents[2])
    assert child.returncode == status, child.stderr[-3000:]
    assert child.stderr.rstrip().endswith(LAST_LINE), child.stderr[-3000:]
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    assert "orders 0 5" in (data / RECOVERY_POINT_CHECKPOINT).read_text()
    assert snapshot_offsets(data / ORDERS_0.dir_name) == [RECORDS]
    manager = LogManager([data], LogConfig(), now_ms=NOW)
    try:
        reopened = manager.get_log(ORDERS_0)
        assert reopened is not None and reopened.log_end_offset == RECORDS
    finally:
        manager.shutdown()
