"""Shared pytest setup: hypothesis profiles.

`make test` runs the default profile; `pytest --hypothesis-profile=thorough` runs every
property test with many more examples (a soak for the codecs and crash recovery).
"""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.register_profile(
    "thorough", max_examples=3000, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("default")
