"""GPU faults, attributed: what NVML says went wrong with a GPU (its health, polled, and the
events a watch received), as `gpu-fault` violations naming every drgpu container holding or
running on that GPU (an event names no PID). Pure. `up` refuses a GPU with a PENDING fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from drgpu.core.findings import Finding, Level
from drgpu.core.model import Gpu, GpuEvent, GpuHealth, Plan, Role
from drgpu.core.placement import WORKER_MEMORY_MIB
from drgpu.core.planning import TRAINER_MIN_MEMORY_MIB

if TYPE_CHECKING:
    from drgpu.core.gpu_usage import Status

FAULT = "gpu-fault"
# nvmlClocksEventReason* bits of the GPU slowing itself down (not the user's choice).
SLOWDOWNS = {
    0x8: "hardware slowdown",
    0x20: "thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
}
CHOSEN_REASONS = 0x1 | 0x2 | 0x4  # idle, application clocks, software power cap
XID_EVENT, ECC_EVENT = 0x8, 0x2


def throttled(health: GpuHealth) -> bool:
    """Whether the GPU runs slower than asked now (not idle, nor at a set limit)."""
    return bool((health.throttle or 0) & ~CHOSEN_REASONS)


# What a GPU's health counts or flags, in words ("{}": the count).
COUNTED = {
    "ecc_uncorrected": "{} uncorrectable ECC error(s) since the driver loaded",
    "remapped_uncorrectable": "{} row(s) remapped for uncorrectable errors",
}
PENDING = {
    "retired_pending": "retired pages pending (reset the GPU)",
    "remap_pending": "row remapping pending (reset the GPU)",
    "remap_failure": "row remapping failed (the GPU needs service)",
}


def standing(health: GpuHealth) -> list[str]:
    """What is wrong with a GPU now, or since the driver loaded."""
    found = [text.format(n) for name, text in COUNTED.items() if (n := getattr(health, name))]
    found += pending(health)
    slow = [name for bit, name in SLOWDOWNS.items() if (health.throttle or 0) & bit]
    return found + [f"clocks held down ({', '.join(slow)})"] * bool(slow)


def pending(health: GpuHealth) -> list[str]:
    """The faults that make a GPU unfit to start on until it is reset."""
    return [text for name, text in PENDING.items() if getattr(health, name)]


def describe(event: GpuEvent) -> str:
    """An event in words."""
    if event.type == ECC_EVENT:
        return "a double-bit ECC error"
    lost = " (fell off the bus)" if event.xid == 79 else ""
    return f"critical Xid {event.xid}{lost}"


def with_faults(
    status: Status,
    health: Sequence[GpuHealth],
    events: Iterable[GpuEvent] = (),
    unfollowed: str | None = None,
) -> Status:
    """`status` with a `gpu-fault` violation per fault and drgpu container on its GPU (or
    one without a run), and a note when a watch cannot follow NVML's events (`unfollowed`)."""
    from drgpu.core.gpu_usage import FACTS  # lazy: up's preflight needs none of status's model

    if unfollowed:
        note = f"NVML events are not followed here ({unfollowed}): no Xid error is seen"
        status = replace(status, notes=(*status.notes, note))
    faults = [(h.index, h.uuid, text) for h in health for text in standing(h)]
    faults += [(e.index, e.uuid, f"{describe(e)} at {_clock(e.time)}") for e in events]
    found = [
        Finding(
            f"GPU {index}",
            Level.FAIL,
            f"GPU {index}: {text}"
            + (f" (run {run} service {service}, {container})" if run else ""),
            "see `nvidia-smi -q -d PERFORMANCE,ECC,PAGE_RETIREMENT,ROW_REMAPPER` and the kernel"
            " log (Xid); pages or rows pending need a GPU reset",
            kind=FAULT,
            facts={
                **dict.fromkeys(FACTS),
                "run_id": run,
                "gpu_index": index,
                "gpu_uuid": uuid,
                "container": container,
                "service": service,
            },
        )
        for index, uuid, text in faults
        for run, service, container in _on_gpu(status, index)
    ]
    if not found:
        return status
    return replace(status, findings=(*status.violations, *found, *status.warnings))


def _on_gpu(status: Status, index: int) -> list[tuple[str | None, str | None, str | None]]:
    """(run, service, container) of each drgpu container holding or running on a GPU."""
    found: set[tuple[str | None, str | None, str | None]]
    found = {(h.run_id, h.service, h.container) for h in status.holders.get(index, ())}
    found |= {
        (p.run_id, p.service, p.container)
        for p in status.processes
        if p.gpu.index == index and p.run_id is not None
    }
    if [g.index for g in status.inventory.gpus if g.lost] == [index]:  # the one lost GPU:
        # those given a GPU NVML no longer lists held it
        found |= {
            (f.facts["run_id"], f.facts["service"], f.facts["container"])
            for f in status.findings
            if f.kind == "missing-gpu"
        }
    return sorted(found, key=str) or [(None, None, None)]


def _clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%H:%M:%S UTC")


def preflight(plan: Plan, health: Sequence[GpuHealth]) -> tuple[list[str], list[str]]:
    """Why `up` must not start `plan` on these GPUs (a reset or repair due), and what it warns
    of: persistence mode off, less free memory than the services need."""
    wanted: dict[int, tuple[Gpu, int]] = {}
    need = {Role.SIMULATOR: WORKER_MEMORY_MIB, Role.TRAINER: TRAINER_MIN_MEMORY_MIB}
    need[Role.TRAINER_LAUNCHER] = TRAINER_MIN_MEMORY_MIB  # what its trainer will use
    for service in plan.services:
        if service.disabled:
            continue
        for device in service.devices:
            gpu, needed = wanted.get(device.gpu.index, (device.gpu, 0))
            wanted[gpu.index] = gpu, needed + need.get(service.role, 0) * (device.mig is None)
    problems = [
        f"GPU {h.index}: {text}" for h in health if h.index in wanted for text in pending(h)
    ]
    off = [str(h.index) for h in health if h.index in wanted and h.persistence is False]
    warnings = [
        f"persistence mode is off on GPU {', '.join(off)}: every container start waits for"
        " the driver to load (about 25 s) and NVML calls may time out;"
        " `sudo nvidia-smi -pm 1`, or enable nvidia-persistenced"
    ] * bool(off)
    warnings += [
        f"GPU {gpu.index} has {free} MiB free, below the {needed} MiB its services need"
        for gpu, needed in wanted.values()
        if gpu.memory_total_mib and needed > (free := gpu.memory_total_mib - gpu.memory_used_mib)
    ]
    return problems, warnings
