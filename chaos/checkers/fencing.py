"""Fencing: was every broker the controller fenced really gone or silent for a whole session?

The controller fences a broker for one of two causes (quorum.runtime / quorum.listener_watch):
- `session`: no heartbeat for a whole broker.session.timeout.ms. The line carries the silence
  and the session, so a fencing before the session ran out is an anomaly whatever the faults.
- `process-gone`: its listener closed the controller's connection and refused a new one. That
  is right only for a broker whose process a fault ended (kill, disk, shutdown) at that moment;
  a paused or cut-off broker must never be fenced this way (the listener watch's safety
  argument), nor a broker no fault touched (that would mean it crashed by itself).
A measurement too: how many fencings of each cause, and how soon after a kill the fast path fenced.
"""

from __future__ import annotations

from collections.abc import Sequence

from chaos.checkers.result import CheckResult, examples
from chaos.history import Event
from common.limits import CLOCK_SLACK_S

ENDING_ACTIONS = frozenset({"kill", "disk", "shutdown", "power"})  # faults that end a process


def _process_ended(events: Sequence[Event], broker: int, t: float) -> float | None:
    """When a fault ending `broker`'s process began, if one was under way at `t`."""
    ended = {e["id"]: e["t"] for e in events if e["kind"] == "fault-end"}
    for e in events:
        if (e["kind"] == "fault-start" and e.get("action") in ENDING_ACTIONS and broker in e.get("targets", ())
                and e["t"] <= t + CLOCK_SLACK_S and ended.get(e["id"], float("inf")) >= t - CLOCK_SLACK_S):
            return float(e["t"])
    return None


def check_fencing(events: Sequence[Event]) -> CheckResult:
    fencings = [e for e in events if e["kind"] == "fencing"]
    problems: list[str] = []
    delays: list[float] = []
    for e in fencings:
        broker, t = e["broker"], e["t"]
        if e["cause"] == "session" and e["age_ms"] < e["session_ms"]:
            problems.append(f"t={t:.2f} s: broker {broker} fenced after {e['age_ms']} ms without a heartbeat, "
                            f"before its {e['session_ms']} ms session ran out")
        elif e["cause"] == "process-gone":
            started = _process_ended(events, broker, t)
            if started is None:
                problems.append(f"t={t:.2f} s: broker {broker} fenced as gone ({e['reason']}) though no fault "
                                "ended its process then")
            else:
                delays.append(max(0.0, t - started))
    causes = {cause: sum(1 for e in fencings if e["cause"] == cause) for cause in ("session", "process-gone", "other")}
    fastest = f"; fenced {min(delays):.2f}-{max(delays):.2f} s after the kill" if delays else ""
    return CheckResult("early-fencing", len(problems), f"{len(fencings)} fencings: {causes['session']} by session "
                       f"expiry, {causes['process-gone']} of a process gone, {causes['other']} other; "
                       f"{len(problems)} of a broker still alive or before its session{fastest}",
                       examples(problems), {"causes": causes, "gone_after_s": delays})
