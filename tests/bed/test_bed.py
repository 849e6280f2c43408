"""The test bed itself: real engine, real Compose binary, the engine's NVIDIA device
requests, and our stub hook over a fake topology.  These facts are what drgpu's own
end-to-end tests rely on."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from conftest import Bed

pytestmark = pytest.mark.docker

# Listed out of PCI order, bus ids written three ways: NVML index 0 is 3b:00.0,
# 1 is 81:00.0, 2 is c1:00.0.
GPU0 = "GPU-3b0f1e2d-3c4b-4a59-8687-9a8b7c6d5e4f"
GPU1 = "GPU-81d4c3b2-a190-4f8e-9d7c-6b5a49382716"
GPU2 = "GPU-c1a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8"
NAMES = {GPU0: "Tesla T4", GPU1: "NVIDIA A100 80GB PCIe", GPU2: "NVIDIA GeForce RTX 3090"}
THREE_GPUS: dict[str, Any] = {
    "driver_version": "550.54.14",
    "cuda_driver_version": 12040,
    "init_error": None,
    "gpus": [
        {
            "uuid": GPU2,
            "name": NAMES[GPU2],
            "pci_bus_id": "00000000:C1:00.0",
            "memory_total_mib": 24576,
            "memory_used_mib": 1024,
            "compute_capability": [8, 6],
        },
        {
            "uuid": GPU0,
            "name": NAMES[GPU0],
            "pci_bus_id": "0000:3b:00.0",
            "memory_total_mib": 15360,
            "memory_used_mib": 0,
            "compute_capability": [7, 5],
        },
        {
            "uuid": GPU1,
            "name": NAMES[GPU1],
            "pci_bus_id": "81:00.0",
            "memory_total_mib": 81920,
            "memory_used_mib": 12288,
            "compute_capability": [8, 0],
        },
    ],
}

# Run inside a container: what NVML shows there, as JSON.
PYNVML_VIEW = """
import json, pynvml
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as e:
    print(json.dumps({"error": type(e).__name__}))
else:
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        gpus.append({"index": i, "uuid": pynvml.nvmlDeviceGetUUID(h),
                     "name": pynvml.nvmlDeviceGetName(h)})
    print(json.dumps({"gpus": gpus}))
"""


def nvidia(*, device_ids: list[str] | None = None, count: int | None = None) -> dict[str, Any]:
    """A service's deploy section with one nvidia device request."""
    request: dict[str, Any] = {"driver": "nvidia", "capabilities": ["gpu", "compute", "utility"]}
    if device_ids is not None:
        request["device_ids"] = device_ids
    if count is not None:
        request["count"] = count
    return {"resources": {"reservations": {"devices": [request]}}}


@dataclass
class Project:
    """A Compose project in a temporary directory, removed after the test."""

    bed: Bed
    name: str
    dir: Path

    def service(self, **extra: Any) -> dict[str, Any]:
        return {
            "image": self.bed.image,
            "pull_policy": "never",
            "network_mode": "none",
            "init": True,
            "command": ["sleep", "infinity"],
            "volumes": [f"{self.bed.pynvml_py}:/opt/pynvml/pynvml.py:ro"],
            "environment": {"PYTHONPATH": "/opt/pynvml"},
            **extra,
        }

    def write(self, services: dict[str, Any], name: str = "compose.yaml") -> Path:
        path = self.dir / name
        path.write_text(yaml.safe_dump({"services": services}, sort_keys=False))
        return path

    def compose(self, *args: str, check: bool = True) -> Any:
        return self.bed.compose("-p", self.name, *args, project_dir=self.dir, check=check)

    def container_id(self, service: str) -> str:
        return str(self.compose("ps", "-q", service).stdout.strip())

    def nvml_view(self, service: str) -> dict[str, Any]:
        done = self.bed.docker("exec", self.container_id(service), "python3", "-c", PYNVML_VIEW)
        return dict(json.loads(done.stdout))

    def record(self, service: str) -> dict[str, Any] | None:
        cid = self.container_id(service)
        return next((r for r in self.bed.records() if r["container_id"] == cid), None)


@pytest.fixture
def project(bed: Bed, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Project]:
    bed.set_topology(THREE_GPUS)
    bed.clear_records()
    name = ("bed-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()))[:60].strip("-")
    bed.cleanup_project(name)
    yield Project(bed, name, tmp_path)
    bed.cleanup_project(name)


def test_device_id_gives_exactly_that_gpu(project: Project) -> None:
    project.write({"trainer": project.service(deploy=nvidia(device_ids=[GPU1]))})
    project.compose("up", "-d")

    assert project.nvml_view("trainer") == {
        "gpus": [{"index": 0, "uuid": GPU1, "name": NAMES[GPU1]}]
    }
    record = project.record("trainer")
    assert record is not None
    assert record["visible_devices"] == GPU1
    assert record["devices"] == [GPU1]
    assert record["capabilities"] == ["compute", "utility"]


def test_service_without_device_request_sees_no_gpu(project: Project) -> None:
    project.write(
        {"coach": project.service(), "trainer": project.service(deploy=nvidia(device_ids=[GPU1]))}
    )
    project.compose("up", "-d")

    assert project.nvml_view("coach") == {"error": "NVMLError_LibraryNotFound"}
    assert project.record("coach") is None  # the engine did not run the hook for it
    assert project.record("trainer") is not None


@pytest.mark.parametrize("device", ["7", "GPU-00000000-0000-4000-8000-000000000000"])
def test_unknown_device_fails_the_start(project: Project, device: str) -> None:
    project.write({"trainer": project.service(deploy=nvidia(device_ids=[device]))})
    done = project.compose("up", "-d", check=False)

    assert done.returncode != 0
    assert f"{device}: unknown device" in done.stdout + done.stderr


def test_count_one_always_means_the_first_gpu(project: Project) -> None:
    """`count: 1` becomes NVIDIA_VISIBLE_DEVICES=0 in every service: two services that
    each ask for one GPU by count share GPU 0.  Only device_ids separate services."""
    project.write(
        {
            "trainer": project.service(deploy=nvidia(count=1)),
            "simulator": project.service(deploy=nvidia(count=1)),
        }
    )
    project.compose("up", "-d")

    for service in ("trainer", "simulator"):
        assert project.nvml_view(service) == {
            "gpus": [{"index": 0, "uuid": GPU0, "name": NAMES[GPU0]}]
        }
        record = project.record(service)
        assert record is not None
        assert (record["visible_devices"], record["devices"]) == ("0", [GPU0])


BASE_THEN_OVERRIDE = f"""\
services:
  trainer:
    deploy:
      resources:
        reservations:
          devices: {{tag}}
            - driver: nvidia
              device_ids: ["{GPU2}"]
              capabilities: [gpu, compute, utility]
"""


def device_requests(project: Project, service: str) -> list[dict[str, Any]]:
    inspected = json.loads(project.bed.docker("inspect", project.container_id(service)).stdout)
    return list(inspected[0]["HostConfig"]["DeviceRequests"])


def test_override_tag_replaces_the_device_list(project: Project) -> None:
    base = project.write({"trainer": project.service(deploy=nvidia(device_ids=[GPU0]))})
    override = project.dir / "override.yaml"
    override.write_text(BASE_THEN_OVERRIDE.format(tag="!override"))
    project.compose("-f", base.name, "-f", override.name, "up", "-d")

    assert [r["DeviceIDs"] for r in device_requests(project, "trainer")] == [[GPU2]]
    assert project.nvml_view("trainer") == {
        "gpus": [{"index": 0, "uuid": GPU2, "name": NAMES[GPU2]}]
    }


def test_plain_override_appends_device_requests(project: Project) -> None:
    """Without `!override` Compose appends: the engine gets both requests and sets
    NVIDIA_VISIBLE_DEVICES twice; the toolkit's hook takes the last one."""
    base = project.write({"trainer": project.service(deploy=nvidia(device_ids=[GPU0]))})
    override = project.dir / "override.yaml"
    override.write_text(BASE_THEN_OVERRIDE.format(tag=""))
    project.compose("-f", base.name, "-f", override.name, "up", "-d")

    assert [r["DeviceIDs"] for r in device_requests(project, "trainer")] == [[GPU0], [GPU2]]
