"""Tests for quorum/voters.py and QuorumSettings: voters in Kafka's format, a password always."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import parse_config
from common.config_schema import ConfigError, Password
from quorum.quorum_settings import METADATA_DIR_NAME, QuorumSettings
from quorum.voters import Voter, parse_voters

VOTERS = ("1@127.0.0.1:9093", "2@127.0.0.2:9093", "3@127.0.0.3:9093")


def test_parse_voters() -> None:
    voters = parse_voters(["3@localhost:9095", " 1@127.0.0.1:9093 ", "2@ctl-2.example:9094"])
    assert list(voters) == [1, 2, 3]
    assert voters[1] == Voter(1, "127.0.0.1", 9093) and voters[1].address == "127.0.0.1:9093"
    assert voters[2].address == "ctl-2.example:9094"


@pytest.mark.parametrize("entries,message", [
    (["1@127.0.0.1"], "is not id@host:port"),
    (["127.0.0.1:9093"], "is not id@host:port"),
    (["x@127.0.0.1:9093"], "is not id@host:port"),
    (["1@[::1]:9093"], "is not id@host:port"),
    (["1@127.0.0.1:0"], "outside 1..65535"),
    (["1@127.0.0.1:70000"], "outside 1..65535"),
    (["1@127.0.0.1:9093", "1@127.0.0.2:9093"], "node id 1 twice"),
    (["1@127.0.0.1:9093", "2@127.0.0.1:9093"], "address 127.0.0.1:9093 twice"),
    ([], "at least one voter"),
])
def test_bad_voters(entries: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_voters(entries)


def test_every_bad_entry_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_voters(["a", "b", "1@h:1"])
    assert len(info.value.problems) == 2


def config(**overrides: object) -> dict[str, object]:
    raw: dict[str, object] = {"node.id": 2, "process.roles": "controller",
                              "controller.quorum.voters": ",".join(VOTERS),
                              "controller.cluster.password": "s3cret", "log.dirs": "/data/a,/data/b"}
    raw.update(overrides)
    return raw


def test_settings_from_config() -> None:
    settings = QuorumSettings.from_config(parse_config(config()))
    assert settings.node_id == 2 and settings.me.address == "127.0.0.2:9093"
    assert settings.password == Password("s3cret") and "s3cret" not in repr(settings)
    assert settings.data_dir == Path("/data/a") / METADATA_DIR_NAME  # Kafka: the first of log.dirs


def test_metadata_log_dir_wins_over_log_dirs() -> None:
    settings = QuorumSettings.from_config(parse_config(config(**{"metadata.log.dir": "/meta"})))
    assert settings.data_dir == Path("/meta") / METADATA_DIR_NAME


@pytest.mark.parametrize("overrides,message", [
    ({"controller.cluster.password": None}, "controller.cluster.password' must be set"),
    ({"controller.cluster.password": ""}, "controller.cluster.password' must be set"),
    ({"controller.quorum.voters": None}, "controller.quorum.voters' is required"),
    ({"node.id": 4}, "node.id 4 is not one of the controller.quorum.voters"),
    ({"controller.quorum.voters": "1@h:1,nope"}, "is not id@host:port"),
])
def test_settings_refuse(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        QuorumSettings.from_config(parse_config(config(**overrides)))
