"""The real-GPU suite's plumbing: skip where no real NVIDIA driver loads, the folder its
outputs go to (DRGPU_HARDWARE_OUT), the fake NVML built for the fidelity check, and an
engine with no containers (the suite needs no Docker).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gpu.empty_engine import serving_no_containers

REPO = Path(__file__).resolve().parents[2]


def real_driver() -> str | None:
    """Why this machine has no real NVIDIA driver to test, or None when it has one:
    libnvidia-ml.so.1 loads, initialises, and is not the test bed's fake."""
    if os.environ.get("FAKE_NVML_TOPOLOGY"):
        return "FAKE_NVML_TOPOLOGY is set: this is the test bed's fake driver"
    try:
        library = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return "no NVIDIA driver library (libnvidia-ml.so.1) loads here"
    maps = Path("/proc/self/maps").read_text()
    loaded = [line for line in maps.splitlines() if "libnvidia-ml.so" in line]
    if any("fakenvml" in line for line in loaded):
        return "the loaded libnvidia-ml.so.1 is the test bed's fake"
    if library.nvmlInit_v2() != 0:
        return "libnvidia-ml.so.1 loads but nvmlInit fails (no GPU, or the driver is not loaded)"
    library.nvmlShutdown()
    return None


@pytest.fixture(scope="session", autouse=True)
def real_gpu() -> None:
    """Skip every test of this folder on a machine without a real NVIDIA driver."""
    why = real_driver()
    if why is not None:
        pytest.skip(why)


@pytest.fixture(scope="session")
def hardware_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the suite writes what each command printed: $DRGPU_HARDWARE_OUT (kept under
    docs/hardware/<date>/ by scripts/test-gpu), else a temporary folder."""
    named = os.environ.get("DRGPU_HARDWARE_OUT")
    folder = Path(named) if named else tmp_path_factory.mktemp("hardware")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def fake_lib_dir() -> Path:
    """The fake NVML and CUDA libraries, built here (gcc and an nvml.h: the CUDA toolkit's
    on a GPU machine, see scripts/fake-nvml-build)."""
    built = subprocess.run(
        [str(REPO / "scripts" / "fake-nvml-build")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"scripts/fake-nvml-build failed: {built.stderr.strip()[-600:]}")
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.fixture
def empty_engine(tmp_path: Path) -> Iterator[str]:
    """DOCKER_HOST of an engine that lists no container (the suite needs no Docker:
    `status` asks an engine which containers run; here none does)."""
    with serving_no_containers(tmp_path / "engine.sock") as address:
        yield address
