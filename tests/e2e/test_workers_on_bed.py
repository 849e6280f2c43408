"""Simulator workers end to end: robomaker-1..N, each with exactly its GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import NewRun
from tests.e2e.helpers import (
    SIMULATOR,
    SPARE,
    THREE_GPUS,
    TRAINER,
    container_of,
    containers,
    env_of,
    nvml_inside,
    service,
    write_stack,
)
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker


def settings(tmp_path: Path, run_id: str, **keys: str) -> Path:
    path = tmp_path / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\n" + "".join(f"{key}={value}\n" for key, value in keys.items())
    )
    return path


def services_of(bed: Any, project: str) -> list[str]:
    return sorted(
        c["Config"]["Labels"]["com.docker.compose.service"] for c in containers(bed, project)
    )


def test_three_workers_on_two_gpus_each_see_exactly_their_gpu(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    bed.clear_records()
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = settings(
        tmp_path,
        project,
        DR_SAGEMAKER_CUDA_DEVICES="1",
        DR_ROBOMAKER_CUDA_DEVICES="0,2",
        DR_WORKERS="3",
    )
    name = f"deepracer-{project}"

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 0, started.stderr
    assert services_of(bed, name) == ["robomaker-1", "robomaker-2", "robomaker-3", "sagemaker"]
    expected = {"robomaker-1": SIMULATOR, "robomaker-2": SPARE, "robomaker-3": SIMULATOR}
    seen = {}
    for worker, uuid in expected.items():
        container = container_of(bed, name, worker)
        assert nvml_inside(bed, container) == [[0, uuid]], worker
        assert env_of(container)["DOCKER_REPLICA_SLOT"] == worker[-1]
        assert env_of(container)["CUDA_VISIBLE_DEVICES"] == uuid
        assert env_of(container)["PYTHONPATH"] == "/opt/pynvml"  # the rest of robomaker
        seen[container["Id"]] = [uuid]
    trainer = container_of(bed, name, "sagemaker")
    assert nvml_inside(bed, trainer) == [[0, TRAINER]]
    seen[trainer["Id"]] = [TRAINER]
    assert {r["container_id"]: r["devices"] for r in bed.records() if r["devices"]} == seen

    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert stopped.returncode == 0, stopped.stderr
    assert containers(bed, name) == []


def test_fewer_workers_on_the_next_up_leave_no_stale_worker(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"robomaker": service(bed)})
    name = f"deepracer-{project}"
    three = settings(tmp_path, project, DR_ROBOMAKER_CUDA_DEVICES="0,2", DR_WORKERS="3")
    assert (
        run_drgpu("up", "--env-file", str(three), "-f", str(stack), env=bed.env()).returncode == 0
    )

    one = settings(tmp_path, project, DR_ROBOMAKER_CUDA_DEVICES="2", DR_WORKERS="1")
    again = run_drgpu("up", "--env-file", str(one), "-f", str(stack), env=bed.env())

    assert again.returncode == 0, again.stderr
    assert services_of(bed, name) == ["robomaker"]
    assert nvml_inside(bed, container_of(bed, name, "robomaker")) == [[0, SPARE]]


def test_workers_copy_robomaker_from_every_compose_file_that_defines_it(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    # A fixed container_name cannot be copied to two workers: drgpu drops it from them.
    robomaker = service(bed, container_name=f"{project}-robomaker")
    base = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": robomaker})
    keys = tmp_path / "keys.yml"
    keys.write_text(
        yaml.safe_dump({"services": {"robomaker": {"environment": {"FROM_KEYS": "yes"}}}})
    )
    env_file = settings(tmp_path, project, DR_ROBOMAKER_CUDA_DEVICES="0", DR_WORKERS="2")
    name = f"deepracer-{project}"

    started = run_drgpu(
        "up", "--env-file", str(env_file), "-f", str(base), "-f", str(keys), env=bed.env()
    )

    assert started.returncode == 0, started.stderr
    for worker in ("robomaker-1", "robomaker-2"):
        environment = env_of(container_of(bed, name, worker))
        assert environment["FROM_KEYS"] == "yes"
        assert environment["PYTHONPATH"] == "/opt/pynvml"
        assert environment["CUDA_VISIBLE_DEVICES"] == SIMULATOR


def test_a_stacks_own_numbered_workers_get_their_gpus(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"robomaker-1": service(bed), "robomaker-2": service(bed)})
    env_file = settings(tmp_path, project, DR_ROBOMAKER_CUDA_DEVICES="2,0", DR_WORKERS="2")
    name = f"deepracer-{project}"

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 0, started.stderr
    assert nvml_inside(bed, container_of(bed, name, "robomaker-1")) == [[0, SPARE]]
    assert nvml_inside(bed, container_of(bed, name, "robomaker-2")) == [[0, SIMULATOR]]
