"""A Swarm `up` stopped by a signal, or killed, goes back down through harden's one rollback
path: `docker stack rm`, waited for; what a kill -9 leaves, the next `up` or `down` removes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import NewRun
from tests.support.runners import read_until, start_drgpu
from tests.swarm.test_swarm_up import leftovers, service, settings

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]


def slow_stack(bed: Any, directory: Path) -> Path:
    """A trainer whose task stays `starting` for a while (Swarm counts a task with a health
    check as running once it is healthy): `up` waits on it long enough to be stopped."""
    trainer = service(bed)
    trainer["command"] = ["sh", "-c", "sleep 90; touch /tmp/ready; exec sleep infinity"]
    trainer["healthcheck"] = {  # failures while it sleeps do not count: never unhealthy
        "test": ["CMD", "test", "-f", "/tmp/ready"],
        "interval": "1s",
        "start_period": "120s",
    }
    path = directory / "stack.yml"
    path.write_text(yaml.safe_dump({"services": {"sagemaker": trainer, "redis": service(bed)}}))
    return path


def start(bed: Any, *args: str) -> subprocess.Popen[str]:
    """`drgpu ARGS` in the background against the swarm bed."""
    return start_drgpu(
        *args, env=bed.env(PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(REPO)), cwd="/"
    )


def wait_until_a_task_runs(bed: Any, project: str) -> None:
    label = f"label=com.docker.stack.namespace={project}"
    deadline = time.monotonic() + 180  # a loaded machine starts tasks slowly
    while not bed.docker("ps", "-q", "--filter", label).stdout.split():
        assert time.monotonic() < deadline, "no task of the stack started"
        time.sleep(0.2)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_swarm_up_removes_the_stack(
    swarm_bed: Any,
    tmp_path: Path,
    new_run: NewRun,
    signum: signal.Signals,
) -> None:
    run_id = new_run()
    project = f"deepracer-{run_id}"
    env_file = settings(tmp_path, run_id, workers=1, trainer="2", simulator="")
    running = start(
        swarm_bed, "up", "--env-file", str(env_file), "-f", str(slow_stack(swarm_bed, tmp_path))
    )
    wait_until_a_task_runs(swarm_bed, project)

    running.send_signal(signum)
    began = read_until(running.stderr, "back down", timeout=180)  # as its rollback begins
    running.send_signal(signum)  # during the rollback: it must not cut it short
    _, stderr = running.communicate(timeout=180)
    stderr = began + stderr

    assert running.returncode == 128 + signum, stderr
    assert stderr.splitlines()[-1] == f"drgpu: error: interrupted ({signum.name})"
    assert "Traceback" not in stderr
    assert leftovers(swarm_bed, project) == []
    assert not (tmp_path / ".drgpu").exists()  # no stack file left, nor the folder made


def test_a_killed_swarm_up_is_removed_by_the_next_command(
    swarm_bed: Any,
    tmp_path: Path,
    new_run: NewRun,
) -> None:
    run_id = new_run()
    project = f"deepracer-{run_id}"
    env_file = settings(tmp_path, run_id, workers=1, trainer="2", simulator="")
    stack = slow_stack(swarm_bed, tmp_path)
    running = start(swarm_bed, "up", "--env-file", str(env_file), "-f", str(stack))
    wait_until_a_task_runs(swarm_bed, project)
    running.kill()
    running.wait(timeout=30)
    assert leftovers(swarm_bed, project), "kill -9 left nothing to clean"

    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = settings(other_dir, f"{run_id}o", workers=1, trainer="", simulator="")
    cpu_only = other_dir / "stack.yml"
    cpu_only.write_text(yaml.safe_dump({"services": {"redis": service(swarm_bed)}}))
    taker = start(swarm_bed, "down", "--env-file", str(other), "-f", str(cpu_only))
    _, stderr = taker.communicate(timeout=180)

    assert taker.returncode == 0, stderr
    assert f"drgpu up {project} (pid {running.pid}" in stderr
    assert "was killed" in stderr and "service" in stderr
    assert leftovers(swarm_bed, project) == []
