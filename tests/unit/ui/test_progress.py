"""drgpu/ui/progress.py: how `up` shows Compose's progress."""

from __future__ import annotations

import pytest

from drgpu.core.compose_progress import ProgressEvent
from drgpu.ui.progress import UpProgress


def test_off_a_terminal_each_change_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with UpProgress() as progress:
        for event in (
            ProgressEvent("sagemaker", "Created"),
            ProgressEvent("sagemaker", "Created"),  # no change, no line
            ProgressEvent("sagemaker", "Started"),
            ProgressEvent("sagemaker", "boom", failed=True),
        ):
            progress(event)
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit(" (", 1)[0] for line in lines] == [
        "drgpu: sagemaker: Created",
        "drgpu: sagemaker: Started",
        "drgpu: sagemaker: error: boom",
    ]
    assert all(line.endswith("s)") for line in lines)


def test_quiet_shows_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with UpProgress(quiet=True) as progress:
        progress(ProgressEvent("sagemaker", "Started"))
    assert capsys.readouterr().err == ""
