"""Kafka's topic name rules (Topic.validate), shared by the controller and the broker."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from common.limits import MAX_TOPIC_NAME_LENGTH

_LEGAL_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: object, existing: Iterable[str] = ()) -> str | None:
    """Why `name` is not a legal topic name, in Kafka's words, or None when it is.

    With `existing` names it also refuses a name that differs from one of them only by
    '.' versus '_', which Kafka forbids because metric names replace '.' with '_'.
    """
    if not isinstance(name, str) or not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
                f"characters, topic name: {name}")
    if not _LEGAL_NAME.fullmatch(name):
        return (f'Topic name "{name}" is illegal, it contains a character other than '
                "ASCII alphanumerics, '.', '_' and '-'")
    if "." in name or "_" in name:
        unified = name.replace(".", "_")
        for other in sorted(existing):
            if other != name and other.replace(".", "_") == unified:
                return f"Topic '{name}' collides with existing topic: {other}"
    return None
