"""`drgpu up` and `drgpu down` end to end: real engine, real Compose, real pynvml over the fake."""

from __future__ import annotations

import json
import signal
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
    containers,
    env_of,
    nvml_inside,
    service,
    write_env,
    write_stack,
)
from tests.support.runners import run_drgpu, start_drgpu

pytestmark = pytest.mark.docker


def test_up_gives_each_container_exactly_its_gpu_and_down_removes_all(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    bed.clear_records()
    stack = write_stack(
        tmp_path,
        {
            # DeepRacer-for-cloud forwards the host-side index: drgpu must replace it.
            "sagemaker": service(
                bed, environment={"PYTHONPATH": "/opt/pynvml", "CUDA_VISIBLE_DEVICES": "1"}
            ),
            "robomaker": service(bed),
            "redis": service(bed),
        },
    )
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    name = f"deepracer-{project}"

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 0, started.stderr
    trainer = container_of(bed, name, "sagemaker")
    simulator = container_of(bed, name, "robomaker")
    other = container_of(bed, name, "redis")
    assert nvml_inside(bed, trainer) == [[0, TRAINER]]
    assert nvml_inside(bed, simulator) == [[0, SIMULATOR]]
    assert env_of(trainer)["CUDA_VISIBLE_DEVICES"] == TRAINER
    assert env_of(trainer)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env_of(other)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not other["HostConfig"].get("DeviceRequests")
    records = {r["container_id"]: r["devices"] for r in bed.records() if r["devices"]}
    assert records == {trainer["Id"]: [TRAINER], simulator["Id"]: [SIMULATOR]}
    assert (env_file.parent / ".drgpu" / f"{name}.override.yml").is_file()

    stopped = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert stopped.returncode == 0, stopped.stderr
    assert containers(bed, name) == []
    assert f"drgpu: removed 3 containers of {name}\n" in stopped.stderr  # (no network)
    again = run_drgpu("down", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    assert again.returncode == 0, again.stderr
    assert f"drgpu: nothing of {name} was there to remove\n" in again.stderr


def test_a_start_that_fails_leaves_nothing_running(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    # drgpu's NVML sees a GPU the container toolkit (the stub) does not know:
    # validation passes, the engine refuses the start, and drgpu must clean up.
    bed.set_topology({"gpus": THREE_GPUS["gpus"][1:]})
    host_view = tmp_path / "host-topology.json"
    host_view.write_text(json.dumps(THREE_GPUS))
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="2", simulator="0")

    started = run_drgpu(
        "up",
        "--env-file",
        str(env_file),
        "-f",
        str(stack),
        env=bed.env(FAKE_NVML_TOPOLOGY=str(host_view)),
    )

    assert started.returncode == 5
    assert "unknown device" in started.stderr
    assert "Traceback" not in started.stderr
    assert containers(bed, f"deepracer-{project}") == []
    assert not (tmp_path / ".drgpu").exists()  # no override left, nor the folder made for it


def test_invalid_request_starts_nothing(bed: Any, tmp_path: Path, new_run: NewRun) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="7", simulator="0")

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 3
    assert "no GPU matches '7'" in started.stderr
    assert "1: Tesla M40 24GB (22912 MiB, 00000000:41:00.0)" in started.stderr
    assert containers(bed, f"deepracer-{project}") == []


def test_up_refuses_a_gpu_with_rows_pending_and_warns_of_persistence(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    faulty = json.loads(json.dumps(THREE_GPUS))
    faulty["gpus"][2] |= {"remap_pending": True}  # the trainer's, NVML index 1
    faulty["gpus"][1] |= {"persistence_mode": False}  # the simulator's
    bed.set_topology(faulty)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 3, started.stderr
    assert "GPU 1: row remapping pending (reset the GPU)" in started.stderr
    assert "persistence mode is off on GPU 0" in started.stderr
    assert containers(bed, f"deepracer-{project}") == []


def test_rl_coach_forwards_the_trainer_uuid_and_gets_no_gpu(
    bed: Any, tmp_path: Path, new_run: NewRun
) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    bed.clear_records()
    stack = write_stack(
        tmp_path,
        {
            "rl_coach": service(bed, environment={"CUDA_VISIBLE_DEVICES": "1"}),
            "robomaker": service(bed),
        },
    )
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")

    started = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert started.returncode == 0, started.stderr
    coach = container_of(bed, f"deepracer-{project}", "rl_coach")
    assert env_of(coach)["CUDA_VISIBLE_DEVICES"] == TRAINER
    assert env_of(coach)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not coach["HostConfig"].get("DeviceRequests")
    assert coach["Id"] not in {r["container_id"] for r in bed.records() if r["devices"]}


def test_cpu_only_stack_needs_no_nvml(bed: Any, tmp_path: Path, new_run: NewRun) -> None:
    project = new_run()
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="none", simulator="")

    started = run_drgpu(
        "up",
        "--env-file",
        str(env_file),
        "-f",
        str(stack),
        env=bed.env(LD_LIBRARY_PATH=str(tmp_path)),
    )

    assert started.returncode == 0, started.stderr
    trainer = container_of(bed, f"deepracer-{project}", "sagemaker")
    assert env_of(trainer)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not trainer["HostConfig"].get("DeviceRequests")


def test_ctrl_c_during_up_leaves_nothing_running(bed: Any, tmp_path: Path, new_run: NewRun) -> None:
    project = new_run()
    # The simulator waits for the trainer to turn healthy, so `compose up` is still busy
    # with a running trainer when drgpu is interrupted.
    bed.set_topology(THREE_GPUS)
    slow = service(
        bed,
        command=["sh", "-c", "sleep 6; touch /tmp/ready; sleep infinity"],
        healthcheck={"test": ["CMD", "test", "-f", "/tmp/ready"], "interval": "1s"},
    )
    stack = write_stack(
        tmp_path,
        {
            "sagemaker": slow,
            "robomaker": service(bed, depends_on={"sagemaker": {"condition": "service_healthy"}}),
        },
    )
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")
    name = f"deepracer-{project}"
    running = start_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    deadline = time.monotonic() + 30
    while not any(c["State"]["Running"] for c in containers(bed, name)):
        assert time.monotonic() < deadline, "the trainer never started"
        time.sleep(0.2)

    running.send_signal(signal.SIGINT)
    _, stderr = running.communicate(timeout=120)

    assert running.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert containers(bed, name) == []


def test_up_again_keeps_the_run_on_its_own_gpus(bed: Any, tmp_path: Path, new_run: NewRun) -> None:
    project = new_run()
    bed.set_topology(THREE_GPUS)
    stack = write_stack(tmp_path, {"sagemaker": service(bed), "robomaker": service(bed)})
    env_file = write_env(tmp_path, project, trainer="1", simulator="0")

    first = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())
    again = run_drgpu("up", "--env-file", str(env_file), "-f", str(stack), env=bed.env())

    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    trainer = container_of(bed, f"deepracer-{project}", "sagemaker")
    assert nvml_inside(bed, trainer) == [[0, TRAINER]]
