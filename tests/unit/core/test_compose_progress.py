"""drgpu/core/compose_progress.py: Compose's progress lines, and drgpu's verification, as
the events `drgpu up` shows."""

from __future__ import annotations

import pytest

from drgpu.core.compose_progress import (
    ProgressEvent,
    compose_event,
    log_line,
    plain_compose_event,
    service_of,
    verification_events,
)
from drgpu.host.compose_output import compose_warnings


@pytest.mark.parametrize(
    ("line", "event"),
    [
        (
            '{"id":"Container deepracer-0-sagemaker-1","status":"Working","text":"Creating"}',
            ProgressEvent("sagemaker", "Creating"),
        ),
        (
            '{"id":"Container deepracer-0-robomaker-2-1","status":"Done","text":"Healthy"}',
            ProgressEvent("robomaker-2", "Healthy"),
        ),
        (
            '{"id":"sagemaker","status":"Working","text":"Pulling"}',
            ProgressEvent("sagemaker", "Pulling"),
        ),
        (
            '{"id":"Image python:3","status":"Working","text":"Pulling"}',
            ProgressEvent("image python:3", "Pulling"),
        ),
        ('{"id":"Network deepracer-0_default","status":"Done","text":"Created"}', None),
        (
            '{"id":"Container deepracer-0-sagemaker-1","status":"Error","text":"no such image"}',
            ProgressEvent("sagemaker", "no such image", failed=True),
        ),
        (
            '{"id":"service:sagemaker:1","status":"Error","text":"No such image: x"}',
            ProgressEvent("sagemaker", "No such image: x", failed=True),
        ),
        ("Error response from daemon: boom", None),
        ("[1, 2]", None),
    ],
)
def test_compose_lines_become_events(line: str, event: ProgressEvent | None) -> None:
    assert compose_event(line, "deepracer-0") == event


def test_other_json_lines_read_as_compose_writes_them_without_json_progress() -> None:
    warning = '{"level":"warning","msg":"The \\"X\\" variable is not set.","time":"t"}'
    assert compose_warnings(log_line(warning)) == ('The "X" variable is not set.',)
    error = '{"error":true,"message":"Error response from daemon: No such image: x"}'
    assert log_line(error) == "Error response from daemon: No such image: x"
    assert log_line("plain text") == "plain text"


def test_a_container_named_by_hand_stands_for_itself() -> None:
    assert service_of("my-trainer", "deepracer-0") == "my-trainer"
    assert service_of("deepracer-0-rl_coach-1", "deepracer-0") == "rl_coach"


def test_verification_names_the_containers_that_differ() -> None:
    events = verification_events(
        [("deepracer-0-sagemaker-1", "sagemaker"), ("deepracer-0-robomaker-1", "robomaker")],
        ["deepracer-0-robomaker-1: has 0 device requests, planned 1"],
    )
    assert events == [
        ProgressEvent("sagemaker", "verified"),
        ProgressEvent("robomaker", "NOT verified: has 0 device requests, planned 1", failed=True),
    ]


@pytest.mark.parametrize(
    ("line", "event"),
    [
        (" Container deepracer-0-rl_coach-1  Started", ProgressEvent("rl_coach", "Started")),
        (" Container deepracer-0-robomaker-1  Creating", ProgressEvent("robomaker", "Creating")),
        (
            " Container deepracer-0-redis-1  Error response from daemon: boom",
            ProgressEvent("redis", "Error response from daemon: boom", failed=True),
        ),
        (" Network deepracer-0_default  Created", None),
        ("Created a new model prefix", None),
    ],
)
def test_plain_compose_lines_become_events(line: str, event: ProgressEvent | None) -> None:
    assert plain_compose_event(line, "deepracer-0") == event
