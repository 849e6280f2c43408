"""The topology JSON format: what `--inventory` reads, `drgpu gpus --json` writes,
and the fake NVML of the test bed serves.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from drgpu.core.model import Gpu, GpuProcess, Inventory, MigDevice
from drgpu.errors import ConfigError

_PCI_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


def parse_pci_bus_id(text: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of a PCI bus id, or None if `text` is not one."""
    match = _PCI_BUS_ID.match(text.strip())
    if match is None:
        return None
    return (
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["device"], 16),
        int(match["function"]),
    )


def normalize_pci_bus_id(text: str) -> str:
    """NVML's spelling of a PCI bus id: `00000000:81:00.0`."""
    parts = parse_pci_bus_id(text)
    if parts is None:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain, bus, device, function = parts
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function}"


def inventory_from_json(data: Any, source: str = "inventory") -> Inventory:
    """Read a topology document; GPUs are indexed in PCI bus order, as NVML does."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus", []), list):
        raise ConfigError(f"{source}: expected an object with a 'gpus' list")
    try:
        gpus = _in_nvml_order([_gpu_from_json(item) for item in data.get("gpus", [])])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: bad GPU entry ({exc})") from None
    cuda = data.get("cuda_driver_version")
    try:
        cuda_driver_version = int(cuda) if cuda is not None else None
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: cuda_driver_version {cuda!r} is not a number") from None
    indexed = tuple(_with_index(gpu, index) for index, gpu in enumerate(gpus))
    return Inventory(
        gpus=indexed,
        driver_version=data.get("driver_version"),
        cuda_driver_version=cuda_driver_version,
        init_error=data.get("init_error"),
        cuda_order=_cuda_order(data.get("cuda_order"), len(indexed), source),
    )


def _cuda_order(data: Any, count: int, source: str) -> tuple[int, ...] | None:
    """The optional `cuda_order`: the NVML index of each CUDA ordinal, in CUDA's order."""
    if data is None:
        return None
    if not isinstance(data, list) or not all(
        isinstance(index, int) and not isinstance(index, bool) and 0 <= index < count
        for index in data
    ):
        raise ConfigError(
            f"{source}: cuda_order must list NVML indices (0 to {count - 1}) in CUDA's order"
        )
    return tuple(data)


def inventory_to_json(inventory: Inventory) -> dict[str, Any]:
    """The topology document of an inventory (round-trips with `inventory_from_json`)."""
    return {
        "driver_version": inventory.driver_version,
        "cuda_driver_version": inventory.cuda_driver_version,
        "init_error": inventory.init_error,
        "cuda_order": None if inventory.cuda_order is None else list(inventory.cuda_order),
        "gpus": [_gpu_to_json(gpu) for gpu in inventory.gpus],
    }


def load_inventory(path: Path) -> Inventory:
    """Read an inventory file (a topology JSON document)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read inventory {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    return inventory_from_json(data, source=str(path))


def _in_nvml_order(gpus: list[Gpu]) -> list[Gpu]:
    """PCI bus order; a lost GPU whose bus id NVML could not read keeps its written index."""
    known = sorted(
        (gpu for gpu in gpus if parse_pci_bus_id(gpu.pci_bus_id)),
        key=lambda gpu: parse_pci_bus_id(gpu.pci_bus_id) or (0, 0, 0, 0),
    )
    for gpu in gpus:
        if not parse_pci_bus_id(gpu.pci_bus_id):
            known.insert(gpu.index if gpu.index >= 0 else len(known), gpu)
    return known


def _gpu_from_json(item: Any) -> Gpu:
    if not isinstance(item, dict):
        raise TypeError(f"expected an object, got {item!r}")
    major, minor = item.get("compute_capability") or (0, 0)
    if item.get("error") is None and not item.get("uuid"):
        raise KeyError("uuid")
    pci_bus_id = str(item.get("pci_bus_id", ""))
    if item.get("error") is None or parse_pci_bus_id(pci_bus_id):
        pci_bus_id = normalize_pci_bus_id(pci_bus_id)
    return Gpu(
        index=int(item.get("index", -1)),
        uuid=str(item.get("uuid", "")),
        name=str(item.get("name", "GPU")),
        pci_bus_id=pci_bus_id,
        memory_total_mib=int(item.get("memory_total_mib", 0)),
        memory_used_mib=int(item.get("memory_used_mib", 0)),
        compute_capability=(int(major), int(minor)),
        utilization_gpu_percent=item.get("utilization_gpu_percent"),
        mig_mode=bool(item.get("mig_mode", False)),
        mig_devices=tuple(
            MigDevice(uuid=str(mig["uuid"]), memory_total_mib=int(mig["memory_total_mib"]))
            for mig in item.get("mig_devices") or []
        ),
        processes=_processes_from_json(item),
        error=item.get("error"),
    )


def _processes_from_json(item: dict[str, Any]) -> tuple[GpuProcess, ...]:
    return merge_processes(
        (int(proc["pid"]), int(proc.get("used_memory_mib", 0)), kind)
        for key, kind in (("processes", "C"), ("graphics_processes", "G"))
        for proc in item.get(key) or []
    )


def merge_processes(entries: Iterable[tuple[int, int, str]]) -> tuple[GpuProcess, ...]:
    """One process per PID from (pid, used MiB, kind C or G) entries, in first-seen order;
    a PID listed as both is C+G (nvidia-smi's spelling) and keeps the larger memory."""
    found: dict[int, GpuProcess] = {}
    for pid, used, kind in entries:
        known = found.get(pid)
        if known is None:
            found[pid] = GpuProcess(pid, used, kind)
        else:
            merged = known.kind if kind in known.kind else "C+G"
            found[pid] = GpuProcess(pid, max(used, known.used_memory_mib), merged)
    return tuple(found.values())


def _with_index(gpu: Gpu, index: int) -> Gpu:
    return replace(gpu, index=index)


def _gpu_to_json(gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "pci_bus_id": gpu.pci_bus_id,
        "memory_total_mib": gpu.memory_total_mib,
        "memory_used_mib": gpu.memory_used_mib,
        "compute_capability": list(gpu.compute_capability),
        "utilization_gpu_percent": gpu.utilization_gpu_percent,
        "mig_mode": gpu.mig_mode,
        "mig_devices": [
            {"uuid": mig.uuid, "memory_total_mib": mig.memory_total_mib} for mig in gpu.mig_devices
        ],
        "processes": [
            {"pid": proc.pid, "used_memory_mib": proc.used_memory_mib}
            for proc in gpu.processes
            if "C" in proc.kind
        ],
        "graphics_processes": [
            {"pid": proc.pid, "used_memory_mib": proc.used_memory_mib}
            for proc in gpu.processes
            if "G" in proc.kind
        ],
        "error": gpu.error,
    }
