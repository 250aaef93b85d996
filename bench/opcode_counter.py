"""What a thread executes, counted: Python bytecodes and calls, and where the bytecodes run.

One counter for the in-process benches (bench/leader_request_cpu.py, bench/produce_opcodes.py,
bench/follower_round_cpu.py): bytecodes from sys.settrace's opcode events, calls (Python and C)
from sys.setprofile, both for the thread that installs it. It leaves out what C code does
inside a call (a struct unpack, a dict lookup, a syscall) and slows the thread ~50x: a count the
box's load does not move, not a time.

Each bytecode is charged to its code object; `per_file()` and `per_function()` fold those into
source files and functions, so a bench can say whose code a request's work runs in. `<string>`
is generated code (dataclass __init__s, instance builders, named tuples): every class's
__init__ is named alike, so per function it is listed with the function that called it.
"""

from __future__ import annotations

import sys
import sysconfig
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_PREFIXES = ((f"{ROOT}/", ""), (f"{sysconfig.get_paths()['stdlib']}/", "stdlib/"))


def short_name(filename: str) -> str:
    """A source file relative to the project's root, or to the standard library (`stdlib/...`)."""
    for prefix, label in _PREFIXES:
        if filename.startswith(prefix):
            return label + filename[len(prefix):]
    return filename


class Counts:
    """Bytecodes and calls the thread that installs it executes, bytecodes per code object."""

    def __init__(self) -> None:
        self.opcodes = 0
        self.calls = 0
        self.by_code: Counter[CodeType] = Counter()
        self.entries: Counter[CodeType] = Counter()  # Python frames entered per code object (a generator's resumes too)
        self.generated: Counter[tuple[CodeType, CodeType | None]] = Counter()  # (code, its caller's)

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            self.entries[frame.f_code] += 1
        elif event == "opcode":
            self.opcodes += 1
            code = frame.f_code
            self.by_code[code] += 1
            if code.co_filename == "<string>":
                caller = frame.f_back
                self.generated[code, None if caller is None else caller.f_code] += 1
        return self._trace

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            self.calls += 1

    def install(self) -> None:
        sys.settrace(self._trace)
        sys.setprofile(self._profile)

    @staticmethod
    def remove() -> None:
        sys.settrace(None)
        sys.setprofile(None)

    def count(self, fn: Callable[[], Any], times: int) -> None:
        """Call `fn` `times` times, counting."""
        self.install()
        try:
            for _ in range(times):  # bounded by the caller's count
                fn()
        finally:
            self.remove()

    def per_file(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for code, n in self.by_code.items():
            out[short_name(code.co_filename)] += n
        return out

    def per_function(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for code, n in self.by_code.items():
            if code.co_filename != "<string>":
                out[_function_name(code)] += n
        for (code, caller), n in self.generated.items():
            called_from = "?" if caller is None else f"{short_name(caller.co_filename)}:{caller.co_qualname}"
            out[f"<string>:{code.co_name} <- {called_from}"] += n
        return out

    def report(self, per: int, *, by_file: bool = False, top: int = 0) -> str:
        """Opcodes per unit of work (`per` units counted): by source file, and the `top` functions."""
        lines = []
        if by_file:
            lines.append("opcodes by source file:")
            lines += [f"{n / per:>10,.0f}  {name}" for name, n in self.per_file().most_common()
                      if n / per >= 0.5]
        if top:
            entered: Counter[str] = Counter()
            for code, n in self.entries.items():  # generated code's entries are folded into '?' callers: left out
                if code.co_filename != "<string>":
                    entered[_function_name(code)] += n
            lines.append(f"opcodes by function (top {top}), and how often each was entered:")
            lines += [f"{n / per:>10,.0f} {entered[name] / per:>6.2f}x  {name}"
                      for name, n in self.per_function().most_common(top)]
        return "\n".join(lines)


def _function_name(code: CodeType) -> str:
    return f"{short_name(code.co_filename)}:{code.co_qualname}"
