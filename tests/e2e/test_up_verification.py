"""`drgpu up` proves a stack that really runs (issue 12.6): a GPU service that stopped, or
any service that exited non-zero, fails `up` (exit 5) with its last log lines, and the
stack is brought back down. Compose's own warnings reach the user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import THREE_GPUS, containers, service, write_env, write_stack
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker


def test_a_service_that_exits_non_zero_fails_up_with_its_log(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    failing = service(bed, command=["sh", "-c", "echo no world to load >&2; exit 3"])
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "redis": failing})
    env_file = write_env(tmp_path, project, trainer="1", simulator="")

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 5, started.stderr
    assert f"deepracer-{project}-redis-1: exited with status 3" in started.stderr
    assert "| no world to load" in started.stderr
    assert "Traceback" not in started.stderr
    assert containers(bed, f"deepracer-{project}") == []


def test_a_gpu_service_that_ends_fails_up_and_compose_warnings_are_shown(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    done_at_once = service(bed, command=["echo", "${DRGPU_TEST_UNSET_VARIABLE}"])
    stack = write_stack(tmp_path, {"sagemaker": done_at_once, "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 5, started.stderr
    assert "sagemaker-1: exited (status 0), but it was given a GPU" in started.stderr
    assert (
        'drgpu: warning: compose: The "DRGPU_TEST_UNSET_VARIABLE" variable is not set.'
        in started.stderr
    )
    assert containers(bed, f"deepracer-{project}") == []


def test_the_engine_reports_over_its_socket_what_the_docker_cli_sees(
    bed: Any, tmp_path: Path, new_run: NewRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` verifies over the engine's unix socket (one listing, one inspection per
    container, on one connection): the containers `docker inspect` shows, exactly."""
    from drgpu.host import engine

    project = new_run()

    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    assert started.returncode == 0, started.stderr
    monkeypatch.setenv("DOCKER_HOST", bed.docker_host)

    over_socket = engine.project_containers(f"deepracer-{project}")
    inspected = sorted(containers(bed, f"deepracer-{project}"), key=lambda c: c["Name"])

    assert [c.service for c in over_socket] == ["robomaker", "sagemaker"]
    assert all(c.started_at is not None and c.device_requests for c in over_socket)
    assert [(c.id, c.name, c.state, c.labels) for c in over_socket] == [
        (c["Id"], c["Name"].lstrip("/"), c["State"]["Status"], c["Config"]["Labels"])
        for c in inspected
    ]
    assert [[r.device_ids for r in c.device_requests] for c in over_socket] == [
        [tuple(r["DeviceIDs"]) for r in c["HostConfig"]["DeviceRequests"]] for c in inspected
    ]


def test_a_toolkit_that_ignores_the_device_request_fails_up_from_inside(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    """The engine's records are right (one device request, its UUIDs), but the runtime
    hands every GPU to every container: only the probe inside sees it."""
    project = new_run()
    bed.set_topology({**THREE_GPUS, "hook_ignores_requests": True})
    try:
        stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
        env_file = write_env(tmp_path, project, trainer="1", simulator="0")

        started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    finally:
        bed.set_topology(THREE_GPUS)

    assert started.returncode == 5, started.stderr
    assert f"deepracer-{project}-sagemaker-1: seen from inside," in started.stderr
    assert f"deepracer-{project}-robomaker-1: seen from inside," in started.stderr
    assert "NOT verified: seen from inside" in started.stderr  # the progress line says it
    assert "Traceback" not in started.stderr
    assert containers(bed, f"deepracer-{project}") == []


def test_a_container_without_python3_is_named_not_provable_from_inside(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    no_python = service(bed, command=["/bin/sleep", "infinity"], environment={"PATH": "/none"})
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": no_python})
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 0, started.stderr
    robomaker = f"deepracer-{project}-robomaker-1"
    assert "not provable from inside" in started.stdout  # its row of the table
    assert f"{robomaker} not provable from inside: {robomaker}: the image has no python3" in (
        " ".join(started.stderr.split())
    )
    assert "sagemaker-1 not provable" not in started.stderr
