"""Compose's output sorted for people: its warnings kept, its progress lines dropped."""

from __future__ import annotations

from drgpu.host.compose_output import compose_warnings, failure_hint, talk_lines

UNSET = 'time="2026-11-22T19:25:24Z" level=warning msg="The \\"X\\" variable is not set."\n'
NOTHING = 'time="2026-11-26T08:24:01Z" level=warning msg="Warning: No resource found"\n'
STDERR = (
    (UNSET * 2)
    + NOTHING
    + """\
WARN[0000] /x/docker-compose.yml: the attribute `version` is obsolete
 Container deepracer-0-rl_coach-1  Creating
 Container deepracer-0-rl_coach-1  Started
 Network deepracer-0_default  Created
[+] Running 2/2
Error response from daemon: something broke
"""
)


def test_compose_warnings_are_unescaped_deduplicated_and_in_order() -> None:
    assert compose_warnings(STDERR) == (
        'The "X" variable is not set.',
        "No resource found",
        "/x/docker-compose.yml: the attribute `version` is obsolete",
    )


def test_talk_keeps_the_scripts_own_lines_and_drops_progress_and_warnings() -> None:
    stdout = "Training of model s3://bucket/m starting.\n\nUsing image a:b\n"
    assert talk_lines(stdout, STDERR) == (
        "Training of model s3://bucket/m starting.",
        "Using image a:b",
        "Error response from daemon: something broke",
    )


def test_a_failed_up_gets_the_hint_its_words_call_for() -> None:
    toolkit = 'Error response from daemon: could not select device driver "nvidia"'
    assert "container toolkit" in (failure_hint(toolkit) or "")
    assert "2.24.4" in (failure_hint("yaml: unknown tag !override") or "")
    assert failure_hint("no such image") is None
