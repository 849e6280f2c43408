"""drgpu/probe.py end to end: the probe runs as a plain script (`python3 -I`) against the
fake libnvidia-ml.so.1 and libcuda.so.1 of scripts/fake-nvml-build, as it would run
inside a container where neither drgpu nor pynvml is installed."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "drgpu" / "probe.py"
BUILD = REPO / "scripts" / "fake-nvml-build"
TOPOLOGIES = REPO / "tests" / "topologies"
GTX_M40 = TOPOLOGIES / "gtx1650-m40.json"
LOST = TOPOLOGIES / "lost.json"
MIG = TOPOLOGIES / "mig.json"

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # NVML index 0 (03:00.0), cc 5.2
GTX = "GPU-1650a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b"  # NVML index 1 (81:00.0), cc 7.5: CUDA's 0
A100 = "GPU-a1000000-7e57-4d1a-9c0b-1f2e3d4c5b6a"
MIG_3G = "MIG-5c8a3f20-1d4b-5e6f-8a9b-0c1d2e3f4a5b"
MIG_2G = "MIG-9e7d6c5b-4a39-5281-9f0e-1d2c3b4a5968"
A10 = "GPU-a10a10a1-0b2c-4d3e-8f4a-5b6c7d8e9f00"
V100_OK = "GPU-0b0b0b0b-7777-4888-9999-aaaabbbbcccc"

# A stand-in for torch, importable by the framework subprocess through PYTHONPATH.
FAKE_TORCH = """
import os, sys, time
__version__ = "0.0+fake"
_MODE = os.environ.get("FAKE_TORCH_MODE", "ok")
if _MODE == "crash":
    sys.stderr.write("fake torch: CUDA driver initialization failed\\n")
    os._exit(3)
if _MODE == "hang":
    time.sleep(60)

class _Device:
    def __init__(self, index):
        self.index = index
    def __str__(self):
        return "cuda:%d" % self.index

class _Tensor:
    def __init__(self, device):
        self.device = device
    def __matmul__(self, other):
        if _MODE == "matmul-fails":
            raise RuntimeError("CUDA error: no kernel image is available for execution")
        return _Tensor(self.device)

def device(kind, index):
    return _Device(index)

def rand(*shape, device=None):
    return _Tensor(device)

class _Props:
    def __init__(self, index):
        self.uuid = "fake-%d" % index

class cuda:
    @staticmethod
    def device_count():
        return int(os.environ.get("FAKE_TORCH_COUNT", "0"))
    @staticmethod
    def is_available():
        return cuda.device_count() > 0
    @staticmethod
    def get_device_name(index):
        return "Fake GPU %d" % index
    @staticmethod
    def get_device_properties(index):
        return _Props(index)
    @staticmethod
    def synchronize(device=None):
        pass
"""


@pytest.fixture(scope="session")
def fake_libs() -> Path:
    """The directory of the fake driver libraries (built once, cached by the script)."""
    if not BUILD.exists():
        pytest.skip("scripts/fake-nvml-build is missing")
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        pytest.fail(f"scripts/fake-nvml-build failed:\n{done.stderr}")
    directory = Path(lines[-1])
    assert (directory / "libnvidia-ml.so.1").is_file()
    return directory


@pytest.fixture(scope="session")
def fake_cuda(fake_libs: Path) -> Path:
    """Like fake_libs, for tests that need the fake libcuda.so.1 too."""
    if not (fake_libs / "libcuda.so.1").is_file():
        pytest.skip("the fake libcuda.so.1 is not built yet (only libnvidia-ml.so.1 is)")
    return fake_libs


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    path = tmp_path / "no-libs"
    path.mkdir()
    return path


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    path = tmp_path / "fake-site"
    (path / "torch").mkdir(parents=True)
    (path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    return path


class Run:
    def __init__(self, done: subprocess.CompletedProcess[str], json_mode: bool) -> None:
        self.rc = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr
        self.doc: dict[str, Any] = json.loads(done.stdout) if json_mode else {}

    @property
    def findings(self) -> list[str]:
        return list(self.doc["findings"])

    @property
    def problems(self) -> list[str]:
        return list(self.doc["expectations"]["problems"])


def sanitized_env(libdir: Path, topology: Path | None, **extra: str) -> dict[str, str]:
    """A minimal environment: nothing of the test runner's Python setup leaks through."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": "",
        "LD_LIBRARY_PATH": str(libdir),
    }
    if topology is not None:
        env["FAKE_NVML_TOPOLOGY"] = str(topology)
    env.update(extra)
    return env


def probe(
    libdir: Path,
    topology: Path | None,
    *args: str,
    json_mode: bool = True,
    python: str = sys.executable,
    script: Path = PROBE,
    flags: tuple[str, ...] = ("-I",),
    **env: str,
) -> Run:
    command = [python, *flags, str(script), *(["--json"] if json_mode else []), *args]
    done = subprocess.run(
        command,
        env=sanitized_env(libdir, topology, **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 2, 6), (done.returncode, done.stderr)
    return Run(done, json_mode and done.returncode != 2)


def write_topology(tmp_path: Path, source: Path, **changes: Any) -> Path:
    data = json.loads(source.read_text())
    data.update(changes)
    path = tmp_path / f"topology-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(data))
    return path


# ---------------------------------------------------------------------------
# What NVML and CUDA show


def test_nvml_devices_in_pci_order_with_uuids(fake_libs: Path) -> None:
    run = probe(fake_libs, GTX_M40)
    assert run.rc == 0
    doc = run.doc
    assert doc["schema_version"] == 1
    nvml = doc["nvml"]
    assert nvml["loaded"] and nvml["available"] and nvml["error"] is None
    assert nvml["driver_version"] == "535.183.01"
    assert nvml["cuda_driver_version"] == 12020
    assert nvml["device_count"] == 2
    m40, gtx = nvml["devices"]
    assert (m40["index"], m40["uuid"], m40["name"]) == (0, M40, "Tesla M40 24GB")
    assert m40["pci_bus_id"] == "00000000:03:00.0"
    assert m40["memory_total_mib"] == 22912
    assert m40["compute_capability"] == [5, 2]
    assert m40["mig_mode"] is False and m40["mig_devices"] == []
    assert m40["error"] is None
    assert (gtx["index"], gtx["uuid"], gtx["pci_bus_id"]) == (1, GTX, "00000000:81:00.0")
    assert gtx["compute_capability"] == [7, 5]
    assert doc["environment"] == {
        "CUDA_VISIBLE_DEVICES": None,
        "CUDA_DEVICE_ORDER": None,
        "NVIDIA_VISIBLE_DEVICES": None,
        "NVIDIA_DRIVER_CAPABILITIES": None,
        "DOCKER_RESOURCE_NVIDIA-GPU": None,
    }
    assert doc["expectations"] == {
        "expect": None,
        "expect_uuids": None,
        "met": True,
        "problems": [],
    }


def test_cuda_order_differs_and_is_mapped(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40)
    cuda = run.doc["cuda"]
    assert cuda["loaded"] and cuda["available"] and cuda["error"] is None
    assert cuda["driver_version"] == 12020
    assert cuda["device_count"] == 2
    first, second = cuda["devices"]
    assert (first["ordinal"], first["uuid"], first["nvml_index"]) == (0, GTX, 1)
    assert first["name"] == "NVIDIA GeForce GTX 1650"
    assert first["pci_bus_id"] == "00000000:81:00.0"
    assert first["memory_total_mib"] == 4096
    assert first["compute_capability"] == [7, 5]
    assert first["matched_by"] == "uuid"
    assert (second["ordinal"], second["uuid"], second["nvml_index"]) == (1, M40, 0)
    assert cuda["order_matches_nvml"] is False
    assert cuda["ordinals_match_nvml_indices"] is False
    [finding] = [f for f in run.findings if "CUDA_DEVICE_ORDER" in f]
    assert "CUDA device 0 is NVML index 1" in finding
    assert "CUDA device 1 is NVML index 0" in finding
    assert "set CUDA_DEVICE_ORDER=PCI_BUS_ID or use UUIDs" in finding


def test_pci_bus_id_order_makes_them_agree(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert run.doc["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    cuda = run.doc["cuda"]
    assert [(d["ordinal"], d["uuid"], d["nvml_index"]) for d in cuda["devices"]] == [
        (0, M40, 0),
        (1, GTX, 1),
    ]
    assert cuda["order_matches_nvml"] is True
    assert cuda["ordinals_match_nvml_indices"] is True
    assert not [f for f in run.findings if "NVML index" in f]
    assert run.findings == []


def test_cuda_visible_devices_uuid_narrows_cuda(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, "--expect-uuid", M40, CUDA_VISIBLE_DEVICES=M40)
    assert run.doc["environment"]["CUDA_VISIBLE_DEVICES"] == M40
    assert run.doc["nvml"]["device_count"] == 2  # NVML ignores CUDA_VISIBLE_DEVICES
    cuda = run.doc["cuda"]
    assert cuda["device_count"] == 1
    [only] = cuda["devices"]
    assert (only["ordinal"], only["uuid"], only["nvml_index"]) == (0, M40, 0)
    # CUDA sees exactly the expected GPU; NVML (unlike in a real container) sees both
    assert run.rc == 6
    assert run.problems == [f"NVML shows {GTX}, not expected"]


def test_cuda_visible_devices_narrowing_is_explained(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, CUDA_VISIBLE_DEVICES=GTX, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    [only] = run.doc["cuda"]["devices"]
    assert (only["uuid"], only["nvml_index"]) == (GTX, 1)
    assert run.doc["cuda"]["order_matches_nvml"] is True
    assert any(
        "CUDA device 0 is NVML index 1 (CUDA_VISIBLE_DEVICES narrows" in f for f in run.findings
    )


def test_empty_cuda_visible_devices_hides_all_from_cuda(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, CUDA_VISIBLE_DEVICES="")
    assert run.doc["environment"]["CUDA_VISIBLE_DEVICES"] == ""  # set, and empty
    cuda = run.doc["cuda"]
    assert cuda["available"] is True
    assert cuda["device_count"] == 0
    assert cuda["error_code"] == 100
    assert "CUDA_ERROR_NO_DEVICE" in cuda["error"]
    assert run.rc == 0


def test_mig_devices_and_their_cuda_devices(fake_cuda: Path) -> None:
    run = probe(fake_cuda, MIG, "--expect", "3", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert run.rc == 0, run.problems
    a100 = run.doc["nvml"]["devices"][0]
    assert a100["uuid"] == A100 and a100["mig_mode"] is True
    assert [(m["uuid"], m["memory_total_mib"]) for m in a100["mig_devices"]] == [
        (MIG_3G, 19968),
        (MIG_2G, 9856),
    ]
    cuda = run.doc["cuda"]["devices"]
    assert [(d["uuid"], d["nvml_index"]) for d in cuda] == [(MIG_3G, 0), (MIG_2G, 0), (A10, 1)]
    assert run.doc["cuda"]["order_matches_nvml"] is True
    # the exact units, or the parent GPU for its MIG devices
    assert probe(fake_cuda, MIG, "--expect-uuid", MIG_3G, MIG_2G, A10).rc == 0
    assert probe(fake_cuda, MIG, "--expect-uuid", A100, A10).rc == 0
    partial = probe(fake_cuda, MIG, "--expect-uuid", MIG_3G, A10)
    assert partial.rc == 6
    assert f"NVML shows {MIG_2G}, not expected" in partial.problems


# ---------------------------------------------------------------------------
# Expectations and exit codes


def test_expect_count(fake_cuda: Path) -> None:
    assert probe(fake_cuda, GTX_M40, "--expect", "2").rc == 0
    run = probe(fake_cuda, GTX_M40, "--expect", "1")
    assert run.rc == 6
    assert run.doc["expectations"]["met"] is False
    assert run.doc["expectations"]["expect"] == 1
    assert run.problems == ["NVML shows 2 GPU(s), expected 1", "CUDA shows 2 GPU(s), expected 1"]


def test_expect_count_compares_cuda_too(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, "--expect", "2", CUDA_VISIBLE_DEVICES="0")
    assert run.rc == 6
    assert run.problems == ["CUDA shows 1 GPU(s), expected 2"]


def test_expect_uuids(fake_cuda: Path) -> None:
    assert probe(fake_cuda, GTX_M40, "--expect-uuid", M40, GTX).rc == 0
    # repeated flags add up; UUID case does not matter
    assert probe(fake_cuda, GTX_M40, "--expect-uuid", GTX.upper(), "--expect-uuid", M40).rc == 0
    missing = probe(fake_cuda, GTX_M40, "--expect-uuid", M40)
    assert missing.rc == 6
    assert f"NVML shows {GTX}, not expected" in missing.problems
    assert f"CUDA device 0 ({GTX}) is not expected" in missing.problems
    wrong = "GPU-00000000-0000-0000-0000-000000000000"
    unknown = probe(fake_cuda, GTX_M40, "--expect-uuid", M40, GTX, wrong)
    assert unknown.rc == 6
    assert unknown.problems == [
        f"NVML does not show expected {wrong}",
        f"CUDA does not show expected {wrong}",
    ]


def test_no_libraries_at_all(empty_dir: Path) -> None:
    run = probe(empty_dir, None)
    if run.doc["nvml"]["loaded"] or run.doc["cuda"]["loaded"]:
        pytest.skip("this machine has a real NVIDIA driver library on its search path")
    assert run.rc == 0
    nvml, cuda = run.doc["nvml"], run.doc["cuda"]
    assert nvml["available"] is False and nvml["devices"] == []
    assert "libnvidia-ml.so.1" in nvml["error"]
    assert cuda["available"] is False and "libcuda.so.1" in cuda["error"]
    assert any(f.startswith("NVML: cannot load libnvidia-ml.so.1") for f in run.findings)
    assert any(f.startswith("CUDA: cannot load libcuda.so.1") for f in run.findings)
    assert probe(empty_dir, None, "--expect", "0").rc == 0
    one = probe(empty_dir, None, "--expect", "1")
    assert one.rc == 6
    assert one.problems == [
        "no NVIDIA library (libnvidia-ml.so.1, libcuda.so.1) in the "
        "container: it sees 0 GPUs, expected 1"
    ]
    assert probe(empty_dir, None, "--expect-uuid", GTX).rc == 6
    text = probe(empty_dir, None, "--expect", "1", json_mode=False)
    assert text.rc == 6
    assert "NVML: unavailable: cannot load libnvidia-ml.so.1" in text.stdout
    assert "Expectations: NOT MET" in text.stdout


def test_nvml_alone_counts_without_libcuda(fake_libs: Path, tmp_path: Path) -> None:
    only_nvml = tmp_path / "only-nvml"
    only_nvml.mkdir()
    (only_nvml / "libnvidia-ml.so.1").symlink_to(fake_libs / "libnvidia-ml.so.1")
    run = probe(only_nvml, GTX_M40, "--expect", "2", NVIDIA_DRIVER_CAPABILITIES="utility")
    if run.doc["cuda"]["loaded"]:
        pytest.skip("this machine has a real libcuda.so.1 on its search path")
    assert run.rc == 0
    assert "CUDA count not checked: NVML alone counts" in run.findings
    assert any("NVIDIA_DRIVER_CAPABILITIES=utility lacks 'compute'" in f for f in run.findings)
    assert probe(only_nvml, GTX_M40, "--expect", "1").rc == 6


def test_driver_not_loaded_is_a_finding(fake_cuda: Path, tmp_path: Path) -> None:
    topology = write_topology(tmp_path, GTX_M40, init_error="driver_not_loaded")
    run = probe(fake_cuda, topology)
    assert run.rc == 0
    nvml = run.doc["nvml"]
    assert nvml["loaded"] is True and nvml["available"] is False
    assert nvml["error_code"] == 9
    assert "Driver Not Loaded" in nvml["error"]  # nvmlErrorString's words
    assert any("Driver Not Loaded" in f for f in run.findings)
    assert run.doc["cuda"]["device_count"] == 0
    assert probe(fake_cuda, topology, "--expect", "0").rc == 0
    one = probe(fake_cuda, topology, "--expect", "1")
    assert one.rc == 6
    assert any(p.startswith("NVML shows 0 GPU(s) (nvml") for p in one.problems)


def test_lost_gpu_is_a_finding(fake_cuda: Path) -> None:
    run = probe(fake_cuda, LOST)
    assert run.rc == 0
    lost, healthy = run.doc["nvml"]["devices"]
    assert "GPU is lost" in lost["error"] and lost["uuid"] is None
    assert healthy["uuid"] == V100_OK and healthy["error"] is None
    assert any(f.startswith("NVML index 0: GPU is lost") for f in run.findings)
    [cuda] = run.doc["cuda"]["devices"]
    assert (cuda["uuid"], cuda["nvml_index"]) == (V100_OK, 1)
    # with an expectation, a lost GPU is a problem
    expecting = probe(fake_cuda, LOST, "--expect-uuid", V100_OK)
    assert expecting.rc == 6
    assert any("GPU is lost" in p for p in expecting.problems)


def test_void_with_gpus_shown_is_cdi_injection(fake_cuda: Path) -> None:
    """A CDI spec sets NVIDIA_VISIBLE_DEVICES=void in a container it gave GPUs: the probe
    believes NVML and CUDA, and never says "no GPU" while they show some."""
    run = probe(fake_cuda, GTX_M40, "--expect", "2", NVIDIA_VISIBLE_DEVICES="void")
    assert run.rc == 0
    assert run.doc["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert run.doc["gpu_injection"] == "cdi"
    [finding] = [f for f in run.findings if "NVIDIA_VISIBLE_DEVICES" in f]
    assert "NVML shows 2 GPU(s) and CUDA 2" in finding and "through CDI" in finding
    assert not any("no GPU" in f for f in run.findings)


def test_void_beside_the_engines_swarm_resource_is_no_cdi(fake_cuda: Path) -> None:
    """A Swarm task that reserves GPUs has NVIDIA_VISIBLE_DEVICES=void by design and its GPUs
    in DOCKER_RESOURCE_NVIDIA-GPU, which the runtime reads instead: said so, no finding."""
    chosen: dict[str, Any] = {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "DOCKER_RESOURCE_NVIDIA-GPU": f"{M40},{GTX}",
    }
    run = probe(fake_cuda, GTX_M40, "--expect", "2", **chosen)
    assert run.rc == 0
    assert run.doc["environment"]["DOCKER_RESOURCE_NVIDIA-GPU"] == f"{M40},{GTX}"
    assert run.doc["gpu_injection"] == "swarm-resource"
    assert not any("NVIDIA_VISIBLE_DEVICES" in f or "CDI" in f for f in run.findings)


def test_void_with_no_gpu_shown_says_none_was_given(fake_cuda: Path, tmp_path: Path) -> None:
    empty = write_topology(tmp_path, GTX_M40, gpus=[])
    run = probe(fake_cuda, empty, "--expect", "0", NVIDIA_VISIBLE_DEVICES="void")
    assert run.rc == 0
    assert run.doc["gpu_injection"] is None
    assert any("show no GPU: none was given" in f for f in run.findings)


def test_named_gpus_came_through_the_runtime(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, NVIDIA_VISIBLE_DEVICES=M40)
    assert run.doc["gpu_injection"] == "runtime"
    assert not any("NVIDIA_VISIBLE_DEVICES" in f for f in run.findings)


@pytest.mark.parametrize(
    "args",
    [
        ["--expect", "-1"],
        ["--expect", "two"],
        ["--frameworks", "jax"],
        ["--framework-timeout", "0"],
        ["--bogus"],
    ],
)
def test_usage_errors_exit_2(fake_libs: Path, args: list[str]) -> None:
    run = probe(fake_libs, GTX_M40, *args)
    assert run.rc == 2
    assert "usage:" in run.stderr


def test_human_text(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, "--expect", "2", json_mode=False)
    assert run.rc == 0
    assert "CUDA_VISIBLE_DEVICES" in run.stdout and "(unset)" in run.stdout
    assert f"[0] {M40}  Tesla M40 24GB  00000000:03:00.0  22912 MiB  cc 5.2" in run.stdout
    assert f"cuda:0 -> NVML 1  {GTX}" in run.stdout
    assert "CUDA device 0 is NVML index 1" in run.stdout
    assert "Expectations: met" in run.stdout


# ---------------------------------------------------------------------------
# Frameworks, in subprocesses


def test_torch_not_installed_is_a_finding(fake_cuda: Path) -> None:
    run = probe(fake_cuda, GTX_M40, "--frameworks", "torch,tf", "--expect", "2")
    if run.doc["frameworks"]["torch"]["installed"]:
        pytest.skip("torch is installed for this interpreter")
    assert run.rc == 0
    torch = run.doc["frameworks"]["torch"]
    assert torch["installed"] is False
    assert "torch: not installed" in run.findings
    assert set(run.doc["frameworks"]) == {"torch", "tensorflow"}


def test_fake_torch_sees_and_multiplies(fake_cuda: Path, fake_torch: Path) -> None:
    run = probe(
        fake_cuda,
        GTX_M40,
        "--frameworks",
        "torch",
        "--expect",
        "2",
        PYTHONPATH=str(fake_torch),
        FAKE_TORCH_COUNT="2",
    )
    assert run.rc == 0, run.problems
    torch = run.doc["frameworks"]["torch"]
    assert torch["installed"] is True and torch["version"] == "0.0+fake"
    assert torch["cuda_available"] is True and torch["device_count"] == 2
    assert [d["name"] for d in torch["devices"]] == ["Fake GPU 0", "Fake GPU 1"]
    for index, device in enumerate(torch["devices"]):
        assert device["matmul"]["ok"] is True
        assert device["matmul"]["device"] == f"cuda:{index}"
        assert isinstance(device["matmul"]["ms"], float)
    assert isinstance(torch["elapsed_ms"], float)


def test_fake_torch_count_mismatch(fake_cuda: Path, fake_torch: Path) -> None:
    run = probe(
        fake_cuda,
        GTX_M40,
        "--frameworks",
        "torch",
        "--expect",
        "2",
        PYTHONPATH=str(fake_torch),
        FAKE_TORCH_COUNT="1",
    )
    assert run.rc == 6
    assert run.problems == ["torch sees 1 GPU(s), expected 2"]
    assert "torch sees 1 GPU(s) but the CUDA driver shows 2" in run.findings


def test_fake_torch_crash_is_a_finding(fake_cuda: Path, fake_torch: Path) -> None:
    run = probe(
        fake_cuda,
        GTX_M40,
        "--frameworks",
        "torch",
        PYTHONPATH=str(fake_torch),
        FAKE_TORCH_MODE="crash",
    )
    assert run.rc == 0  # no expectation: only a finding
    error = run.doc["frameworks"]["torch"]["error"]
    assert error == "exited with code 3: fake torch: CUDA driver initialization failed"
    assert f"torch: {error}" in run.findings
    again = probe(
        fake_cuda,
        GTX_M40,
        "--frameworks",
        "torch",
        "--expect",
        "2",
        PYTHONPATH=str(fake_torch),
        FAKE_TORCH_MODE="crash",
    )
    assert again.rc == 6


def test_fake_torch_matmul_failure(fake_cuda: Path, fake_torch: Path) -> None:
    run = probe(
        fake_cuda,
        GTX_M40,
        "--frameworks",
        "torch",
        "--expect",
        "1",
        CUDA_VISIBLE_DEVICES="0",
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        PYTHONPATH=str(fake_torch),
        FAKE_TORCH_COUNT="1",
        FAKE_TORCH_MODE="matmul-fails",
    )
    assert run.rc == 6
    [device] = run.doc["frameworks"]["torch"]["devices"]
    assert device["matmul"]["ok"] is False
    assert "no kernel image" in device["matmul"]["error"]
    assert any(p.startswith("torch device 0: matrix product failed") for p in run.problems)


def test_framework_timeout(fake_cuda: Path, fake_torch: Path) -> None:
    run = probe(
        fake_cuda,
        GTX_M40,
        "--frameworks",
        "torch",
        "--framework-timeout",
        "1",
        PYTHONPATH=str(fake_torch),
        FAKE_TORCH_MODE="hang",
    )
    assert run.doc["frameworks"]["torch"]["error"] == "timed out after 1 s"
    assert "torch: timed out after 1 s" in run.findings


# ---------------------------------------------------------------------------
# Runs anywhere: stdlib only, old Pythons


def test_runs_as_a_lone_file_without_site_packages(fake_cuda: Path, tmp_path: Path) -> None:
    """A copy of the file, no site-packages at all (-I -S): nothing but the stdlib."""
    lone = tmp_path / "container" / "probe.py"
    lone.parent.mkdir()
    shutil.copy(PROBE, lone)
    run = probe(fake_cuda, GTX_M40, "--expect-uuid", M40, GTX, script=lone, flags=("-I", "-S"))
    assert run.rc == 0
    assert [d["uuid"] for d in run.doc["cuda"]["devices"]] == [GTX, M40]


def _old_pythons() -> list[str]:
    candidates = [shutil.which(f"python3.{minor}") for minor in (8, 9)]
    candidates += glob.glob(os.path.expanduser("~/.pyenv/versions/3.[89].*/bin/python3"))
    found = {os.path.realpath(p) for p in candidates if p and "/shims/" not in p}
    return sorted(found)


@pytest.mark.parametrize("python", _old_pythons() or [None])
def test_runs_on_old_pythons(fake_cuda: Path, python: str | None) -> None:
    if python is None:
        pytest.skip("no python3.8 or python3.9 on this machine")
    run = probe(fake_cuda, GTX_M40, "--expect", "2", python=python)
    assert run.rc == 0
    assert run.doc["probe"]["python"].startswith("3.")
    assert [d["nvml_index"] for d in run.doc["cuda"]["devices"]] == [1, 0]
