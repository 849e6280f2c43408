"""Choosing GPUs: `auto` requests, simulator workers, and what other runs already hold;
every choice comes with one line saying why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from drgpu.core.model import Assignment, Claim, Gpu, Inventory
from drgpu.core.modes import WorkerPlacement

WORKER_MEMORY_MIB = 1024


@dataclass(frozen=True)
class Choice:
    """What `auto` picked for one role, why, or why nothing could be picked."""

    devices: tuple[Assignment, ...]
    reason: str
    problem: str | None = None


def locate(uuid: str, inventory: Inventory) -> Assignment | None:
    """The GPU or MIG device with this full UUID, if the machine has it."""
    for gpu in inventory.gpus:
        if gpu.uuid == uuid:
            return Assignment(gpu)
        for mig in gpu.mig_devices:
            if mig.uuid == uuid:
                return Assignment(gpu, mig)
    return None


def overlaps(mine: Assignment, theirs: Assignment) -> bool:
    """Whether two assignments touch the same silicon (a whole GPU covers its MIG slices)."""
    if mine.gpu.uuid != theirs.gpu.uuid:
        return False
    return mine.mig is None or theirs.mig is None or mine.mig.uuid == theirs.mig.uuid


def busy_gpus(inventory: Inventory, claims: Sequence[Claim], run_id: str) -> dict[str, str]:
    """Why each busy GPU (by UUID) is busy: another run holds it, foreign processes run on it
    (those on a GPU this run holds are its own), or NVML cannot list its processes."""
    holders: dict[str, dict[str, None]] = {}  # the runs holding each GPU, in claim order
    own: set[str] = set()
    for claim in claims:
        for found in filter(None, (locate(uuid, inventory) for uuid in claim.uuids)):
            if claim.run_id == run_id:
                own.add(found.gpu.uuid)
            else:
                holders.setdefault(found.gpu.uuid, {})[claim.run_id] = None
    busy: dict[str, str] = {}
    for gpu in inventory.gpus:
        if gpu.uuid in holders:
            runs = ", ".join(repr(run) for run in holders[gpu.uuid])
            busy[gpu.uuid] = f"held by run {runs}"
        elif gpu.processes and gpu.uuid not in own:
            busy[gpu.uuid] = f"{len(gpu.processes)} foreign process(es)"
        elif gpu.processes_unknown and gpu.uuid not in own:  # never taken for "no process"
            busy[gpu.uuid] = f"its processes cannot be listed ({gpu.processes_unknown})"
    return busy


def short(device: Assignment) -> str:
    """`GPU 1 (NVIDIA L4)`, `GPU 0 MIG-… (NVIDIA A100…)`, or `GPU-… (on node …)`."""
    slice_ = f" {device.mig.uuid}" if device.mig else ""
    return f"{number(device.gpu)}{slice_} ({device.gpu.name})"


def number(gpu: Gpu) -> str:
    """`GPU 1`, or the UUID of another node's GPU (its index there is unknown: -1)."""
    return f"GPU {gpu.index}" if gpu.index >= 0 else gpu.uuid


def choose_trainer(
    inventory: Inventory,
    busy: Mapping[str, str],
    taken: set[str],
    may_share: bool,
    *,
    who: str = "the trainer",
    taken_by: str = "the simulator",
) -> Choice:
    """`auto` for `who` (the trainer, or a one-GPU service): the free GPU with the most memory,
    then compute capability, then lowest index; `taken` (`taken_by`'s) last, if sharing is on."""
    usable = _usable(inventory, busy)
    pool = [gpu for gpu in usable if gpu.uuid not in taken] or (usable if may_share else [])
    if not pool:
        return Choice((), "", _nothing_free(who, inventory, busy, taken))
    best = max(pool, key=lambda gpu: (gpu.memory_total_mib, gpu.compute_capability, -gpu.index))
    capability = ".".join(map(str, best.compute_capability))
    reason = (
        f"the free GPU with the most memory ({best.memory_total_mib} MiB, compute {capability})"
    )
    if best.uuid in taken:
        reason += f", shared with {taken_by}: no other GPU is free"
    return Choice((Assignment(best),), reason + _passed_over(inventory, busy))


def choose_simulators(
    inventory: Inventory,
    busy: Mapping[str, str],
    trainer: Sequence[Assignment],
    may_share: bool,
    others: Sequence[Assignment] = (),
) -> Choice:
    """`auto` for the simulators: the free GPUs the trainer and `others` do not have, the most
    memory first; the trainer's own when sharing is allowed and no other GPU is free."""
    taken = {device.gpu.uuid for device in (*trainer, *others)}
    rest = sorted(
        (gpu for gpu in _usable(inventory, busy) if gpu.uuid not in taken),
        key=lambda gpu: (-gpu.memory_total_mib, gpu.index),
    )
    if rest:
        besides = "the trainer's and other services'" if others else "the trainer's"
        reason = f"the free GPUs besides {besides}, the most memory first"
        return Choice(tuple(map(Assignment, rest)), reason + _passed_over(inventory, busy))
    if may_share and trainer:
        reason = "no other GPU is free, so the simulators share the trainer's"
        return Choice(tuple(trainer), reason + _passed_over(inventory, busy))
    return Choice((), "", _nothing_free("the simulators", inventory, busy, taken))


def place_workers(
    devices: Sequence[Assignment],
    workers: int,
    mode: WorkerPlacement,
    reserved_mib: Mapping[str, int],
) -> list[tuple[Assignment, str]]:
    """Each worker's device (worker 1 first) and why. `spread` deals them round-robin;
    `pack` fills the devices with the most free memory first, about 1 GiB per worker
    (`reserved_mib`: memory other services of the stack are expected to take, per UUID)."""
    if not devices:
        return []
    if mode == WorkerPlacement.SPREAD:
        indices = ", ".join(number(device.gpu).removeprefix("GPU ") for device in devices)
        return [
            (
                devices[(slot - 1) % len(devices)],
                f"spread: worker {slot} of {workers}, round-robin over GPUs {indices}",
            )
            for slot in range(1, workers + 1)
        ]
    free = {device.uuid: _free_mib(device) - reserved_mib.get(device.uuid, 0) for device in devices}
    order = sorted(devices, key=lambda device: -free[device.uuid])
    placed = []
    for _ in range(workers):
        fits = [device for device in order if free[device.uuid] >= WORKER_MEMORY_MIB]
        device = fits[0] if fits else max(order, key=lambda d: free[d.uuid])
        reason = (
            f"pack: {max(free[device.uuid], 0)} MiB free before this worker; the GPU with"
            f" the most free memory is filled first, about {WORKER_MEMORY_MIB // 1024} GiB each"
        )
        free[device.uuid] -= WORKER_MEMORY_MIB
        placed.append((device, reason))
    return placed


def _free_mib(device: Assignment) -> int:
    used = 0 if device.mig else device.gpu.memory_used_mib
    return device.memory_total_mib - used


def _usable(inventory: Inventory, busy: Mapping[str, str]) -> list[Gpu]:
    return [gpu for gpu in inventory.gpus if _why_not(gpu, busy) is None]


def _why_not(gpu: Gpu, busy: Mapping[str, str]) -> str | None:
    if gpu.lost:
        return "lost"
    if gpu.mig_mode:
        return "in MIG mode: auto takes whole GPUs only"
    return busy.get(gpu.uuid)


def _passed_over(inventory: Inventory, busy: Mapping[str, str]) -> str:
    skipped = _not_free(inventory, busy)
    return f"; passed over {skipped}" if skipped else ""


def _nothing_free(role: str, inventory: Inventory, busy: Mapping[str, str], taken: set[str]) -> str:
    if not inventory.gpus:
        return f"auto found no GPU for {role}: this machine has none"
    return f"auto found no free GPU for {role}: {_not_free(inventory, busy, taken)}"


def _not_free(inventory: Inventory, busy: Mapping[str, str], taken: Set[str] = frozenset()) -> str:
    return ", ".join(
        f"GPU {gpu.index} ({why})"
        for gpu in inventory.gpus
        if (why := _why_not(gpu, busy) or ("the other role's" if gpu.uuid in taken else None))
    )
