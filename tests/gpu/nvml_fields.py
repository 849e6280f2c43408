"""What one NVML library says, field by field, as JSON on stdout: run over the real driver
and over the fake one (tests/fakenvml) with a topology written from that machine's
`drgpu gpus --json`, the two must agree (tests/gpu/test_real_gpu.py).

Standard library and pynvml only: `python3 nvml_fields.py`.
"""

from __future__ import annotations

import json
from typing import Any

import pynvml as nvml


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _attempt(query: Any) -> Any:
    """A query's answer, or `error: <NVML's words>`."""
    try:
        return query()
    except nvml.NVMLError as exc:
        return f"error: {exc}"


def _mig_mode(handle: Any) -> bool:
    """MIG mode on (a GPU without MIG, `Not Supported`, is off: gpus --json says no more)."""
    answer = _attempt(lambda: nvml.nvmlDeviceGetMigMode(handle)[0])
    return bool(answer == nvml.NVML_DEVICE_MIG_ENABLE)


def _mig_devices(handle: Any) -> list[dict[str, Any]]:
    found = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError_NotFound:
            continue
        memory = nvml.nvmlDeviceGetMemoryInfo(mig)
        found.append(
            {"uuid": _text(nvml.nvmlDeviceGetUUID(mig)), "memory_total_mib": memory.total >> 20}
        )
    return found


def _gpu(index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
    mig = _mig_mode(handle)
    return {
        "index": nvml.nvmlDeviceGetIndex(handle),
        "uuid": uuid,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "pci_bus_id": bus_id,
        "memory_total_mib": nvml.nvmlDeviceGetMemoryInfo(handle).total >> 20,
        "compute_capability": list(nvml.nvmlDeviceGetCudaComputeCapability(handle)),
        "mig_mode": mig,
        "mig_devices": _mig_devices(handle) if mig else [],
        "index_by_uuid": nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByUUID(uuid)),
        "index_by_pci_bus_id": nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByPciBusId(bus_id)),
    }


def main() -> None:
    """Print the fields of every GPU."""
    nvml.nvmlInit()
    try:
        count = nvml.nvmlDeviceGetCount()
        print(
            json.dumps(
                {
                    "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
                    "cuda_driver_version": nvml.nvmlSystemGetCudaDriverVersion(),
                    "device_count": count,
                    "gpus": [_gpu(index) for index in range(count)],
                },
                indent=1,
            )
        )
    finally:
        nvml.nvmlShutdown()


if __name__ == "__main__":
    main()
