"""Kafka's SslPrincipalMapper, pure: `ssl.principal.mapping.rules` turns a client certificate's
distinguished name (RFC 2253, as X500Principal.getName() writes it) into its principal's name.

    mapper = PrincipalMapper.parse("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT")
    mapper.name("CN=Alice,OU=ServiceUsers,O=Acme")    # "alice"
    mapper.name("CN=bob,OU=eng")                       # "CN=bob,OU=eng" (DEFAULT)

Rules are tried in order and the first that matches names the principal: `DEFAULT` keeps the
name as it is; `RULE:<pattern>/<replacement>/` applies when the pattern matches the whole name,
replaces every match (Java's replaceAll: `$1` is a group; a backslash is literal), and an `L`
or `U` after the last slash lower- or upper-cases the result. No rule matching is
NoMatchingRule: Kafka then fails the connection's authentication. The grammar is Kafka's
RULE_PATTERN and RULE_SPLITTER, so a rule list Kafka accepts is read the same here; Java's and
Python's regex dialects agree on what such rules use (groups, classes, anchors, lazy `*?`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# Kafka's SslPrincipalMapper.RULE_PATTERN and RULE_SPLITTER, in Python's syntax
_RULE: Final = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_PARSER: Final = re.compile(_RULE)
_RULE_SPLITTER: Final = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_JAVA_GROUP: Final = re.compile(r"\$(\d+)")


class RulesError(ValueError):
    """`ssl.principal.mapping.rules` cannot be read."""


class NoMatchingRule(ValueError):
    """No rule applies to a certificate's name: its connection fails authentication."""


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self._replace, name)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result

    def _replace(self, match: re.Match[str]) -> str:
        """Java's replacement string: `$n` is group n (empty when it did not take part)."""
        return _JAVA_GROUP.sub(lambda g: match.group(int(g.group(1))) or "", self.replacement)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    rules: tuple[Rule, ...]

    @classmethod
    def parse(cls, text: str | None) -> PrincipalMapper:
        """The rules of `text` (None: DEFAULT); RulesError naming the rule that cannot be read."""
        rules: list[Rule] = []
        for found in _RULE_SPLITTER.finditer("DEFAULT" if text is None else text.strip()):
            rule = found.group(1)
            matched = _RULE_PARSER.match(rule)
            assert matched is not None  # the parser's last alternative matches the empty string
            if matched.end() != len(rule):
                raise RulesError(f"ssl.principal.mapping.rules: invalid rule `{rule}`, "
                                 f"unmatched substring `{rule[matched.end():]}`")
            if matched.group(1) is not None:
                rules.append(Rule(None))
            elif matched.group(2) is not None:
                try:
                    pattern = re.compile(matched.group(2))
                except re.error as exc:
                    raise RulesError(f"ssl.principal.mapping.rules: bad pattern in `{rule}`: {exc}") from None
                if any(int(g) > pattern.groups for g in _JAVA_GROUP.findall(matched.group(4))):
                    raise RulesError(f"ssl.principal.mapping.rules: `{rule}` names a group its pattern lacks")
                rules.append(Rule(pattern, matched.group(4), matched.group(6)))
            elif rule.strip():
                raise RulesError(f"ssl.principal.mapping.rules: invalid rule `{rule}`")
            # an empty rule (",,") is ignored, as Kafka does
        return cls(tuple(rules))

    def name(self, distinguished_name: str) -> str:
        """The principal's name for `distinguished_name`; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {distinguished_name}")


DEFAULT_MAPPER: Final = PrincipalMapper((Rule(None),))
