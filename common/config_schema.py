"""Config schemas under Kafka's rules: typed keys, validators, one error for every problem.

    config = parse_keys(raw, keys, checks)   # raw: strings from a file, or typed values from code
    config["log.segment.bytes"], config.get_int("num.partitions"), config.originals

Values are parsed as Kafka's ConfigDef parses them. The node config's own table of keys is
`common.config` (BROKER_KEYS, `parse_config`); topic configs are `common.topic_config`.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeAlias

from common.units import INT_MAX, LONG_MAX

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class ConfigError(ValueError):
    """One or more configuration problems; `problems` holds each message, naming its key."""

    def __init__(self, problems: str | Iterable[str]) -> None:
        if isinstance(problems, str):
            problems = (problems,)
        self.problems: tuple[str, ...] = tuple(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            listed = "\n".join(f"  - {problem}" for problem in self.problems)
            message = f"{len(self.problems)} config problems:\n{listed}"
        super().__init__(message)


class ConfigType(enum.Enum):
    INT = "int"  # Java int: 32 bits
    LONG = "long"  # Java long: 64 bits
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"  # comma-separated in a file, a tuple of str once parsed
    PASSWORD = "password"  # a string whose value is never printed


_EXPECTS: Final = {
    ConfigType.INT: "an integer",
    ConfigType.LONG: "an integer",
    ConfigType.DOUBLE: "a number",
    ConfigType.BOOLEAN: "a boolean (true or false)",
    ConfigType.STRING: "a string",
    ConfigType.LIST: "a comma-separated list",
    ConfigType.PASSWORD: "a string",
}


@dataclass(frozen=True, slots=True)
class Password:
    """A secret value; repr and str never show it (Kafka prints `[hidden]` too)."""

    value: str

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__


class _Required(enum.Enum):
    REQUIRED = "REQUIRED"


REQUIRED: Final = _Required.REQUIRED  # a default meaning "no default: must be set"

Value: TypeAlias = int | float | bool | str | tuple[str, ...] | Password | None
Validator: TypeAlias = Callable[[Any], str | None]  # returns the complaint, or None when fine


# --- Validators: each returns "must ..., got ..." or None. List values are checked per element.


@dataclass(frozen=True, slots=True)
class _AtLeast:
    minimum: float

    def __call__(self, value: Any) -> str | None:
        return None if value >= self.minimum else f"must be at least {self.minimum}, got {value}"


@dataclass(frozen=True, slots=True)
class _Between:
    low: float
    high: float

    def __call__(self, value: Any) -> str | None:
        if self.low <= value <= self.high:
            return None
        return f"must be between {self.low} and {self.high}, got {value}"


@dataclass(frozen=True, slots=True)
class _OneOf:
    allowed: tuple[Value, ...]

    def __call__(self, value: Any) -> str | None:
        for item in value if isinstance(value, tuple) else (value,):
            if item not in self.allowed:
                allowed = ", ".join(repr(a) for a in self.allowed)
                return f"must be one of {allowed}, got {item!r}"
        return None


@dataclass(frozen=True, slots=True)
class _AllOf:
    validators: tuple[Validator, ...]

    def __call__(self, value: Any) -> str | None:
        return next((p for v in self.validators if (p := v(value)) is not None), None)


def at_least(minimum: float) -> Validator:
    """Accept values >= minimum."""
    return _AtLeast(minimum)


def between(low: float, high: float) -> Validator:
    """Accept values in [low, high]."""
    return _Between(low, high)


def one_of(*allowed: Value) -> Validator:
    """Accept one of `allowed` (for a list: every element is one of them)."""
    return _OneOf(allowed)


def all_of(*validators: Validator) -> Validator:
    """Accept what every validator accepts; report the first complaint."""
    return _AllOf(validators)


@dataclass(frozen=True, slots=True)
class _Matches:
    pattern: re.Pattern[str]
    expected: str

    def __call__(self, value: Any) -> str | None:
        for item in value if isinstance(value, tuple) else (value,):
            if not self.pattern.fullmatch(item):
                return f"must be {self.expected}, got {item!r}"
        return None


def matches(pattern: str, expected: str) -> Validator:
    """Accept strings (each list element) matching the regular expression `pattern` whole."""
    return _Matches(re.compile(pattern), expected)


def non_empty(value: Any) -> str | None:
    """Reject an empty string or list."""
    return "must not be empty" if len(value) == 0 else None


def distinct(value: Any) -> str | None:
    """Reject a list naming an element twice."""
    twice = sorted({item for item in value if value.count(item) > 1})
    return f"must not repeat {', '.join(map(repr, twice))}" if twice else None


# --- Parsing one value: strings as in server.properties, or typed values from code.

_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # like Java's parseInt: no '_', '0x' or '1e3'
_DOUBLE_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _shown(raw: object) -> str:
    # Typed values carry their type: "got True (bool)" explains why an int key refused it.
    return repr(raw) if isinstance(raw, str) else f"{raw!r} ({type(raw).__name__})"


def _coerce(kind: ConfigType, raw: object) -> Value:
    """The typed value of `raw`; ValueError("expects ..., got ...") if its type is wrong."""
    mismatch = ValueError(f"expects {_EXPECTS[kind]}, got {_shown(raw)}")
    text = raw.strip() if isinstance(raw, str) else None  # Kafka trims string input
    if kind in (ConfigType.INT, ConfigType.LONG):
        if isinstance(raw, int) and not isinstance(raw, bool):
            number = raw
        elif text is not None and _INT_TEXT.fullmatch(text):
            number = int(text)
        else:
            raise mismatch
        bits, limit = (32, INT_MAX) if kind is ConfigType.INT else (64, LONG_MAX)
        if not -limit - 1 <= number <= limit:
            raise ValueError(f"expects a {bits}-bit integer, got {_shown(raw)}")
        return number
    if kind is ConfigType.DOUBLE:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return float(raw)
        if text is not None and _DOUBLE_TEXT.fullmatch(text):
            return float(text)
        raise mismatch
    if kind is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise mismatch
    if kind is ConfigType.STRING:
        if text is None:
            raise mismatch
        return text
    if kind is ConfigType.PASSWORD:
        if isinstance(raw, Password):
            return raw
        if text is None:  # name the type only: never echo what may be a secret
            raise ValueError(f"expects {_EXPECTS[kind]}, got a value of type {type(raw).__name__}")
        return Password(text)
    return _coerce_list(raw, text, mismatch)


def _coerce_list(raw: object, text: str | None, mismatch: ValueError) -> tuple[str, ...]:
    if text is not None:
        items = [item.strip() for item in text.split(",")] if text else []
    elif isinstance(raw, (list, tuple)) and all(isinstance(item, str) for item in raw):
        items = [item.strip() for item in raw]
    else:
        raise mismatch
    if "" in items:  # "a,,b" is a typo far more often than an intended empty entry
        raise ValueError(f"expects a list without empty entries, got {_shown(raw)}")
    return tuple(items)  # a tuple keeps Config immutable


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One config key: Kafka's name, type, default (None: unset; REQUIRED: must be set), doc."""

    name: str
    type: ConfigType
    default: Value | _Required
    doc: str
    validator: Validator | None = None

    def __post_init__(self) -> None:
        # Normalise defaults written as Kafka writes them ("delete" for a list) and fail at
        # import, not at startup, on a default that its own validator refuses.
        if self.default is not None and self.default is not REQUIRED:
            object.__setattr__(self, "default", self.parse(self.default))

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def parse(self, raw: object) -> Value:
        """The typed, validated value of `raw`; ConfigError naming this key otherwise."""
        try:
            value = _coerce(self.type, raw)
        except ValueError as e:
            raise ConfigError(f"config {self.name!r} {e}") from None
        problem = self.validator(value) if self.validator is not None else None
        if problem is not None:
            raise ConfigError(f"config {self.name!r} {problem}")
        return value


def _suggest(name: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f"unknown config {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


@dataclass(frozen=True, slots=True, eq=False)
class Config(Mapping[str, Value]):
    """Parsed config: `config[name]` is the typed value, or the key's default when unset."""

    definitions: Mapping[str, ConfigKey]
    originals: Mapping[str, Value]  # the explicitly set keys only
    checks: tuple[CrossCheck, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "definitions", MappingProxyType(dict(self.definitions)))
        object.__setattr__(self, "originals", MappingProxyType(dict(self.originals)))

    def __repr__(self) -> str:
        return f"Config({dict(self.originals)!r})"

    def __getitem__(self, name: str) -> Value:
        if name in self.originals:
            return self.originals[name]
        key = self.definitions.get(name)
        if key is None:  # a typo in code: KeyError, as any Mapping, but with the suggestion
            raise KeyError(_suggest(name, self.definitions))
        assert key.default is not REQUIRED, "parse_config rejects configs missing a required key"
        return key.default

    def __iter__(self) -> Iterator[str]:
        return iter(self.definitions)

    def __len__(self) -> int:
        return len(self.definitions)

    # Typed reads, as Kafka's AbstractConfig.getInt/getLong/...: the key table fixes each key's
    # type, so a mismatch here is a bug in the caller (a wrong accessor), not bad user input.
    def get_int(self, name: str) -> int:
        """An INT or LONG key's value (a nullable key's None is a bug here: use `get_optional_int`)."""
        value = self[name]
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"config {name!r} is {type(value).__name__}, not an integer")
        return value

    def get_optional_int(self, name: str) -> int | None:
        """An INT or LONG key that may be unset (None)."""
        return None if self[name] is None else self.get_int(name)

    def get_double(self, name: str) -> float:
        value = self[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"config {name!r} is {type(value).__name__}, not a number")
        return float(value)

    def get_bool(self, name: str) -> bool:
        value = self[name]
        if not isinstance(value, bool):
            raise TypeError(f"config {name!r} is {type(value).__name__}, not a boolean")
        return value

    def get_str(self, name: str) -> str:
        value = self[name]
        if not isinstance(value, str):
            raise TypeError(f"config {name!r} is {type(value).__name__}, not a string")
        return value

    def get_optional_str(self, name: str) -> str | None:
        return None if self[name] is None else self.get_str(name)

    def get_list(self, name: str) -> tuple[str, ...]:
        value = self[name]
        if not isinstance(value, tuple):
            raise TypeError(f"config {name!r} is {type(value).__name__}, not a list")
        return value

    def get_optional_list(self, name: str) -> tuple[str, ...] | None:
        return None if self[name] is None else self.get_list(name)

    def get_password(self, name: str) -> Password | None:
        value = self[name]
        if value is not None and not isinstance(value, Password):
            raise TypeError(f"config {name!r} is {type(value).__name__}, not a password")
        return value

    def with_overrides(self, overrides: Mapping[str, object]) -> Config:
        """A new Config: these originals with `overrides` on top (None unsets a key)."""
        return parse_keys({**self.originals, **overrides}, self.definitions.values(), self.checks)


@dataclass(frozen=True, slots=True)
class CrossCheck:
    """A rule over several keys, run once each key parsed; it runs only when `needs` are defined."""

    needs: frozenset[str]
    rule: Callable[[Config], str | None]


def parse_keys(raw: Mapping[str, object], keys: Iterable[ConfigKey], checks: Iterable[CrossCheck] = ()) -> Config:
    """Parse and validate `raw` (strings or typed values; None means unset) into a Config.

    Raises one ConfigError listing every unknown, ill-typed, out-of-range or missing key.
    """
    definitions = {key.name: key for key in keys}
    problems: list[str] = []
    originals: dict[str, Value] = {}
    for name, value in raw.items():
        key = definitions.get(name)
        if key is None:
            problems.append(_suggest(name, definitions))
        elif value is not None:
            try:
                originals[name] = key.parse(value)
            except ConfigError as e:
                problems.extend(e.problems)
    for key in definitions.values():
        if key.required and raw.get(key.name) is None:
            problems.append(f"config {key.name!r} is required and has no default, but is not set")
    applicable = tuple(check for check in checks if check.needs <= definitions.keys())
    if problems:  # cross-key rules need every value parsed, so they wait for a clean config
        raise ConfigError(problems)
    config = Config(definitions, originals, applicable)
    problems = [p for check in applicable if (p := check.rule(config)) is not None]
    if problems:
        raise ConfigError(problems)
    return config
