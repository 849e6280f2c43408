"""On a machine with a real NVIDIA GPU: drgpu's NVML view and the probe agree with the driver.

Skipped where no real driver library loads (CI machines have none); never run against
the fake driver of the test bed.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.runners import run_drgpu

pytestmark = pytest.mark.gpu

PROBE = Path(__file__).resolve().parents[2] / "drgpu" / "probe.py"


def _real_driver() -> bool:
    """Whether libnvidia-ml.so.1 loads and is not the test bed's fake (its path says so)."""
    if os.environ.get("FAKE_NVML_TOPOLOGY"):
        return False
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    maps = Path("/proc/self/maps").read_text()
    loaded = [line for line in maps.splitlines() if "libnvidia-ml.so" in line]
    return bool(loaded) and not any("fakenvml" in line for line in loaded)


@pytest.fixture(scope="module", autouse=True)
def real_gpu() -> None:
    if not _real_driver():
        pytest.skip("no real NVIDIA driver on this machine")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)


def test_gpus_json_lists_every_gpu_in_pci_order() -> None:
    listed = run_drgpu("gpus", "--json")
    assert listed.returncode == 0, listed.stderr
    gpus = json.loads(listed.stdout)["gpus"]
    assert gpus, "the driver shows no GPU"
    assert [gpu["index"] for gpu in gpus] == list(range(len(gpus)))
    assert [gpu["pci_bus_id"] for gpu in gpus] == sorted(gpu["pci_bus_id"] for gpu in gpus)


def test_probe_sees_what_nvml_sees() -> None:
    listed = json.loads(run_drgpu("gpus", "--json").stdout)["gpus"]
    uuids = [gpu["uuid"] for gpu in listed if not gpu["mig_mode"]]
    probed = _run(
        sys.executable,
        "-I",
        str(PROBE),
        "--json",
        *[arg for uuid in uuids for arg in ("--expect-uuid", uuid)],
    )
    report = json.loads(probed.stdout)
    assert probed.returncode == 0, report["expectations"]
    assert report["cuda"]["available"], report["cuda"]["error"]
