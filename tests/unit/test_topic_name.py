"""metadata.topic_name: Kafka's Topic.validate and the '.'/'_' collision rule."""

from __future__ import annotations

import pytest

from metadata.topic_name import MAX_TOPIC_NAME_LENGTH, topic_name_error


@pytest.mark.parametrize(("name", "existing", "problem"), [
    ("orders", (), None),
    ("a.b_c-D9", (), None),
    ("x" * MAX_TOPIC_NAME_LENGTH, (), None),
    ("", (), "can't be empty"),
    (None, (), "can't be empty"),
    (".", (), 'cannot be "." or ".."'),
    ("..", (), 'cannot be "." or ".."'),
    ("x" * (MAX_TOPIC_NAME_LENGTH + 1), (), "longer than 249"),
    ("bad name", (), "character other than ASCII alphanumerics"),
    ("ünï", (), "character other than ASCII alphanumerics"),
    ("a.b", ("a_b",), "collides with existing topic: a_b"),
    ("a_b", ("a.b", "zzz"), "collides with existing topic: a.b"),
    ("a.b", ("a.b",), None),  # the same topic is not a collision with itself
])
def test_topic_name_rules(name: object, existing: tuple[str, ...], problem: str | None) -> None:
    error = topic_name_error(name, existing)
    if problem is None:
        assert error is None
    else:
        assert error is not None and problem in error
