"""A signal during a DRfC `up` while rl_coach starts its SageMaker trainer (issue 23,
defect 2): the trainer carries no label of the run and may come after DRfC's stop script
looked for it, yet nothing of the run may remain, and drgpu exits 128 + the signal."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.drfc import Checkout, copy_checkout, remove_runs
from tests.e2e.helpers import THREE_GPUS, containers
from tests.support.runners import start_drgpu

pytestmark = pytest.mark.docker


@pytest.fixture
def checkout(bed: Any, tmp_path: Path) -> Iterator[Checkout]:
    bed.set_topology(THREE_GPUS)
    remove_runs(bed, "0")
    yield copy_checkout(bed, tmp_path)
    remove_runs(bed, "0")


def trainers(bed: Any) -> list[dict[str, Any]]:
    """Every SageMaker-local-mode container on the engine (running or not)."""
    ids = bed.docker("ps", "-aq", "--filter", "name=algo-").stdout.split()
    return list(json.loads(bed.docker("inspect", *ids).stdout)) if ids else []


def wait_for_rl_coach(bed: Any) -> None:
    deadline = time.monotonic() + 60
    while not any(
        c["State"]["Running"] and c["Config"]["Labels"]["com.docker.compose.service"] == "rl_coach"
        for c in containers(bed, "deepracer-0")
    ):
        assert time.monotonic() < deadline, "rl_coach never started"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("signum", "trainer_after_s", "signal_after_s"),
    [
        # The trainer comes while Compose stops rl_coach: after DRfC's stop script looked.
        (signal.SIGINT, 1.5, 0.0),
        (signal.SIGTERM, 0.8, 0.3),
        # The trainer comes about when the signal does.
        (signal.SIGINT, 0.3, 0.3),
        # The trainer runs already.
        (signal.SIGTERM, 0.0, 1.0),
    ],
)
def test_a_signal_while_rl_coach_starts_its_trainer_leaves_nothing_of_the_run(
    bed: Any,
    checkout: Checkout,
    signum: signal.Signals,
    trainer_after_s: float,
    signal_after_s: float,
) -> None:
    """`trainer_after_s`: when rl_coach creates its trainer, after it starts;
    `signal_after_s`: when drgpu gets the signal, after rl_coach starts (the start script
    waits 3 s after Compose: the signal comes while `up` is in flight)."""
    shell = {
        **checkout.activated(),
        "DRGPU_TEST_TRAINER_DELAY": str(trainer_after_s),
        "DRGPU_TEST_START_SLEEP": "3",
    }
    running = start_drgpu("up", env=shell, cwd="/")
    wait_for_rl_coach(bed)
    time.sleep(signal_after_s)

    running.send_signal(signum)
    _, stderr = running.communicate(timeout=180)

    assert running.returncode == 128 + signum, stderr
    assert stderr.splitlines()[-1] == f"drgpu: error: interrupted ({signum.name})"
    assert "Traceback" not in stderr
    assert containers(bed, "deepracer-0") == []
    assert [c["Name"] for c in trainers(bed)] == [], stderr
