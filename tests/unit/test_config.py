"""Tests for common/config.py: typed parsing, errors naming keys, precedence, .properties files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from common.config import (
    BROKER_KEYS,
    LONG_MAX,
    flush_interval_ms,
    log_dirs,
    parse_config,
    retention_ms,
    roll_ms,
)
from common.config_schema import (
    REQUIRED,
    Config,
    ConfigError,
    ConfigKey,
    ConfigType,
    Password,
    Validator,
    all_of,
    at_least,
    between,
    distinct,
    non_empty,
    one_of,
)
from common.properties import load_properties

MINIMAL = {"node.id": "1", "process.roles": "broker"}
HOUR_MS = 3_600_000


def config(**overrides: object) -> Config:
    """MINIMAL plus overrides, with '_' in keyword names standing for '.'."""
    return parse_config({**MINIMAL, **{k.replace("_", "."): v for k, v in overrides.items()}})


def key(kind: ConfigType, validator: Validator | None = None) -> ConfigKey:
    return ConfigKey("some.key", kind, None, "A key for tests.", validator)


# --- One value: (type, raw input, parsed value). Strings as in server.properties, then typed.
PARSES = [
    (ConfigType.INT, "1073741824", 1073741824),
    (ConfigType.INT, "  -5 ", -5),
    (ConfigType.INT, "+7", 7),
    (ConfigType.INT, 42, 42),
    (ConfigType.INT, "2147483647", 2**31 - 1),
    (ConfigType.INT, "-2147483648", -(2**31)),
    (ConfigType.LONG, "9223372036854775807", LONG_MAX),
    (ConfigType.LONG, 3_000_000_000, 3_000_000_000),
    (ConfigType.DOUBLE, "0.5", 0.5),
    (ConfigType.DOUBLE, "1e3", 1000.0),
    (ConfigType.DOUBLE, ".25", 0.25),
    (ConfigType.DOUBLE, 2, 2.0),
    (ConfigType.DOUBLE, 2.5, 2.5),
    (ConfigType.BOOLEAN, "true", True),
    (ConfigType.BOOLEAN, "FALSE", False),
    (ConfigType.BOOLEAN, " True ", True),
    (ConfigType.BOOLEAN, False, False),
    (ConfigType.STRING, "  CreateTime ", "CreateTime"),
    (ConfigType.STRING, "", ""),
    (ConfigType.LIST, "broker,controller", ("broker", "controller")),
    (ConfigType.LIST, " /a , /b ,/c", ("/a", "/b", "/c")),
    (ConfigType.LIST, "", ()),
    (ConfigType.LIST, "one", ("one",)),
    (ConfigType.LIST, ["x", " y "], ("x", "y")),
    (ConfigType.LIST, ("x",), ("x",)),
    (ConfigType.PASSWORD, " s3cret ", Password("s3cret")),
    (ConfigType.PASSWORD, Password("p"), Password("p")),
]


@pytest.mark.parametrize(("kind", "raw", "expected"), PARSES)
def test_parses(kind: ConfigType, raw: object, expected: object) -> None:
    value = key(kind).parse(raw)
    assert value == expected
    assert type(value) is type(expected)


# --- Ill-typed: (type, raw input, message fragment after "config 'some.key' ").
MISTYPED = [
    (ConfigType.INT, "abc", "expects an integer, got 'abc'"),
    (ConfigType.INT, "1.5", "expects an integer, got '1.5'"),
    (ConfigType.INT, "1_000", "expects an integer, got '1_000'"),
    (ConfigType.INT, "0x10", "expects an integer, got '0x10'"),
    (ConfigType.INT, "", "expects an integer, got ''"),
    (ConfigType.INT, True, "expects an integer, got True (bool)"),
    (ConfigType.INT, 1.0, "expects an integer, got 1.0 (float)"),
    (ConfigType.INT, "2147483648", "expects a 32-bit integer, got '2147483648'"),
    (ConfigType.LONG, 2**63, f"expects a 64-bit integer, got {2**63} (int)"),
    (ConfigType.LONG, False, "expects an integer, got False (bool)"),
    (ConfigType.DOUBLE, "nan", "expects a number, got 'nan'"),
    (ConfigType.DOUBLE, True, "expects a number, got True (bool)"),
    (ConfigType.BOOLEAN, "yes", "expects a boolean (true or false), got 'yes'"),
    (ConfigType.BOOLEAN, 1, "expects a boolean (true or false), got 1 (int)"),
    (ConfigType.STRING, 5, "expects a string, got 5 (int)"),
    (ConfigType.LIST, "a,,b", "expects a list without empty entries, got 'a,,b'"),
    (ConfigType.LIST, [1, 2], "expects a comma-separated list, got [1, 2] (list)"),
    (ConfigType.PASSWORD, 1234, "expects a string, got a value of type int"),
]


@pytest.mark.parametrize(("kind", "raw", "message"), MISTYPED)
def test_mistyped(kind: ConfigType, raw: object, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        key(kind).parse(raw)
    assert str(error.value) == f"config 'some.key' {message}"


def test_password_never_printed() -> None:
    secret = key(ConfigType.PASSWORD).parse("hunter2")
    assert "hunter2" not in repr(secret) and "hunter2" not in str(secret)
    assert secret == Password("hunter2") and secret.value == "hunter2"  # type: ignore[union-attr]


# --- Validators: (validator, value, complaint or None).
VALIDATES = [
    (at_least(14), 14, None),
    (at_least(14), 1, "must be at least 14, got 1"),
    (between(1, 3), 3, None),
    (between(1, 3), 0, "must be between 1 and 3, got 0"),
    (between(0.0, 1.0), 1.5, "must be between 0.0 and 1.0, got 1.5"),
    (one_of("CreateTime", "LogAppendTime"), "CreateTime", None),
    (one_of("CreateTime", "LogAppendTime"), "createtime",
     "must be one of 'CreateTime', 'LogAppendTime', got 'createtime'"),
    (one_of("broker", "controller"), ("broker", "controller"), None),
    (one_of("broker", "controller"), ("broker", "ctrl"),
     "must be one of 'broker', 'controller', got 'ctrl'"),
    (non_empty, (), "must not be empty"),
    (non_empty, "", "must not be empty"),
    (non_empty, ("a",), None),
    (distinct, ("a", "b", "a"), "must not repeat 'a'"),
    (all_of(non_empty, distinct), (), "must not be empty"),
    (all_of(non_empty, distinct), ("x",), None),
]


@pytest.mark.parametrize(("validator", "value", "complaint"), VALIDATES)
def test_validators(validator: Validator, value: object, complaint: str | None) -> None:
    assert validator(value) == complaint


# --- parse_config errors: (raw on top of MINIMAL, the exact problems in order).
PROBLEMS = [
    ({"log.segmnet.bytes": "1"},
     ["unknown config 'log.segmnet.bytes' (did you mean 'log.segment.bytes'?)"]),
    ({"zzz": "1"}, ["unknown config 'zzz'"]),
    ({"log.segment.bytes": "abc"}, ["config 'log.segment.bytes' expects an integer, got 'abc'"]),
    ({"log.segment.bytes": "1"}, ["config 'log.segment.bytes' must be at least 14, got 1"]),
    ({"log.index.size.max.bytes": 3},
     ["config 'log.index.size.max.bytes' must be at least 4, got 3"]),
    ({"process.roles": "broker,zookeeper"},
     ["config 'process.roles' must be one of 'broker', 'controller', got 'zookeeper'"]),
    ({"process.roles": ""}, ["config 'process.roles' must not be empty"]),
    ({"process.roles": "broker,broker"}, ["config 'process.roles' must not repeat 'broker'"]),
    ({"log.message.timestamp.type": "Now"},
     ["config 'log.message.timestamp.type' must be one of 'CreateTime', 'LogAppendTime', "
      "got 'Now'"]),
    ({"log.cleanup.policy": "delete,compactt"},
     ["config 'log.cleanup.policy' must be one of 'delete', 'compact', got 'compactt'"]),
    ({"auto.create.topics.enable": "1"},
     ["config 'auto.create.topics.enable' expects a boolean (true or false), got '1'"]),
    ({"log.dirs": ""}, ["config 'log.dirs' must not be empty"]),
    ({"node.id": None}, ["config 'node.id' is required and has no default, but is not set"]),
    # Cross-key: the winning retention key must not resolve to 0 (Kafka's rule).
    ({"log.retention.hours": 0},
     ["config 'log.retention.hours' must be -1 (unlimited) or positive, got 0"]),
    ({"log.retention.minutes": "0"},
     ["config 'log.retention.minutes' must be -1 (unlimited) or positive, got 0"]),
    ({"log.retention.ms": 0},
     ["config 'log.retention.ms' must be -1 (unlimited) or positive, got 0"]),
    # Cross-key: a follower's fetch wait within its socket timeout and the ISR lag (Kafka's rule).
    ({"replica.fetch.wait.max.ms": 3001, "replica.socket.timeout.ms": 3000, "replica.lag.time.max.ms": 5000},
     ["config 'replica.fetch.wait.max.ms' (3001) must not exceed 'replica.socket.timeout.ms' (3000) "
      "to prevent unnecessary socket timeouts"]),
    ({"replica.lag.time.max.ms": "499"},
     ["config 'replica.fetch.wait.max.ms' (500) must not exceed 'replica.lag.time.max.ms' (499) "
      "to prevent frequent changes in ISR"]),
    ({"replica.fetch.wait.max.ms": 40_000},
     ["config 'replica.fetch.wait.max.ms' (40000) must not exceed 'replica.socket.timeout.ms' (30000) "
      "to prevent unnecessary socket timeouts",
      "config 'replica.fetch.wait.max.ms' (40000) must not exceed 'replica.lag.time.max.ms' (30000) "
      "to prevent frequent changes in ISR"]),
    # All problems at once, in input order, missing keys last.
    ({"node.id": "x", "log.segmnet.bytes": "1", "log.segment.bytes": "1", "num.partitions": "0"},
     ["config 'node.id' expects an integer, got 'x'",
      "unknown config 'log.segmnet.bytes' (did you mean 'log.segment.bytes'?)",
      "config 'log.segment.bytes' must be at least 14, got 1",
      "config 'num.partitions' must be at least 1, got 0"]),
]


@pytest.mark.parametrize(("raw", "problems"), PROBLEMS)
def test_problems(raw: dict[str, object], problems: list[str]) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({**MINIMAL, **raw})
    assert list(error.value.problems) == problems
    assert isinstance(error.value, ValueError)
    for problem in problems:
        assert problem in str(error.value)


def test_missing_required_keys_are_all_reported() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"log.segment.bytes": "1"})
    assert str(error.value) == (
        "3 config problems:\n"
        "  - config 'log.segment.bytes' must be at least 14, got 1\n"
        "  - config 'node.id' is required and has no default, but is not set\n"
        "  - config 'process.roles' is required and has no default, but is not set"
    )


def test_fetch_wait_may_equal_the_socket_timeout_and_the_isr_lag() -> None:
    parsed = parse_config({**MINIMAL, "replica.fetch.wait.max.ms": 3000, "replica.socket.timeout.ms": 3000,
                           "replica.lag.time.max.ms": 3000})
    assert parsed.get_int("replica.fetch.wait.max.ms") == 3000


def test_retention_zero_is_fine_when_a_stronger_key_wins() -> None:
    assert retention_ms(config(log_retention_hours=0, log_retention_ms=5)) == 5


# --- Precedence: (overrides, resolved value).
RETENTION = [
    ({}, 168 * HOUR_MS),
    ({"log.retention.hours": 1}, HOUR_MS),
    ({"log.retention.minutes": 10, "log.retention.hours": 1}, 600_000),
    ({"log.retention.ms": 1234, "log.retention.minutes": 10, "log.retention.hours": 1}, 1234),
    ({"log.retention.ms": "-1"}, -1),
    ({"log.retention.hours": "-1"}, -1),
    ({"log.retention.minutes": -3}, -1),
    ({"log.retention.ms": -1, "log.retention.hours": 5}, -1),
]


@pytest.mark.parametrize(("raw", "expected"), RETENTION)
def test_retention_ms(raw: dict[str, object], expected: int) -> None:
    assert retention_ms(parse_config({**MINIMAL, **raw})) == expected


ROLL = [
    ({}, 168 * HOUR_MS),
    ({"log.roll.hours": "2"}, 2 * HOUR_MS),
    ({"log.roll.ms": "1000", "log.roll.hours": "2"}, 1000),
]


@pytest.mark.parametrize(("raw", "expected"), ROLL)
def test_roll_ms(raw: dict[str, object], expected: int) -> None:
    assert roll_ms(parse_config({**MINIMAL, **raw})) == expected


FLUSH = [
    ({}, LONG_MAX),
    ({"log.flush.scheduler.interval.ms": 3000}, 3000),
    ({"log.flush.interval.ms": 500, "log.flush.scheduler.interval.ms": 3000}, 500),
]


@pytest.mark.parametrize(("raw", "expected"), FLUSH)
def test_flush_interval_ms(raw: dict[str, object], expected: int) -> None:
    assert flush_interval_ms(parse_config({**MINIMAL, **raw})) == expected


LOG_DIRS = [
    ({}, ["/tmp/kraft-combined-logs"]),
    ({"log.dir": "/data/one"}, ["/data/one"]),
    ({"log.dirs": "/d1, /d2"}, ["/d1", "/d2"]),
    ({"log.dirs": "/d1,/d2", "log.dir": "/ignored"}, ["/d1", "/d2"]),
]


@pytest.mark.parametrize(("raw", "expected"), LOG_DIRS)
def test_log_dirs(raw: dict[str, object], expected: list[str]) -> None:
    assert log_dirs(parse_config({**MINIMAL, **raw})) == expected


# --- Config as a mapping.


def test_defaults_and_originals() -> None:
    cfg = config(log_segment_bytes="1048576")
    assert cfg["log.segment.bytes"] == 1048576
    assert cfg["log.index.size.max.bytes"] == 10485760
    assert cfg["log.roll.ms"] is None
    assert cfg["process.roles"] == ("broker",)
    assert dict(cfg.originals) == {
        "node.id": 1, "process.roles": ("broker",), "log.segment.bytes": 1048576
    }
    assert set(cfg) == {k.name for k in BROKER_KEYS} and len(cfg) == len(BROKER_KEYS)
    assert "log.segment.bytes" in cfg and "log.segmnet.bytes" not in cfg


def test_typed_and_string_input_give_equal_configs() -> None:
    typed = parse_config({"node.id": 3, "process.roles": ["broker", "controller"],
                          "auto.create.topics.enable": False, "log.retention.bytes": 10})
    text = parse_config({"node.id": "3", "process.roles": "broker, controller",
                         "auto.create.topics.enable": "false", "log.retention.bytes": "10"})
    assert typed == text and typed.originals == text.originals


def test_unknown_name_lookup_is_a_key_error_with_suggestion() -> None:
    with pytest.raises(KeyError, match="did you mean 'log.segment.bytes'"):
        config()["log.segmnet.bytes"]


def test_config_is_immutable() -> None:
    cfg = config()
    with pytest.raises(TypeError):
        cfg["num.partitions"] = 3  # type: ignore[index]
    with pytest.raises(TypeError):
        cfg.originals["num.partitions"] = 3  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.originals = {}  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        cfg.extra = 1  # type: ignore[attr-defined]
    assert isinstance(cfg["process.roles"], tuple)  # lists come back as tuples


def test_with_overrides_returns_a_new_validated_config() -> None:
    cfg = config(num_partitions=3)
    changed = cfg.with_overrides({"num.partitions": "6", "log.roll.ms": 10})
    assert (cfg["num.partitions"], changed["num.partitions"]) == (3, 6)
    assert changed["log.roll.ms"] == 10 and cfg["log.roll.ms"] is None
    assert "num.partitions" not in changed.with_overrides({"num.partitions": None}).originals
    with pytest.raises(ConfigError, match="'num.partitions' must be at least 1, got 0"):
        cfg.with_overrides({"num.partitions": 0})


def test_custom_key_table_skips_checks_it_cannot_run() -> None:
    keys = (ConfigKey("a.b", ConfigType.INT, 1, "A test key.", between(0, 9)),)
    assert parse_config({}, keys)["a.b"] == 1
    with pytest.raises(ConfigError, match="unknown config 'node.id'"):
        parse_config(MINIMAL, keys)


def test_key_table_is_sound() -> None:
    names = [k.name for k in BROKER_KEYS]
    assert len(names) == len(set(names))
    for k in BROKER_KEYS:
        assert k.doc and "\n" not in k.doc, k.name
        if k.default is not None and k.default is not REQUIRED:
            assert k.parse(k.default) == k.default, k.name  # defaults survive their own parser


def test_bad_default_fails_at_definition() -> None:
    with pytest.raises(ConfigError, match="'x' must be at least 14, got 1"):
        ConfigKey("x", ConfigType.INT, 1, "Bad default.", at_least(14))


# --- load_properties: (file text, entries).
PROPERTIES = [
    ("a=1\nb = 2\n", {"a": "1", "b": "2"}),
    ("a:1\nb : 2\n", {"a": "1", "b": "2"}),
    ("a 1\n", {"a": "1"}),
    ("  a  =  spaced value  \n", {"a": "spaced value"}),
    ("# comment\n! also comment\n\n   \n  # indented comment\na=1\n", {"a": "1"}),
    ("a=1 # not a comment\n", {"a": "1 # not a comment"}),
    ("a=\n", {"a": ""}),
    ("url=http://host:80/x\n", {"url": "http://host:80/x"}),
    ("a=b=c\n", {"a": "b=c"}),
    ("log.dirs=/d1,\\\n    /d2,\\\n    /d3\nnext=1\n", {"log.dirs": "/d1,/d2,/d3", "next": "1"}),
    ("a=1\\\n# kept: inside a continuation\n", {"a": "1# kept: inside a continuation"}),
    ("a=ends\\\\\nb=2\n", {"a": "ends\\", "b": "2"}),
    ("a=x\\\n", {"a": "x"}),
    ("a=1\na=2\n", {"a": "2"}),
    ("a\\=b=c\n", {"a=b": "c"}),
    ("tab=x\\ty|\\u0041\n", {"tab": "x\ty|A"}),
    ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
    ("", {}),
]


@pytest.mark.parametrize(("text", "expected"), PROPERTIES)
def test_load_properties(tmp_path: Path, text: str, expected: dict[str, str]) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(text.encode())
    assert load_properties(path) == expected


# (file text, line number named in the error, what the error says)
MALFORMED = [
    ("a=1\njust-a-key\n", 2, "expected 'key=value' or 'key: value'"),
    ("# c\n\n=value\n", 3, "empty key"),
    ("a=1\nb=2\\\n  more\n: x\n", 4, "empty key"),
    ("bad=\\u00zz\n", 1, "malformed \\uxxxx escape"),
]


@pytest.mark.parametrize(("text", "line", "says"), MALFORMED)
def test_load_properties_malformed(tmp_path: Path, text: str, line: int, says: str) -> None:
    path = tmp_path / "server.properties"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_properties(path)
    assert f"{path}:{line}: " in str(error.value)
    assert says in str(error.value)


def test_load_properties_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file .*nope.properties"):
        load_properties(tmp_path / "nope.properties")


def test_properties_file_to_config(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# KRaft combined node\n"
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "log.dirs=/var/lib/tidelog/a,\\\n"
        "         /var/lib/tidelog/b\n"
        "log.retention.minutes: 30\n"
        "auto.create.topics.enable = FALSE\n"
    )
    cfg = parse_config(load_properties(path))
    assert log_dirs(cfg) == ["/var/lib/tidelog/a", "/var/lib/tidelog/b"]
    assert retention_ms(cfg) == 30 * 60_000
    assert cfg["auto.create.topics.enable"] is False
    assert cfg["process.roles"] == ("broker", "controller")


@pytest.mark.parametrize("value", ["plain", "/x/back\\slash", "a=b:c #not a comment", "two\nlines",
                                   "tab\there", "ünïcode"])
def test_properties_line_round_trips(tmp_path, value: str) -> None:
    from common.properties import properties_line

    path = tmp_path / "server.properties"
    path.write_text(properties_line("log.dirs", value) + "\n", encoding="utf-8")
    assert load_properties(path)["log.dirs"] == value


# --- typed accessors (Kafka's AbstractConfig.getInt/getLong/...): a wrong accessor is a bug.
def test_typed_accessors_read_each_type_and_refuse_the_wrong_one() -> None:
    config = parse_config({"node.id": "7", "process.roles": "broker", "log.dirs": "/a,/b",
                           "controller.api.voters": "1@h:1"})
    assert config.get_int("node.id") == 7
    assert config.get_bool("auto.create.topics.enable") is True
    assert config.get_list("log.dirs") == ("/a", "/b")
    assert config.get_optional_list("advertised.listeners") is None
    assert config.get_optional_list("controller.api.voters") == ("1@h:1",)
    assert isinstance(config.get_double("log.cleaner.min.cleanable.ratio"), float)
    with pytest.raises(TypeError, match="node.id"):
        config.get_str("node.id")
    with pytest.raises(TypeError, match="auto.create.topics.enable"):
        config.get_int("auto.create.topics.enable")  # a bool is not an integer here
    with pytest.raises(TypeError, match="log.dirs"):
        config.get_int("log.dirs")
