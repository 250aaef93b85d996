"""tidelog/cli_groups.py and tidelog/group_admin.py: options, lag, internal topics."""

from __future__ import annotations

import pytest

from tidelog.cli import build_parser
from tidelog.group_admin import PartitionLag


def test_lag_is_log_end_minus_committed() -> None:
    assert PartitionLag("t", 0, 40, 100, None).lag == 60
    assert PartitionLag("t", 0, None, 100, None).lag is None


def test_reset_offsets_options_are_kafkas() -> None:
    args = build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--topic", "t", "--shift-by", "-5",
                                      "--execute"])
    assert (args.group, args.topic, args.shift_by, args.execute) == ("g", "t", -5, True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--topic", "t"])


def test_internal_topics_are_listed_only_when_asked() -> None:
    from tidelog.cli_topics import shown

    topics = [{"name": "__consumer_offsets"}, {"name": "demo"}]
    assert [t["name"] for t in shown(topics, False)] == ["demo"]
    assert [t["name"] for t in shown(topics, True)] == ["__consumer_offsets", "demo"]
    assert build_parser().parse_args(["topics", "list", "--include-internal"]).include_internal
