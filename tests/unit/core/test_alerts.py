"""drgpu/core/alerts.py: which violations run `--on-violation`'s command (new ones only,
rate-limited), and what the command is told."""

from __future__ import annotations

from drgpu.core.alerts import PER_VIOLATION_S, RUNS_PER_MINUTE, AlertState, due
from drgpu.core.findings import Finding, Level
from drgpu.core.gpu_usage import FACTS, Status
from drgpu.core.model import Inventory


def with_violations(*messages: str) -> Status:
    violations = tuple(
        Finding(
            f"PID {100 + n}",
            Level.FAIL,
            message,
            kind="stray",
            facts={**dict.fromkeys(FACTS), "pid": 100 + n, "gpu_index": 0},
        )
        for n, message in enumerate(messages)
    )
    return Status(Inventory(gpus=()), {}, (), (), violations, ())


def test_only_new_violations_run_it() -> None:
    state, alerts = due(AlertState(), with_violations("a"), now=0)
    assert [a.violation.message for a in alerts] == ["a"]
    state, alerts = due(state, with_violations("a", "b"), now=1)
    assert [a.violation.message for a in alerts] == ["b"]
    state, alerts = due(state, with_violations("a", "b"), now=2)
    assert alerts == ()


def test_one_that_comes_back_soon_does_not_run_it_again() -> None:
    state, _ = due(AlertState(), with_violations("a"), now=0)
    state, _ = due(state, with_violations(), now=1)
    state, alerts = due(state, with_violations("a"), now=PER_VIOLATION_S - 1)
    assert alerts == ()
    state, _ = due(state, with_violations(), now=PER_VIOLATION_S + 1)
    state, alerts = due(state, with_violations("a"), now=PER_VIOLATION_S + 2)
    assert len(alerts) == 1


def test_at_most_six_runs_a_minute_the_rest_counted_once_and_run_later_while_they_last() -> None:
    many = [f"v{n}" for n in range(10)]
    state, alerts = due(AlertState(), with_violations(*many), now=0)
    assert len(alerts) == RUNS_PER_MINUTE
    assert state.held_back == 10 - RUNS_PER_MINUTE
    state, alerts = due(state, with_violations(*many), now=30)  # no room yet: counted once
    assert (alerts, state.held_back) == ((), 10 - RUNS_PER_MINUTE)
    # A minute on, the held-back ones still there run it (one gone meanwhile does not).
    state, alerts = due(state, with_violations(*many[:-1], "late"), now=61)
    assert [a.violation.message for a in alerts] == ["v6", "v7", "v8", "late"]
    state, alerts = due(state, with_violations(*many, "late"), now=62)
    assert [a.violation.message for a in alerts] == ["v9"]  # back, and it never ran CMD


def test_what_the_command_is_told() -> None:
    _, alerts = due(AlertState(), with_violations("PID 100 on GPU 0"), now=1700000000.5)
    alert = alerts[0]
    assert alert.document() == {
        "kind": "stray",
        "message": "PID 100 on GPU 0",
        "run": None,
        "service": None,
        "pid": 100,
        "gpu_index": 0,
        "gpu_uuid": None,
        "time": 1700000000.5,
    }
    assert alert.environment() == {
        "DRGPU_VIOLATION_KIND": "stray",
        "DRGPU_VIOLATION_MESSAGE": "PID 100 on GPU 0",
        "DRGPU_VIOLATION_RUN": "",
        "DRGPU_VIOLATION_SERVICE": "",
        "DRGPU_VIOLATION_PID": "100",
        "DRGPU_VIOLATION_GPU_INDEX": "0",
        "DRGPU_VIOLATION_GPU_UUID": "",
        "DRGPU_VIOLATION_TIME": "1700000000.5",
    }
