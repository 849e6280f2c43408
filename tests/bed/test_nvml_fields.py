"""drgpu's NVML reads over the fake driver, one field at a time (issue 29, item 8): a
field NVML refuses (memory on a MIG-enabled parent without privileges, the compute
capability) is n/a alone, the GPU stays usable; only GPU_IS_LOST makes a GPU lost. The
fake refuses a function with the topology's `denied_symbols` (NVML_ERROR_NO_PERMISSION)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bed.test_nvml_process_queries import lib_dir, run_on_fake_nvml

__all__ = ["lib_dir"]  # the fixture, shared
UUID = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
READ = """
import json
from drgpu.host import nvml
print(json.dumps([
    [g.uuid, g.error, g.memory_total_mib, g.memory_used_mib, list(g.compute_capability)]
    for g in nvml.read_inventory().gpus
]))
"""


def read(lib_dir: Path, tmp_path: Path, denied: list[str], **gpu: Any) -> list[Any]:
    document = {
        "denied_symbols": denied,
        "gpus": [
            {
                "uuid": UUID,
                "memory_total_mib": 16384,
                "memory_used_mib": 100,
                "compute_capability": [8, 6],
                **gpu,
            }
        ],
    }
    found: list[Any] = run_on_fake_nvml(lib_dir, tmp_path, document, READ)[0]
    return found


@pytest.mark.parametrize(
    ("denied", "memory", "capability"),
    [
        ([], [16384, 100], [8, 6]),
        (["nvmlDeviceGetMemoryInfo"], [16384, 100], [8, 6]),  # the v2 query is read
        (["nvmlDeviceGetMemoryInfo_v2"], [16384, 100], [8, 6]),  # v1 where v2 fails
        (["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"], [0, 0], [8, 6]),
        (["nvmlDeviceGetCudaComputeCapability"], [16384, 100], [0, 0]),
    ],
)
def test_a_field_nvml_refuses_is_na_alone(
    lib_dir: Path, tmp_path: Path, denied: list[str], memory: list[int], capability: list[int]
) -> None:
    uuid, error, total, used, cc = read(lib_dir, tmp_path, denied)
    assert (uuid, error) == (UUID, None)
    assert [total, used] == memory
    assert cc == capability


def test_a_gpu_nvml_says_is_lost_stays_lost(lib_dir: Path, tmp_path: Path) -> None:
    assert read(lib_dir, tmp_path, [], error="gpu_is_lost")[1] == "gpu_is_lost"
