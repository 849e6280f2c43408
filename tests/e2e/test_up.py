"""`drgpu up` and `drgpu down` end to end: real engine, real Compose, real pynvml over the fake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.docker

TRAINER, SIMULATOR, SPARE = (
    "GPU-1d3c5b7a-0000-4000-8000-000000000002",
    "GPU-0a2b4c6d-0000-4000-8000-000000000001",
    "GPU-2e4f6a8b-0000-4000-8000-000000000003",
)
# Listed out of PCI order: NVML index 0 is 03:00.0, 1 is 41:00.0, 2 is 81:00.0.
THREE_GPUS: dict[str, Any] = {
    "driver_version": "550.54.14",
    "cuda_driver_version": 12040,
    "gpus": [
        {"uuid": SPARE, "name": "NVIDIA L4", "pci_bus_id": "00000000:81:00.0",
         "memory_total_mib": 23034, "compute_capability": [8, 9]},
        {"uuid": SIMULATOR, "name": "NVIDIA GeForce GTX 1650", "pci_bus_id": "0000:03:00.0",
         "memory_total_mib": 4096, "compute_capability": [7, 5]},
        {"uuid": TRAINER, "name": "Tesla M40 24GB", "pci_bus_id": "41:00.0",
         "memory_total_mib": 22912, "compute_capability": [5, 2]},
    ],
}
PYNVML_VIEW = (
    "import json, pynvml; pynvml.nvmlInit(); "
    "print(json.dumps([[i, pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))]"
    " for i in range(pynvml.nvmlDeviceGetCount())]))"
)


def _service(bed: Any, **extra: Any) -> dict[str, Any]:
    body = {
        "image": bed.image,
        "pull_policy": "never",
        "network_mode": "none",
        "init": True,
        "command": ["sleep", "infinity"],
        "volumes": [f"{bed.pynvml_py}:/opt/pynvml/pynvml.py:ro"],
        "environment": {"PYTHONPATH": "/opt/pynvml"},
    }
    body.update(extra)
    return body


def _write_stack(tmp_path: Path, services: dict[str, Any]) -> Path:
    path = tmp_path / "stack.yml"
    path.write_text(yaml.safe_dump({"services": services}, sort_keys=False))
    return path


def _write_env(tmp_path: Path, run_id: str, trainer: str, simulator: str) -> Path:
    path = tmp_path / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\nDR_SAGEMAKER_CUDA_DEVICES={trainer}\n"
        f"DR_ROBOMAKER_CUDA_DEVICES={simulator}\nDR_WORKERS=1\n"
    )
    return path


def drgpu(bed: Any, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess on the bed's "host" (fake NVML, private engine)."""
    return subprocess.run(
        [sys.executable, "-m", "drgpu", *args],
        env=bed.env(**env), capture_output=True, text=True, timeout=300, check=False,
    )


def _containers(bed: Any, project: str) -> list[dict[str, Any]]:
    ids = bed.docker(
        "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"
    ).stdout.split()
    if not ids:
        return []
    return list(json.loads(bed.docker("inspect", *ids).stdout))


def _container_of(bed: Any, project: str, service: str) -> dict[str, Any]:
    found = [c for c in _containers(bed, project)
             if c["Config"]["Labels"].get("com.docker.compose.service") == service]
    assert len(found) == 1, f"expected one {service} container, found {len(found)}"
    return found[0]


def _nvml_inside(bed: Any, container: dict[str, Any]) -> list[list[Any]]:
    done = bed.docker("exec", container["Id"], "python3", "-c", PYNVML_VIEW)
    return list(json.loads(done.stdout))


def _env_of(container: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in container["Config"]["Env"])


@pytest.fixture
def project(bed: Any, request: pytest.FixtureRequest) -> Any:
    """A unique run id; every container of its project is removed afterwards."""
    run_id = "e2e" + str(abs(hash(request.node.name)) % 10**6)
    yield run_id
    bed.cleanup_project(f"deepracer-{run_id}")


def test_up_gives_each_container_exactly_its_gpu_and_down_removes_all(
    bed: Any, tmp_path: Path, project: str
) -> None:
    bed.set_topology(THREE_GPUS)
    bed.clear_records()
    stack = _write_stack(tmp_path, {
        # DeepRacer-for-cloud forwards the host-side index: drgpu must replace it.
        "sagemaker": _service(bed, environment={"PYTHONPATH": "/opt/pynvml",
                                                "CUDA_VISIBLE_DEVICES": "1"}),
        "robomaker": _service(bed),
        "redis": _service(bed),
    })
    env_file = _write_env(tmp_path, project, trainer="1", simulator="0")
    name = f"deepracer-{project}"

    started = drgpu(bed, "up", "--env-file", str(env_file), "-f", str(stack))

    assert started.returncode == 0, started.stderr
    trainer = _container_of(bed, name, "sagemaker")
    simulator = _container_of(bed, name, "robomaker")
    other = _container_of(bed, name, "redis")
    assert _nvml_inside(bed, trainer) == [[0, TRAINER]]
    assert _nvml_inside(bed, simulator) == [[0, SIMULATOR]]
    assert _env_of(trainer)["CUDA_VISIBLE_DEVICES"] == TRAINER
    assert _env_of(trainer)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert _env_of(other)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not other["HostConfig"].get("DeviceRequests")
    records = {r["container_id"]: r["devices"] for r in bed.records() if r["devices"]}
    assert records == {trainer["Id"]: [TRAINER], simulator["Id"]: [SIMULATOR]}
    assert (env_file.parent / ".drgpu" / f"{name}.override.yml").is_file()

    stopped = drgpu(bed, "down", "--env-file", str(env_file), "-f", str(stack))

    assert stopped.returncode == 0, stopped.stderr
    assert _containers(bed, name) == []


def test_a_start_that_fails_leaves_nothing_running(
    bed: Any, tmp_path: Path, project: str
) -> None:
    # drgpu's NVML sees a GPU the container toolkit (the stub) does not know:
    # validation passes, the engine refuses the start, and drgpu must clean up.
    bed.set_topology({"gpus": THREE_GPUS["gpus"][1:]})
    host_view = tmp_path / "host-topology.json"
    host_view.write_text(json.dumps(THREE_GPUS))
    stack = _write_stack(tmp_path, {"sagemaker": _service(bed), "robomaker": _service(bed)})
    env_file = _write_env(tmp_path, project, trainer="2", simulator="0")

    started = drgpu(bed, "up", "--env-file", str(env_file), "-f", str(stack),
                    FAKE_NVML_TOPOLOGY=str(host_view))

    assert started.returncode == 5
    assert "unknown device" in started.stderr
    assert "Traceback" not in started.stderr
    assert _containers(bed, f"deepracer-{project}") == []


def test_invalid_request_starts_nothing(bed: Any, tmp_path: Path, project: str) -> None:
    bed.set_topology(THREE_GPUS)
    stack = _write_stack(tmp_path, {"sagemaker": _service(bed), "robomaker": _service(bed)})
    env_file = _write_env(tmp_path, project, trainer="7", simulator="0")

    started = drgpu(bed, "up", "--env-file", str(env_file), "-f", str(stack))

    assert started.returncode == 3
    assert "no GPU matches '7'" in started.stderr
    assert "1: Tesla M40 24GB (22912 MiB, 00000000:41:00.0)" in started.stderr
    assert _containers(bed, f"deepracer-{project}") == []


def test_rl_coach_forwards_the_trainer_uuid_and_gets_no_gpu(
    bed: Any, tmp_path: Path, project: str
) -> None:
    bed.set_topology(THREE_GPUS)
    bed.clear_records()
    stack = _write_stack(tmp_path, {
        "rl_coach": _service(bed, environment={"CUDA_VISIBLE_DEVICES": "1"}),
        "robomaker": _service(bed),
    })
    env_file = _write_env(tmp_path, project, trainer="1", simulator="0")

    started = drgpu(bed, "up", "--env-file", str(env_file), "-f", str(stack))

    assert started.returncode == 0, started.stderr
    coach = _container_of(bed, f"deepracer-{project}", "rl_coach")
    assert _env_of(coach)["CUDA_VISIBLE_DEVICES"] == TRAINER
    assert _env_of(coach)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not coach["HostConfig"].get("DeviceRequests")
    assert coach["Id"] not in {r["container_id"] for r in bed.records() if r["devices"]}


def test_cpu_only_stack_needs_no_nvml(bed: Any, tmp_path: Path, project: str) -> None:
    stack = _write_stack(tmp_path, {"sagemaker": _service(bed), "robomaker": _service(bed)})
    env_file = _write_env(tmp_path, project, trainer="none", simulator="")

    started = drgpu(bed, "up", "--env-file", str(env_file), "-f", str(stack),
                    LD_LIBRARY_PATH=str(tmp_path))

    assert started.returncode == 0, started.stderr
    trainer = _container_of(bed, f"deepracer-{project}", "sagemaker")
    assert _env_of(trainer)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not trainer["HostConfig"].get("DeviceRequests")
