"""`status --watch --on-violation CMD`: which violations are new at a refresh and may run
CMD now, within the limits docs/metrics.md gives, and what CMD gets. Pure. A violation is
known by its message (it names the kind, PID, run, service and GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drgpu.core.findings import Finding
from drgpu.core.gpu_usage import Status

PER_VIOLATION_S = 600.0
RUNS_PER_MINUTE = 6


@dataclass(frozen=True)
class Alert:
    """One new violation that runs CMD."""

    violation: Finding
    time: float  # seconds since the epoch

    def document(self) -> dict[str, Any]:
        """The JSON CMD reads on stdin."""
        v = self.violation
        return {
            "kind": v.kind,
            "message": v.message,
            "run": v.facts.get("run_id"),
            "service": v.facts.get("service") or None,
            "pid": v.facts.get("pid"),
            "gpu_index": v.facts.get("gpu_index"),
            "gpu_uuid": v.facts.get("gpu_uuid"),
            "time": self.time,
        }

    def environment(self) -> dict[str, str]:
        """`DRGPU_VIOLATION_KIND`, `_MESSAGE`, `_RUN`, `_SERVICE`, `_PID`, `_GPU_INDEX`,
        `_GPU_UUID`, `_TIME` (empty when the violation has none)."""
        return {
            f"DRGPU_VIOLATION_{key.upper()}": "" if value is None else str(value)
            for key, value in self.document().items()
        }


@dataclass(frozen=True)
class AlertState:
    """What the limits remember: the violations of the last refresh but those waiting for
    room, when each last ran CMD, the runs of the last minute, how many were held back, and
    those still waiting for room."""

    present: frozenset[str] = frozenset()
    last_run: dict[str, float] = field(default_factory=dict)
    recent: tuple[float, ...] = ()
    held_back: int = 0
    waiting: frozenset[str] = frozenset()


def due(state: AlertState, status: Status, now: float) -> tuple[AlertState, tuple[Alert, ...]]:
    """The new state, and the alerts to run for the violations new in `status` at `now`."""
    recent = tuple(t for t in state.recent if now - t < 60.0)
    last_run = {k: t for k, t in state.last_run.items() if now - t < PER_VIOLATION_S}
    alerts: list[Alert] = []
    held_back, waiting = state.held_back, set[str]()
    for violation in status.violations:
        key = violation.message
        if key in state.present or key in last_run:
            continue
        if len(recent) >= RUNS_PER_MINUTE:
            held_back += key not in state.waiting
            waiting.add(key)
            continue
        recent += (now,)
        last_run[key] = now
        alerts.append(Alert(violation, now))
    present = frozenset(v.message for v in status.violations) - waiting
    return AlertState(present, last_run, recent, held_back, frozenset(waiting)), tuple(alerts)
