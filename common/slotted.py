"""Building frozen slotted dataclasses from values already checked, without their __init__.

Decoders and replay that checked every field on the way (metadata records and images, Fetch
answers) build their instances here: a frozen dataclass's __init__ sets each field through
object.__setattr__ by name, which costs more than the rest of the decode at 100,000 partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

T = TypeVar("T")


def instance_builder(cls: type[T], names: tuple[str, ...]) -> Callable[[Sequence[Any]], T]:
    """A function building an instance of the frozen slotted dataclass `cls` whose fields `names`
    take the values given, each already checked and normalised as `cls`'s kinds and invariants
    would (its __post_init__ is not run again): for decoders and replay that checked them on
    the way, at 100,000 partitions. It sets the slots through their descriptors, which frozen's
    __setattr__ does not guard (a partition's 11 fields: 1.2 us, against 2.0 us through
    object.__setattr__ by name). The function is generated with one statement per slot, as
    dataclasses generates __init__: a loop over the setters cost twice as much, and it runs once
    per partition decoded or merged (every PartitionChange replayed, on every controller and broker)."""
    slots = [cls.__dict__.get(name) for name in names]
    if not all(type(slot).__name__ == "member_descriptor" for slot in slots):
        raise TypeError(f"{cls.__name__} is not a slotted class with the fields {names}")
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    scope.update((f"set{i}", slot.__set__) for i, slot in enumerate(slots))  # type: ignore[union-attr]
    values = "".join(f"v{i}, " for i in range(len(names)))
    body = "".join(f"    set{i}(instance, v{i})\n" for i in range(len(names)))
    # Only indices reach the source: the generated code is the same whatever the field names.
    exec(f"def build(values):\n    ({values}) = values\n    instance = new(cls)\n{body}    return instance\n",
         scope)
    build: Callable[[Sequence[Any]], T] = scope["build"]
    return build
