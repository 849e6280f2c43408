"""The test bed itself: real engine, real Compose binary, the engine's NVIDIA device
requests, and our stub hook over a fake topology.  These facts are what drgpu's own
end-to-end tests rely on.  The hook's own tests at the end need no Docker."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import Bed

HOOK = Path(__file__).resolve().parent / "bin" / "nvidia-container-runtime-hook"
RUNTIME = "nvidia-container-runtime"
docker = pytest.mark.docker

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

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.bed.compose("-p", self.name, *args, project_dir=self.dir, check=check)

    def container_id(self, service: str) -> str:
        return self.compose("ps", "-q", service).stdout.strip()

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


@docker
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


@docker
def test_host_env_sees_the_whole_topology(bed: Bed) -> None:
    """bed.env() gives host-side processes (drgpu, pynvml) the fake driver."""
    bed.set_topology(THREE_GPUS)
    done = subprocess.run(
        [sys.executable, "-c", PYNVML_VIEW],
        env=bed.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == {
        "gpus": [{"index": i, "uuid": u, "name": NAMES[u]} for i, u in enumerate(NAMES)]
    }


@docker
def test_service_without_device_request_sees_no_gpu(project: Project) -> None:
    project.write(
        {"coach": project.service(), "trainer": project.service(deploy=nvidia(device_ids=[GPU1]))}
    )
    project.compose("up", "-d")

    assert project.nvml_view("coach") == {"error": "NVMLError_LibraryNotFound"}
    assert project.record("coach") is None  # the engine did not run the hook for it
    assert project.record("trainer") is not None


@docker
@pytest.mark.parametrize("device", ["7", "GPU-00000000-0000-4000-8000-000000000000"])
def test_unknown_device_fails_the_start(project: Project, device: str) -> None:
    project.write({"trainer": project.service(deploy=nvidia(device_ids=[device]))})
    done = project.compose("up", "-d", check=False)

    assert done.returncode != 0
    assert f"{device}: unknown device" in done.stdout + done.stderr


@docker
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


@docker
def test_override_tag_replaces_the_device_list(project: Project) -> None:
    base = project.write({"trainer": project.service(deploy=nvidia(device_ids=[GPU0]))})
    override = project.dir / "override.yaml"
    override.write_text(BASE_THEN_OVERRIDE.format(tag="!override"))
    project.compose("-f", base.name, "-f", override.name, "up", "-d")

    assert [r["DeviceIDs"] for r in device_requests(project, "trainer")] == [[GPU2]]
    assert project.nvml_view("trainer") == {
        "gpus": [{"index": 0, "uuid": GPU2, "name": NAMES[GPU2]}]
    }


@docker
def test_plain_override_appends_device_requests(project: Project) -> None:
    """Without `!override` Compose appends: the engine gets both requests and sets
    NVIDIA_VISIBLE_DEVICES twice; the toolkit's hook takes the last one."""
    base = project.write({"trainer": project.service(deploy=nvidia(device_ids=[GPU0]))})
    override = project.dir / "override.yaml"
    override.write_text(BASE_THEN_OVERRIDE.format(tag=""))
    project.compose("-f", base.name, "-f", override.name, "up", "-d")

    assert [r["DeviceIDs"] for r in device_requests(project, "trainer")] == [[GPU0], [GPU2]]
    assert project.nvml_view("trainer")["gpus"] == [{"index": 0, "uuid": GPU2, "name": NAMES[GPU2]}]


# --- the stub hook, run directly on a fake bundle ---------------------------------

MIG_A = "MIG-5c8a3f20-1d4b-5e6f-8a9b-0c1d2e3f4a5b"
MIG_B = "MIG-9e7d6c5b-4a39-5281-9f0e-1d2c3b4a5968"
MIGS = {
    "mig_mode": True,
    "mig_devices": [
        {"uuid": MIG_A, "memory_total_mib": 40192},
        {"uuid": MIG_B, "memory_total_mib": 19968},
    ],
}
# GPU2 (NVML index 2) in MIG mode with two MIG devices.
WITH_MIG: dict[str, Any] = {
    **THREE_GPUS,
    "gpus": [{**g, **MIGS} if g["uuid"] == GPU2 else g for g in THREE_GPUS["gpus"]],
}


@dataclass
class HookRun:
    proc: subprocess.CompletedProcess[str]
    record: dict[str, Any]
    lib_dir: Path  # the container's usr/lib/x86_64-linux-gnu

    def view(self) -> dict[str, Any] | None:
        """The topology the container sees, or None when the hook wrote none."""
        path = self.lib_dir / "fake-nvml-topology.json"
        return json.loads(path.read_text()) if path.exists() else None


def run_hook(
    tmp_path: Path, env: list[str], topology: dict[str, Any] = THREE_GPUS, root: str = "rootfs"
) -> HookRun:
    bundle, libs, records = tmp_path / "bundle", tmp_path / "libs", tmp_path / "records"
    for d in (bundle / "rootfs", libs):
        d.mkdir(parents=True, exist_ok=True)
    for name in ("libnvidia-ml.so.1", "libcuda.so.1", "libnvidia-ml.so"):
        (libs / name).write_text(f"fake {name}")
    (tmp_path / "topology.json").write_text(json.dumps(topology))
    spec = {"root": {"path": root}, "process": {"env": ["PATH=/usr/bin", *env]}}
    (bundle / "config.json").write_text(json.dumps(spec))
    state = {
        "ociVersion": "1.0.2",
        "id": "c0ffee",
        "status": "creating",
        "pid": 4242,
        "bundle": str(bundle),
    }
    proc = subprocess.run(
        [sys.executable, str(HOOK), "prestart"],
        input=json.dumps(state),
        env={
            **os.environ,
            "FAKE_NVML_TOPOLOGY": str(tmp_path / "topology.json"),
            "FAKE_NVML_LIB_DIR": str(libs),
            "DRGPU_BED_RECORDS": str(records),
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    record = json.loads((records / "c0ffee.json").read_text())
    return HookRun(proc, record, bundle / "rootfs/usr/lib/x86_64-linux-gnu")


def seen(run: HookRun) -> list[tuple[str, list[str]]]:
    view = run.view()
    assert view is not None
    return [(g["uuid"], [m["uuid"] for m in g.get("mig_devices", [])]) for g in view["gpus"]]


@pytest.mark.parametrize(
    "env",
    [
        [],
        ["NVIDIA_VISIBLE_DEVICES="],
        ["NVIDIA_VISIBLE_DEVICES=void"],
        ["NVIDIA_VISIBLE_DEVICES=none"],
    ],
)
def test_hook_without_devices_records_and_does_nothing(tmp_path: Path, env: list[str]) -> None:
    run = run_hook(tmp_path, env)
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.record["devices"] == []
    assert run.record["visible_devices"] == (env[0].partition("=")[2] if env else None)
    assert not (tmp_path / "bundle/rootfs/usr").exists()


@pytest.mark.parametrize(
    ("visible", "devices"),
    [
        ("all", [GPU0, GPU1, GPU2]),
        ("2,0", [GPU0, GPU2]),
        (f"{GPU1.lower()}, 0", [GPU0, GPU1]),
        ("0000:81:00.0", [GPU1]),
        ("1,1", [GPU1]),
    ],
)
def test_hook_exposes_exactly_the_selected_gpus(
    tmp_path: Path, visible: str, devices: list[str]
) -> None:
    run = run_hook(
        tmp_path,
        [f"NVIDIA_VISIBLE_DEVICES={visible}", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
    )
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.record["devices"] == devices
    assert run.record["capabilities"] == ["compute", "utility"]
    assert [uuid for uuid, _ in seen(run)] == devices  # in PCI order: they renumber from 0
    assert sorted(p.name for p in run.lib_dir.iterdir()) == [
        "fake-nvml-topology.json",
        "libcuda.so.1",
        "libnvidia-ml.so.1",
    ]


@pytest.mark.parametrize(
    ("visible", "devices", "expected"),
    [
        (MIG_B, [MIG_B], [(GPU2, [MIG_B])]),
        ("2:0", [MIG_A], [(GPU2, [MIG_A])]),
        (f"{MIG_B},{MIG_A},0", [GPU0, MIG_A, MIG_B], [(GPU0, []), (GPU2, [MIG_A, MIG_B])]),
        (f"{MIG_B},2", [GPU2], [(GPU2, [MIG_A, MIG_B])]),
    ],
)
def test_hook_mig_uuid_selects_its_parent_with_only_that_mig(
    tmp_path: Path, visible: str, devices: list[str], expected: list[tuple[str, list[str]]]
) -> None:
    run = run_hook(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={visible}"], WITH_MIG)
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.record["devices"] == devices
    assert seen(run) == expected


@pytest.mark.parametrize("visible", ["3", "0,GPU-nope", "1:0", "MIG-nope", "0000:99:00.0"])
def test_hook_unknown_device_fails_like_the_toolkit(tmp_path: Path, visible: str) -> None:
    run = run_hook(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={visible}"])
    bad = visible.rsplit(",", maxsplit=1)[-1]
    assert run.proc.returncode == 1
    assert run.proc.stderr == f"nvidia-container-cli: device error: {bad}: unknown device\n"
    assert run.record["error"] == f"device error: {bad}: unknown device"
    assert run.view() is None


def test_hook_never_writes_through_the_containers_symlinks(tmp_path: Path) -> None:
    """The rootfs belongs to the container: its symlinks resolve inside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("host file")
    rootfs = tmp_path / "bundle" / "rootfs"
    (rootfs / "usr/lib").mkdir(parents=True)
    (rootfs / "libs").mkdir()
    # An absolute link (to the host's /usr/lib/...) and a climbing relative one.
    (rootfs / "usr/lib/x86_64-linux-gnu").symlink_to("/libs/../../../../outside")
    (outside / "libnvidia-ml.so.1").write_text("host library")
    (rootfs / "outside").mkdir()
    (rootfs / "outside/libnvidia-ml.so.1").symlink_to(victim)

    run = run_hook(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={GPU0}"])

    assert run.proc.returncode == 0, run.proc.stderr
    assert victim.read_text() == "host file"
    assert (outside / "libnvidia-ml.so.1").read_text() == "host library"
    written = rootfs / "outside/libnvidia-ml.so.1"
    assert not written.is_symlink()
    assert written.read_text() == "fake libnvidia-ml.so.1"
    view = json.loads((rootfs / "outside/fake-nvml-topology.json").read_text())
    assert [g["uuid"] for g in view["gpus"]] == [GPU0]


def test_hook_takes_an_absolute_root_path(tmp_path: Path) -> None:
    elsewhere = tmp_path / "merged"
    elsewhere.mkdir()
    run = run_hook(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={GPU2}"], root=str(elsewhere))
    assert run.proc.returncode == 0, run.proc.stderr
    assert (elsewhere / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").is_file()


@pytest.mark.parametrize("hooked", [False, True])
def test_runtime_adds_the_hook_once(tmp_path: Path, hooked: bool) -> None:
    """The stub runtime adds the hook to a container's spec unless a device request's is
    there (the real runtime does the same: the hook must not run twice)."""
    loader = importlib.machinery.SourceFileLoader("stub_runtime", str(HOOK.with_name(RUNTIME)))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    runtime: Any = importlib.util.module_from_spec(spec)
    loader.exec_module(runtime)
    (tmp_path / "bed.env").write_text("FAKE_NVML_TOPOLOGY='/t.json'\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    dockerds = {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["x", "prestart"]}
    oci = {"hooks": {"prestart": [dockerds]}} if hooked else {}
    (bundle / "config.json").write_text(json.dumps(oci))
    runtime.HERE = tmp_path / "bin"
    runtime.add_hook(bundle)
    hooks = json.loads((bundle / "config.json").read_text())["hooks"]["prestart"]
    assert [hook["path"] for hook in hooks] == (
        [dockerds["path"]] if hooked else [str(tmp_path / "bin" / HOOK.name)]
    )
