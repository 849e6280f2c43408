"""GPU sharing end to end: timeslice between runs, and an MPS daemon with its clients."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NewRun
from tests.e2e.helpers import (
    SIMULATOR,
    THREE_GPUS,
    TRAINER,
    container_of,
    env_of,
    nvml_inside,
    service,
    write_stack,
)
from tests.support.runners import run_drgpu

pytestmark = pytest.mark.docker

# A stand-in for `nvidia-cuda-mps-control -d` (which the NVIDIA toolkit would mount):
# it leaves a control pipe naming its GPUs, and a log, and returns as the daemon does.
FAKE_MPS_CONTROL = """\
#!/bin/sh
[ "$1" = -d ] || exit 2
printf %s "$CUDA_VISIBLE_DEVICES" >"$CUDA_MPS_PIPE_DIRECTORY/control"
echo "MPS control daemon started" >"$CUDA_MPS_LOG_DIRECTORY/control.log"
"""


def settings(directory: Path, run_id: str, **keys: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\n" + "".join(f"{key}={value}\n" for key, value in keys.items())
    )
    return path


def pipe_of(bed: Any, container: dict[str, Any]) -> str:
    """The daemon's control pipe as a client sees it (written just after the daemon starts)."""
    for _ in range(50):
        done = bed.docker("exec", container["Id"], "cat", "/tmp/nvidia-mps/control", check=False)
        if done.returncode == 0:
            return str(done.stdout)
        time.sleep(0.1)
    raise AssertionError(f"no MPS control pipe in {container['Name']}")


def test_timeslice_shares_a_gpu_within_and_between_runs(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    first = settings(
        tmp_path / "first",
        project,
        DR_SAGEMAKER_CUDA_DEVICES="1",
        DR_ROBOMAKER_CUDA_DEVICES="1",
        DRGPU_SHARING="timeslice",
    )
    second_run = f"{project}-2"
    second = settings(
        tmp_path / "second",
        second_run,
        DR_SAGEMAKER_CUDA_DEVICES="1",
        DRGPU_SHARING="timeslice",
    )
    try:
        started = run_drgpu("up", "--env-file", str(first), "-f", str(stack), env=bed.env())
        assert started.returncode == 0, started.stderr
        assert "DRGPU_SHARING=timeslice: they take turns on it" in started.stderr
        joined = run_drgpu("up", "--env-file", str(second), "-f", str(stack), env=bed.env())
        assert joined.returncode == 0, joined.stderr
        assert f"is held by run '{project}'" in joined.stderr

        for run_id, service_name in (
            (project, "sagemaker"),
            (project, "robomaker"),
            (second_run, "sagemaker"),
        ):
            container = container_of(bed, f"deepracer-{run_id}", service_name)
            assert nvml_inside(bed, container) == [[0, TRAINER]]
            environment = env_of(container)
            assert environment["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
            assert environment["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
            assert environment["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"
    finally:
        bed.cleanup_project(f"deepracer-{second_run}")


def test_an_exclusive_run_refuses_a_gpu_a_timeslice_run_holds(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed)})
    sharing = settings(
        tmp_path / "a", project, DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_SHARING="timeslice"
    )
    assert (
        run_drgpu("up", "--env-file", str(sharing), "-f", str(stack), env=bed.env()).returncode == 0
    )
    exclusive = settings(tmp_path / "b", f"{project}-2", DR_SAGEMAKER_CUDA_DEVICES="0")

    refused = run_drgpu("up", "--env-file", str(exclusive), "-f", str(stack), env=bed.env())

    assert refused.returncode == 3
    assert f"is held by run '{project}' (sagemaker)" in refused.stderr
    assert "DRGPU_SHARING=exclusive does not share GPUs between runs" in refused.stderr


def test_mps_clients_start_after_the_daemon_and_share_its_ipc_and_pipes(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text(FAKE_MPS_CONTROL)
    fake.chmod(0o755)
    # drgpu renders the daemon's image (DRGPU_MPS_IMAGE) and command; the stack only
    # adds the stand-in for the binary and keeps the image local.
    mps = {"pull_policy": "never", "volumes": [f"{fake}:/usr/local/bin/{fake.name}:ro"]}
    stack = write_stack(
        tmp_path, {"sagemaker": service(bed), "robomaker": service(bed), "drgpu-mps": mps}
    )
    env_file = settings(
        tmp_path,
        project,
        DR_SAGEMAKER_CUDA_DEVICES="0",
        DR_ROBOMAKER_CUDA_DEVICES="0",
        DR_WORKERS="2",
        DRGPU_SHARING="mps",
        DRGPU_MPS_SAGEMAKER_THREADS="60",
        DRGPU_MPS_ROBOMAKER_THREADS="20",
        DRGPU_MPS_ROBOMAKER_MEMORY="2G",
        DRGPU_MPS_IMAGE=bed.image,
    )
    name = f"deepracer-{project}"

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 0, started.stderr
    daemon = container_of(bed, name, "drgpu-mps")
    assert daemon["State"]["Running"]
    assert daemon["Config"]["Cmd"][-1].startswith("nvidia-cuda-mps-control -d && ")
    assert daemon["HostConfig"]["IpcMode"] == "shareable"
    assert [r["devices"] for r in bed.records() if r["container_id"] == daemon["Id"]] == [
        [SIMULATOR]
    ]
    for client_name, threads in (("sagemaker", "60"), ("robomaker-1", "20"), ("robomaker-2", "20")):
        client = container_of(bed, name, client_name)
        assert client["HostConfig"]["IpcMode"] == f"container:{daemon['Id']}"
        assert client["State"]["StartedAt"] >= daemon["State"]["StartedAt"]
        assert nvml_inside(bed, client) == [[0, SIMULATOR]]
        environment = env_of(client)
        assert environment["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        assert environment["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == threads
        assert pipe_of(bed, client) == SIMULATOR
    assert env_of(container_of(bed, name, "robomaker-1"))["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == (
        f"{SIMULATOR}=2G"
    )
    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    assert stopped.returncode == 0, stopped.stderr
    volumes = ("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={name}")
    assert bed.docker(*volumes).stdout.split() == []  # the MPS daemon's too
