"""The topology JSON format: what `--inventory` reads, `drgpu gpus --json` writes,
and the fake NVML of the test bed serves.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from drgpu.core.model import Gpu, GpuProcess, Inventory, MigDevice
from drgpu.errors import ConfigError

# NVIDIA's UUIDs, as NVML and nvidia-smi -L write them: a GPU's `GPU-<uuid>`; a MIG
# device's `MIG-<uuid>` (R470 and later) or, before, `MIG-GPU-<gpu uuid>/<gi>/<ci>`.
_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU_UUID = re.compile(rf"GPU-{_HEX_UUID}")
_MIG_UUID = re.compile(rf"MIG-{_HEX_UUID}|MIG-GPU-{_HEX_UUID}/[0-9]{{1,3}}/[0-9]{{1,3}}")
_UUID_FORMS = {
    "GPU": "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, x a hex digit",
    "MIG": "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx or MIG-GPU-<GPU's uuid>/<gi>/<ci>",
}


def pci_bus_id(text: str) -> str | None:
    """NVML's spelling of a PCI bus id, `00000000:81:00.0`, or None if `text` is not one."""
    from drgpu.probe import normalize_pci_bus_id  # lazy: the probe's one rule, not at start-up

    return normalize_pci_bus_id(text)


def checked_pci_bus_id(text: str) -> str:
    """`pci_bus_id`, but a ValueError where `text` is no PCI bus id."""
    if (spelling := pci_bus_id(text)) is None:
        raise ValueError(f"not a PCI bus id: {text!r}")
    return spelling


# The bounds of an inventory's numbers: larger ones are typos or hostile input.
MAX_GPUS = 1024
MAX_MEMORY_MIB = 1 << 30  # a PiB: more than any GPU has
MAX_PID = 1 << 22  # Linux's pid_max limit
_PROCESS_KEYS = (("processes", "C"), ("graphics_processes", "G"))  # and their kinds
_PLAIN_KEYS = ("index", "uuid", "name", "pci_bus_id", "memory_total_mib", "memory_used_mib")


def inventory_from_json(data: Any, source: str = "inventory") -> Inventory:
    """Read a topology document; GPUs are indexed in PCI bus order, as NVML does."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus", []), list):
        raise ConfigError(f"{source}: expected an object with a 'gpus' list")
    items = data.get("gpus", [])
    if len(items) > MAX_GPUS:
        raise ConfigError(f"{source}: {len(items)} GPUs, more than {MAX_GPUS}")
    try:
        gpus = _in_nvml_order([_gpu_from_json(item) for item in items])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: bad GPU entry ({_short(str(exc), 200)})") from None
    _check_unique(gpus, source)
    cuda = data.get("cuda_driver_version")
    if cuda is not None and not _is_whole(cuda, 0, 10**6):
        raise ConfigError(
            f"{source}: cuda_driver_version {_short(repr(cuda))} is not a number from 0 to 1000000"
        )
    for key in ("driver_version", "init_error"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{source}: {key} must be text")
    order, count = data.get("cuda_order"), len(gpus)  # the NVML index of each CUDA ordinal
    if order is not None and (
        not isinstance(order, list) or not all(_is_whole(index, 0, count - 1) for index in order)
    ):
        raise ConfigError(
            f"{source}: cuda_order must list NVML indices (0 to {count - 1}) in CUDA's order"
        )
    return Inventory(
        gpus=tuple(replace(gpu, index=index) for index, gpu in enumerate(gpus)),
        driver_version=data.get("driver_version"),
        cuda_driver_version=cuda,
        init_error=data.get("init_error"),
        cuda_order=None if order is None else tuple(order),
    )


def _check_unique(gpus: list[Gpu], source: str) -> None:
    """Two GPUs never share a UUID, nor a PCI bus id (a copied entry, not a machine)."""
    for what, values in (
        ("UUID", [gpu.uuid.lower() for gpu in gpus]),
        ("PCI bus id", [gpu.pci_bus_id for gpu in gpus if pci_bus_id(gpu.pci_bus_id)]),
    ):
        seen: set[str] = set()
        for value in values:
            if value and value in seen:
                raise ConfigError(
                    f"{source}: two GPUs have the {what} {_short(value)}: one machine never does"
                )
            seen.add(value)


def _is_whole(value: Any, low: int, high: int) -> bool:
    """A JSON whole number (not a boolean) from `low` to `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _whole(item: dict[str, Any], key: str, default: int | None, low: int, high: int) -> int:
    """`item[key]` checked (`default` when missing; None: it must be there)."""
    if default is None and key not in item:
        raise KeyError(key)
    value: Any = item.get(key, default)
    if not _is_whole(value, low, high):
        raise ValueError(f"{key} {_short(repr(value))} is not a whole number from {low} to {high}")
    return int(value)


def _text(item: dict[str, Any], key: str, default: str) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key} {_short(repr(value))} is not text")
    return value


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def inventory_to_json(inventory: Inventory) -> dict[str, Any]:
    """The topology document of an inventory (round-trips with `inventory_from_json`)."""
    return {
        "driver_version": inventory.driver_version,
        "cuda_driver_version": inventory.cuda_driver_version,
        "init_error": inventory.init_error,
        "cuda_order": None if inventory.cuda_order is None else list(inventory.cuda_order),
        "gpus": [_gpu_to_json(gpu) for gpu in inventory.gpus],
    }


def inventory_from_text(text: str, source: str) -> Inventory:
    """An inventory file's text (a topology JSON document); `source` names it in messages."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # Infinity, NaN, or a number of over 4300 digits
        raise ConfigError(f"{source}: not valid JSON ({_short(str(exc))})") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid JSON (nested too deeply)") from None
    return inventory_from_json(data, source=source)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _in_nvml_order(gpus: list[Gpu]) -> list[Gpu]:
    """PCI bus order; a lost GPU whose bus id NVML could not read keeps its written index."""
    known = sorted(
        (gpu for gpu in gpus if pci_bus_id(gpu.pci_bus_id)),
        key=lambda gpu: pci_bus_id(gpu.pci_bus_id) or "",  # fixed-width hex: numeric order
    )
    for gpu in gpus:
        if not pci_bus_id(gpu.pci_bus_id):
            known.insert(gpu.index if gpu.index >= 0 else len(known), gpu)
    return known


def _gpu_from_json(item: Any) -> Gpu:
    if not isinstance(item, dict):
        raise TypeError(f"expected an object, got {_short(repr(item))}")
    error = item.get("error")
    for key in ("error", "processes_error"):
        if item.get(key) is not None and not isinstance(item.get(key), str):
            raise ValueError(f"{key} {_short(repr(item.get(key)))} is not text")
    capability = item.get("compute_capability") or [0, 0]
    if (
        not isinstance(capability, list)
        or len(capability) != 2
        or not all(_is_whole(part, 0, 99) for part in capability)
    ):
        raise ValueError(f"compute_capability {_short(repr(capability))} is not [major, minor]")
    if error is None and not item.get("uuid"):
        raise KeyError("uuid")
    bus = _text(item, "pci_bus_id", "")
    if error is None or pci_bus_id(bus):
        bus = checked_pci_bus_id(bus)
    mig_mode = item.get("mig_mode", False)
    if not isinstance(mig_mode, bool):
        raise ValueError(f"mig_mode {_short(repr(mig_mode))} is not true or false")
    utilization = item.get("utilization_gpu_percent")
    if utilization is not None and not _is_whole(utilization, 0, 100):
        raise ValueError(f"utilization_gpu_percent {_short(repr(utilization))} is not 0 to 100")
    migs = item.get("mig_devices") or []
    if not isinstance(migs, list) or not all(isinstance(mig, dict) for mig in migs):
        raise ValueError("mig_devices is not a list of objects")
    uuid = _text(item, "uuid", "")
    if error is None or uuid:
        _check_uuid(uuid, "GPU", _GPU_UUID)
    return Gpu(
        index=_whole(item, "index", -1, -1, MAX_GPUS),
        uuid=uuid,
        name=_text(item, "name", "GPU"),
        pci_bus_id=bus,
        memory_total_mib=_whole(item, "memory_total_mib", 0, 0, MAX_MEMORY_MIB),
        memory_used_mib=_whole(item, "memory_used_mib", 0, 0, MAX_MEMORY_MIB),
        compute_capability=(int(capability[0]), int(capability[1])),
        utilization_gpu_percent=utilization,
        mig_mode=mig_mode,
        mig_devices=tuple(
            MigDevice(
                uuid=_check_uuid(_text(mig, "uuid", ""), "MIG", _MIG_UUID),
                memory_total_mib=_whole(mig, "memory_total_mib", None, 0, MAX_MEMORY_MIB),
            )
            for mig in migs
        ),
        processes=_processes_from_json(item),
        processes_unknown=item.get("processes_error") or None,
        error=error,
    )


def _check_uuid(uuid: str, kind: str, pattern: re.Pattern[str]) -> str:
    """`uuid`, if written as NVIDIA writes a `kind` (GPU or MIG) UUID (`_UUID_FORMS`)."""
    if pattern.fullmatch(uuid) is None:
        label = "uuid" if kind == "GPU" else f"{kind} uuid"
        raise ValueError(f"{label} {_short(repr(uuid))} is not a {kind} UUID ({_UUID_FORMS[kind]})")
    return uuid


def _processes_from_json(item: dict[str, Any]) -> tuple[GpuProcess, ...]:
    entries: list[tuple[int, int, str]] = []
    for key, kind in _PROCESS_KEYS:
        listed = item.get(key) or []
        if not isinstance(listed, list) or not all(isinstance(proc, dict) for proc in listed):
            raise ValueError(f"{key} is not a list of objects")
        entries.extend(
            (
                _whole(proc, "pid", 0, 1, MAX_PID),
                _whole(proc, "used_memory_mib", 0, 0, MAX_MEMORY_MIB),
                kind,
            )
            for proc in listed
        )
    return merge_processes(entries)


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


def _gpu_to_json(gpu: Gpu) -> dict[str, Any]:
    return {
        **{key: getattr(gpu, key) for key in _PLAIN_KEYS},
        "compute_capability": list(gpu.compute_capability),
        "utilization_gpu_percent": gpu.utilization_gpu_percent,
        "mig_mode": gpu.mig_mode,
        "mig_devices": [
            {"uuid": mig.uuid, "memory_total_mib": mig.memory_total_mib} for mig in gpu.mig_devices
        ],
        **{
            key: [
                {"pid": proc.pid, "used_memory_mib": proc.used_memory_mib}
                for proc in gpu.processes
                if kind in proc.kind
            ]
            for key, kind in _PROCESS_KEYS
        },
        "error": gpu.error,
        "processes_error": gpu.processes_unknown,
    }
