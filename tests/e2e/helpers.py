"""Shared pieces of the end-to-end tests: a three-GPU topology, stacks, settings, and what
the containers of a run see."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

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
        {
            "uuid": SPARE,
            "name": "NVIDIA L4",
            "pci_bus_id": "00000000:81:00.0",
            "memory_total_mib": 23034,
            "compute_capability": [8, 9],
        },
        {
            "uuid": SIMULATOR,
            "name": "NVIDIA GeForce GTX 1650",
            "pci_bus_id": "0000:03:00.0",
            "memory_total_mib": 4096,
            "compute_capability": [7, 5],
        },
        {
            "uuid": TRAINER,
            "name": "Tesla M40 24GB",
            "pci_bus_id": "41:00.0",
            "memory_total_mib": 22912,
            "compute_capability": [5, 2],
        },
    ],
}
PYNVML_VIEW = (
    "import json, pynvml; pynvml.nvmlInit(); "
    "print(json.dumps([[i, pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))]"
    " for i in range(pynvml.nvmlDeviceGetCount())]))"
)


def service(bed: Any, **extra: Any) -> dict[str, Any]:
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


def write_stack(tmp_path: Path, services: dict[str, Any]) -> Path:
    path = tmp_path / "stack.yml"
    path.write_text(yaml.safe_dump({"services": services}, sort_keys=False))
    return path


def write_env(tmp_path: Path, run_id: str, trainer: str, simulator: str) -> Path:
    path = tmp_path / "system.env"
    path.write_text(
        f"DR_RUN_ID={run_id}\nDR_SAGEMAKER_CUDA_DEVICES={trainer}\n"
        f"DR_ROBOMAKER_CUDA_DEVICES={simulator}\nDR_WORKERS=1\n"
    )
    return path


def containers(bed: Any, project: str) -> list[dict[str, Any]]:
    ids = bed.docker(
        "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"
    ).stdout.split()
    # A container may go between the two calls: inspect prints those that are left.
    return list(json.loads(bed.docker("inspect", *ids, check=False).stdout)) if ids else []


def container_of(bed: Any, project: str, service: str) -> dict[str, Any]:
    found = [
        c
        for c in containers(bed, project)
        if c["Config"]["Labels"].get("com.docker.compose.service") == service
    ]
    assert len(found) == 1, f"expected one {service} container, found {len(found)}"
    return found[0]


def nvml_inside(bed: Any, container: dict[str, Any]) -> list[list[Any]]:
    done = bed.docker("exec", container["Id"], "python3", "-c", PYNVML_VIEW)
    return list(json.loads(done.stdout))


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in container["Config"]["Env"])
