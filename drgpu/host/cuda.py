"""The CUDA driver's own device order (libcuda.so.1 through ctypes, by drgpu.probe).

Only the enumeration is asked: `cuInit` with CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER
unset, so the answer is CUDA's default order (fastest first), whatever this shell sets.
"""

from __future__ import annotations

import os

from drgpu.core.index_order import order_from_cuda_devices
from drgpu.core.model import Inventory

_ORDER_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def default_order(inventory: Inventory) -> tuple[int, ...] | None:
    """The NVML index of each CUDA device in CUDA's default order; None when the CUDA
    driver cannot be asked (no libcuda, cuInit fails) or its devices do not match NVML's."""
    # lazy: the probe is large; only a bare index asks CUDA's order
    from drgpu.probe import probe_cuda

    saved = {name: os.environ.pop(name) for name in _ORDER_VARIABLES if name in os.environ}
    try:
        section = probe_cuda()
    finally:
        os.environ.update(saved)
    if not section.get("available") or not section.get("device_count"):
        return None
    return order_from_cuda_devices(inventory, section["devices"])
