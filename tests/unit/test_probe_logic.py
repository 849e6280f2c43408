"""drgpu.probe's pure logic, without any driver library: UUIDs, PCI bus ids, the CUDA ->
NVML mapping, the order findings and the expectations."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from drgpu import probe

GPU_A = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GPU_B = "GPU-1650a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b"
PARENT = "GPU-a1000000-7e57-4d1a-9c0b-1f2e3d4c5b6a"
MIG_1 = "MIG-5c8a3f20-1d4b-5e6f-8a9b-0c1d2e3f4a5b"
MIG_2 = "MIG-9e7d6c5b-4a39-5281-9f0e-1d2c3b4a5968"


def nvml_gpu(
    index: int, uuid: str | None, pci: str, *, migs: tuple[str, ...] = (), error: str | None = None
) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": uuid,
        "name": "GPU",
        "pci_bus_id": pci,
        "memory_total_mib": 1024,
        "compute_capability": [8, 0],
        "mig_mode": bool(migs),
        "mig_devices": [
            {"index": i, "uuid": m, "memory_total_mib": 512, "error": None}
            for i, m in enumerate(migs)
        ],
        "error": error,
    }


def cuda_device(ordinal: int, uuid: str | None, pci: str | None = None) -> dict[str, Any]:
    return {
        "ordinal": ordinal,
        "uuid": uuid,
        "name": "GPU",
        "pci_bus_id": pci,
        "memory_total_mib": 1024,
        "compute_capability": [8, 0],
        "nvml_index": None,
        "matched_by": None,
        "error": None,
    }


def section(
    loaded: bool = True,
    available: bool = True,
    devices: Any = (),
    count: int | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    devices = list(devices)
    return {
        "loaded": loaded,
        "available": available,
        "error": error,
        "device_count": len(devices) if count is None and available else count,
        "devices": devices,
    }


def report(
    nvml: dict[str, Any], cuda: dict[str, Any], frameworks: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"nvml": nvml, "cuda": cuda, "frameworks": frameworks or {}}


NO_LIB = section(loaded=False, available=False, error="cannot load")


# ---------------------------------------------------------------------------
# Spellings


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (GPU_A, "6f0c2a4e1b7d4c2e9f1a0c3d5e7f9a11"),
        (GPU_A.upper(), "6f0c2a4e1b7d4c2e9f1a0c3d5e7f9a11"),
        ("MIG-" + GPU_A[4:], "6f0c2a4e1b7d4c2e9f1a0c3d5e7f9a11"),
        ("MIG-GPU-6f0c2a4e/1/0", "mig-gpu-6f0c2a4e/1/0"),
        ("GPU-fake", "gpu-fake"),
    ],
)
def test_uuid_key(text: str, key: str) -> None:
    assert probe.uuid_key(text) == key


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("00000000:81:00.0", "00000000:81:00.0"),
        ("0000:81:00.0", "00000000:81:00.0"),
        ("81:00.0", "00000000:81:00.0"),
        ("0001:3b:1f.7", "00000001:3B:1F.7"),
        ("", None),
        ("81:00", None),
        ("zz:00.0", None),
        ("000000000:81:00.0", None),
        ("81:00.8", None),  # a PCI function is 0 to 7
    ],
)
def test_normalize_pci_bus_id(text: str, normal: str | None) -> None:
    assert probe.normalize_pci_bus_id(text) == normal


def test_its_rules_load_no_ctypes() -> None:
    """core imports the probe for its PCI bus id and CUDA version rules: ctypes (milliseconds
    of a command's start) loads only when a library is probed."""
    rules = "drgpu.probe.normalize_pci_bus_id('81:00.0'), drgpu.probe.format_cuda_version(12040)"
    code = f"import sys, drgpu.probe; {rules}; print('ctypes' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout == "False\n"


def test_format_cuda_version() -> None:
    assert probe.format_cuda_version(12040) == "12.4"
    assert probe.format_cuda_version(11080) == "11.8"
    assert probe.format_cuda_version(None) is None


def test_parse_frameworks() -> None:
    assert probe.parse_frameworks("torch,tensorflow") == ["torch", "tensorflow"]
    assert probe.parse_frameworks(" PyTorch , tf, torch,") == ["torch", "tensorflow"]
    assert probe.parse_frameworks("") == []
    with pytest.raises(ValueError, match="jax"):
        probe.parse_frameworks("torch,jax")


# ---------------------------------------------------------------------------
# Mapping and order


def test_map_by_uuid_then_pci() -> None:
    gpus = [nvml_gpu(0, GPU_A, "00000000:03:00.0"), nvml_gpu(1, GPU_B, "00000000:81:00.0")]
    devices = [
        cuda_device(0, GPU_B, "00000000:81:00.0"),
        cuda_device(1, "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff", "0000:03:00.0"),
        cuda_device(2, None, "0000:99:00.0"),
    ]
    probe.map_cuda_to_nvml(gpus, devices)
    assert [(d["nvml_index"], d["matched_by"]) for d in devices] == [
        (1, "uuid"),
        (0, "pci_bus_id"),
        (None, None),
    ]


def test_map_mig_devices_to_their_parent() -> None:
    gpus = [nvml_gpu(0, PARENT, "00000000:07:00.0", migs=(MIG_1, MIG_2))]
    # libcuda hands out 16 raw bytes: the probe spells them GPU-..., NVML knows better
    devices = [cuda_device(0, "GPU-" + MIG_2[4:]), cuda_device(1, "GPU-" + MIG_1[4:])]
    probe.map_cuda_to_nvml(gpus, devices)
    assert [(d["uuid"], d["nvml_index"]) for d in devices] == [(MIG_2, 0), (MIG_1, 0)]


def test_order_findings_swapped() -> None:
    devices = [dict(cuda_device(0, GPU_B), nvml_index=1), dict(cuda_device(1, GPU_A), nvml_index=0)]
    in_order, same, findings = probe.order_findings(devices, {})
    assert (in_order, same) == (False, False)
    assert findings == [
        "CUDA device 0 is NVML index 1, CUDA device 1 is NVML index 0: "
        "set CUDA_DEVICE_ORDER=PCI_BUS_ID or use UUIDs"
    ]


def test_order_findings_agree() -> None:
    devices = [dict(cuda_device(0, GPU_A), nvml_index=0), dict(cuda_device(1, GPU_B), nvml_index=1)]
    assert probe.order_findings(devices, {}) == (True, True, [])


def test_order_findings_narrowed_and_unmatched() -> None:
    devices = [dict(cuda_device(0, GPU_B), nvml_index=1), cuda_device(1, "GPU-x")]
    in_order, same, findings = probe.order_findings(devices, {"CUDA_VISIBLE_DEVICES": "1,7"})
    assert (in_order, same) == (True, False)
    assert findings == [
        "CUDA device 1 (GPU-x) matches no NVML device",
        "CUDA device 0 is NVML index 1 (CUDA_VISIBLE_DEVICES narrows CUDA's view): "
        "CUDA ordinals are not NVML indices",
    ]


def test_order_findings_nothing_mapped() -> None:
    assert probe.order_findings([], {}) == (None, None, [])


# ---------------------------------------------------------------------------
# Expectations


TWO = section(
    devices=[nvml_gpu(0, GPU_A, "00000000:03:00.0"), nvml_gpu(1, GPU_B, "00000000:81:00.0")]
)
CUDA_TWO = section(devices=[cuda_device(0, GPU_B), cuda_device(1, GPU_A)])


def test_no_expectation_is_met() -> None:
    result = probe.evaluate(report(NO_LIB, NO_LIB))
    assert result == {"expect": None, "expect_uuids": None, "met": True, "problems": []}


def test_expect_zero_without_any_library() -> None:
    assert probe.evaluate(report(NO_LIB, NO_LIB), expect=0)["met"] is True
    result = probe.evaluate(report(NO_LIB, NO_LIB), expect=1)
    assert result["met"] is False
    assert "it sees 0 GPUs, expected 1" in result["problems"][0]


def test_expect_counts_every_available_source() -> None:
    assert probe.evaluate(report(TWO, CUDA_TWO), expect=2)["met"] is True
    cuda_one = section(devices=[cuda_device(0, GPU_B)])
    assert probe.evaluate(report(TWO, cuda_one), expect=2)["problems"] == [
        "CUDA shows 1 GPU(s), expected 2"
    ]


def test_nvml_alone_counts_without_libcuda() -> None:
    assert probe.evaluate(report(TWO, NO_LIB), expect=2)["met"] is True
    assert probe.evaluate(report(TWO, NO_LIB), expect=1)["met"] is False


def test_cuda_alone_counts_without_nvml() -> None:
    assert probe.evaluate(report(NO_LIB, CUDA_TWO), expect=2)["met"] is True


def test_failing_init_counts_as_zero() -> None:
    nvml_down = section(available=False, error="nvmlInitWithFlags: Driver Not Loaded")
    cuda_down = section(available=False, error="CUDA_ERROR_UNKNOWN (999)")
    assert probe.evaluate(report(nvml_down, cuda_down), expect=0)["met"] is True
    problems = probe.evaluate(report(nvml_down, cuda_down), expect=1)["problems"]
    assert problems == [
        "NVML shows 0 GPU(s) (nvmlInitWithFlags: Driver Not Loaded), expected 1",
        "CUDA shows 0 GPU(s) (CUDA_ERROR_UNKNOWN (999)), expected 1",
    ]


def test_mig_gpu_counts_as_its_mig_devices() -> None:
    nvml = section(devices=[nvml_gpu(0, PARENT, "00000000:07:00.0", migs=(MIG_1, MIG_2))])
    assert probe.nvml_units(nvml) == [(MIG_1, PARENT), (MIG_2, PARENT)]
    assert probe.evaluate(report(nvml, NO_LIB), expect=2)["met"] is True
    assert probe.evaluate(report(nvml, NO_LIB), expect_uuids=[MIG_1, MIG_2])["met"] is True
    assert probe.evaluate(report(nvml, NO_LIB), expect_uuids=[PARENT])["met"] is True
    assert probe.evaluate(report(nvml, NO_LIB), expect_uuids=[MIG_1])["problems"] == [
        f"NVML shows {MIG_2}, not expected"
    ]


def test_expect_uuids_exact_set() -> None:
    assert probe.evaluate(report(TWO, CUDA_TWO), expect_uuids=[GPU_A, GPU_B])["met"] is True
    problems = probe.evaluate(report(TWO, CUDA_TWO), expect_uuids=[GPU_A])["problems"]
    assert problems == [
        f"NVML shows {GPU_B}, not expected",
        f"CUDA device 0 ({GPU_B}) is not expected",
    ]


def test_device_error_breaks_any_expectation() -> None:
    nvml = section(
        devices=[
            nvml_gpu(0, None, "", error="GPU is lost (nvmlDeviceGetUUID)"),
            nvml_gpu(1, GPU_B, "00000000:81:00.0"),
        ]
    )
    assert probe.evaluate(report(nvml, NO_LIB))["met"] is True
    assert probe.evaluate(report(nvml, NO_LIB), expect_uuids=[GPU_B])["problems"] == [
        "NVML index 0: GPU is lost (nvmlDeviceGetUUID)"
    ]


def test_framework_failures_break_expectations_only() -> None:
    broken = {
        "installed": True,
        "error": "exited with code 3: boom",
        "device_count": None,
        "devices": [],
    }
    missing = {
        "installed": False,
        "error": "import torch: No module",
        "device_count": None,
        "devices": [],
    }
    base = report(TWO, CUDA_TWO, {"torch": broken})
    assert probe.evaluate(base)["met"] is True
    assert probe.evaluate(base, expect=2)["problems"] == ["torch: exited with code 3: boom"]
    fine = report(TWO, CUDA_TWO, {"torch": missing})
    assert probe.evaluate(fine, expect=2)["met"] is True
    findings, failures = probe.framework_findings("torch", missing, 2)
    assert (findings, failures) == (["torch: not installed"], [])


# ---------------------------------------------------------------------------
# In-process entry points, as drgpu calls them


@pytest.fixture
def no_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
    monkeypatch.setattr(probe, "CUDA_LIBRARY", "/nonexistent/libcuda.so.1")


@pytest.mark.usefixtures("no_libraries")
def test_main_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.main(["--json", "--expect", "0"]) == probe.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    assert set(doc) == {
        "schema_version",
        "probe",
        "environment",
        "nvml",
        "cuda",
        "frameworks",
        "findings",
        "expectations",
        "gpu_injection",
    }
    assert doc["nvml"]["available"] is False
    assert probe.main(["--expect", "1"]) == probe.EXIT_MISMATCH
    assert "Expectations: NOT MET" in capsys.readouterr().out


@pytest.mark.usefixtures("no_libraries")
def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        probe.main(["--expect", "-3"])
    assert exc.value.code == probe.EXIT_USAGE
    assert "--expect must be 0 or more" in capsys.readouterr().err


def test_internal_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(**_: Any) -> dict[str, Any]:
        raise KeyError("oops")

    monkeypatch.setattr(probe, "collect", broken)
    assert probe.main([]) == probe.EXIT_UNEXPECTED
    assert capsys.readouterr().err == "probe: internal error: KeyError: 'oops'\n"


@pytest.mark.usefixtures("no_libraries")
def test_collect_returns_the_schema() -> None:
    doc = probe.collect(expect=0)
    assert doc["nvml"]["loaded"] is False and doc["cuda"]["loaded"] is False
    for key in ("available", "error", "driver_version", "cuda_driver_version", "devices"):
        assert key in doc["nvml"]
    for key in ("available", "error", "driver_version", "devices", "order_matches_nvml"):
        assert key in doc["cuda"]
    assert doc["expectations"]["met"] is True
    assert "NVML: unavailable" in probe.render_text(doc)
