"""Kafka's JAAS login-module line, as `sasl.jaas.config` holds it, pure.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

Kafka's PlainServerCallbackHandler reads the `user_<name>` options as the PLAIN users a
listener accepts; `username` and `password` are the broker's own credentials, which it
authenticates with as a client (inter-broker). tidelog reads the same line the same way (one
login module; Kafka's listener-and-mechanism prefixed form is one line per mechanism, which
tidelog's one `sasl.jaas.config` covers: the PLAIN users and the broker's own credentials).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


_MODULE: Final = re.compile(r"\s*(?P<module>[A-Za-z_$][\w$.]*)\s+(?P<flag>required|requisite|sufficient|optional)"
                            r"(?P<options>.*?);?\s*")
_OPTION: Final = re.compile(r'\s*(?P<key>[A-Za-z_][\w.-]*)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s";]+))')
USER_PREFIX: Final = "user_"  # PlainLoginModule: user_<name>="<password>"


class JaasError(ValueError):
    """Not a JAAS login-module line."""


@dataclass(frozen=True, slots=True)
class JaasConfig:
    module: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def plain_users(self) -> dict[str, str]:
        """The `user_<name>` options: the PLAIN users and their passwords."""
        return {key[len(USER_PREFIX):]: value for key, value in self.options.items()
                if key.startswith(USER_PREFIX) and len(key) > len(USER_PREFIX)}

    @property
    def credentials(self) -> tuple[str, str] | None:
        """The login module's own username and password, when both are set."""
        user, password = self.options.get("username"), self.options.get("password")
        return None if user is None or password is None else (user, password)


def parse_jaas(text: str) -> JaasConfig:
    """One login module with its options; JaasError naming what is wrong (never the values)."""
    match = _MODULE.fullmatch(text)
    if match is None:
        raise JaasError("sasl.jaas.config is not '<LoginModule class> required key=\"value\" ...;'")
    options: dict[str, str] = {}
    rest = match["options"]
    position = 0
    while rest[position:].strip():  # each pass consumes one option: bounded by the text's length
        option = _OPTION.match(rest, position)
        if option is None:
            raise JaasError(f"sasl.jaas.config: cannot read an option at character {position} of the options")
        value = option["quoted"] if option["quoted"] is not None else option["bare"]
        options[option["key"]] = re.sub(r"\\(.)", r"\1", value)
        position = option.end()
    return JaasConfig(match["module"], options)
