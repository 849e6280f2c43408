"""From settings, a stack and an inventory to a plan: who gets which GPU, checked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from drgpu.core.compose_stack import SIMULATOR_SERVICE, Stack, StackService
from drgpu.core.devices import DeviceRequest, describe_gpu, resolve
from drgpu.core.labels import run_labels
from drgpu.core.model import Assignment, Claim, Extends, Inventory, Plan, Role, ServicePlan
from drgpu.core.placement import (
    WORKER_MEMORY_MIB,
    Choice,
    busy_gpus,
    choose_simulators,
    choose_trainer,
    locate,
    overlaps,
    place_workers,
    short,
)
from drgpu.core.settings import SIMULATOR_DEVICES_KEY, TRAINER_DEVICES_KEY, Config
from drgpu.core.sharing import apply_sharing
from drgpu.errors import GpuValidationError

TRAINER_MIN_MEMORY_MIB = 8 * 1024
SIMULATOR_MIN_MEMORY_MIB_PER_WORKER = WORKER_MEMORY_MIB
TRAINER_CAPABILITIES = ("gpu", "compute", "utility")
SIMULATOR_CAPABILITIES = ("gpu", "compute", "utility", "graphics")
ORDER_NOTE = (
    "GPU indices are nvidia-smi's (PCI bus order), not CUDA's default fastest-first order;"
    " drgpu renders full UUIDs and sets CUDA_DEVICE_ORDER=PCI_BUS_ID"
)
RUNS_HINT = (
    "stop the other run first (`drgpu down` with its settings), choose another GPU,"
    " or write `auto` to let drgpu choose a free one"
)


@dataclass
class _Notes:
    """What planning found on the way: problems stop it, the rest goes into the plan."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    explanations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Worker:
    """One simulator worker: its service, its slot, and the stack service it is made of."""

    name: str
    slot: int
    source: StackService
    generated: bool


def make_plan(
    config: Config, stack: Stack, inventory: Inventory, claims: Sequence[Claim] = ()
) -> Plan:
    """Check every request against the machine and what other runs hold (`claims`, read
    from running containers' labels), and decide each service's devices.

    Every problem is collected and raised at once as a `GpuValidationError`.
    """
    notes = _Notes()
    trainer = _resolve(config, TRAINER_DEVICES_KEY, config.trainer_devices, inventory, notes)
    simulator = _resolve(config, SIMULATOR_DEVICES_KEY, config.simulator_devices, inventory, notes)
    busy = busy_gpus(inventory, claims, config.run_key)
    may_share = config.sharing != "exclusive"
    if config.trainer_devices.auto:
        taken = {device.gpu.uuid for device in simulator}
        choice = choose_trainer(inventory, busy, taken, may_share)
        trainer = _chosen(config, TRAINER_DEVICES_KEY, "trainer", choice, notes)
    if config.simulator_devices.auto and not notes.problems:
        choice = choose_simulators(inventory, busy, trainer, may_share)
        simulator = _chosen(config, SIMULATOR_DEVICES_KEY, "simulators", choice, notes)
    _check_overlaps(config, trainer, simulator, notes)
    if notes.problems:
        raise GpuValidationError(notes.problems, hint=ORDER_NOTE)
    services = _services(config, stack, trainer, simulator, notes)
    shared = apply_sharing(config, stack, services)
    notes.problems.extend(shared.problems)
    notes.warnings.extend(shared.warnings)
    notes.explanations.extend(shared.explanations)
    conflicts = _other_runs(config, shared.services, inventory, claims, notes)
    if notes.problems:
        raise GpuValidationError(notes.problems, hint=RUNS_HINT if conflicts else ORDER_NOTE)
    _memory_warnings(trainer, shared.services, notes)
    notes.warnings.extend(_unused_requests(config, stack))
    return Plan(
        project=config.project,
        run_id=config.run_key,
        services=shared.services,
        warnings=tuple(notes.warnings),
        explanations=tuple(notes.explanations),
        sharing=config.sharing,
        tmpfs_volumes=shared.tmpfs_volumes,
    )


def _resolve(
    config: Config, key: str, request: DeviceRequest, inventory: Inventory, notes: _Notes
) -> tuple[Assignment, ...]:
    assignments, found = resolve(request, inventory)
    notes.problems.extend(f"{config.where(key)}: {problem}" for problem in found)
    if request.all and not assignments:
        notes.problems.append(
            f"{config.where(key)}: 'all' asks for GPUs, but this machine has none"
        )
    return tuple(assignments)


def _chosen(
    config: Config, key: str, role: str, choice: Choice, notes: _Notes
) -> tuple[Assignment, ...]:
    if choice.problem is not None:
        notes.problems.append(f"{config.where(key)}: {choice.problem}")
        return ()
    chosen = ", ".join(short(device) for device in choice.devices)
    notes.explanations.append(f"{role} (auto): {chosen}: {choice.reason}")
    return choice.devices


def _check_overlaps(
    config: Config,
    trainer: tuple[Assignment, ...],
    simulator: tuple[Assignment, ...],
    notes: _Notes,
) -> None:
    shared = [device for device in trainer if any(overlaps(device, s) for s in simulator)]
    for device in shared:
        both = (
            f"{describe_gpu(device.gpu)} is asked for by both the trainer"
            f" ({config.where(TRAINER_DEVICES_KEY)}) and the simulator"
            f" ({config.where(SIMULATOR_DEVICES_KEY)})"
        )
        if config.sharing == "exclusive":
            notes.problems.append(f"{both}; DRGPU_SHARING=exclusive gives each GPU to one of them")
        elif config.sharing == "timeslice":
            notes.warnings.append(
                f"{both}; DRGPU_SHARING=timeslice: they take turns on it, and their"
                " frameworks are told to grow their memory instead of taking it all"
            )


def _workers(config: Config, stack: Stack, notes: _Notes) -> list[_Worker]:
    """The simulator workers: the stack's own robomaker-N, else DR_WORKERS copies of
    robomaker (robomaker-1 ...), else none (one robomaker, or no simulator at all)."""
    numbered = sorted(
        (service for service in stack.services if service.worker_slot is not None),
        key=lambda service: service.worker_slot or 0,
    )
    if numbered:
        if len(numbered) != config.workers:
            names = ", ".join(service.name for service in numbered)
            notes.warnings.append(
                f"{config.where('DR_WORKERS')} is {config.workers}, but the stack defines"
                f" {len(numbered)} simulator worker(s) itself ({names}): drgpu places those"
            )
        return [_Worker(s.name, s.worker_slot or 0, s, generated=False) for s in numbered]
    base = stack.service(SIMULATOR_SERVICE)
    if base is None or config.workers == 1:
        return []
    return [
        _Worker(f"{SIMULATOR_SERVICE}-{slot}", slot, base, generated=True)
        for slot in range(1, config.workers + 1)
    ]


def _services(
    config: Config,
    stack: Stack,
    trainer: tuple[Assignment, ...],
    simulator: tuple[Assignment, ...],
    notes: _Notes,
) -> tuple[ServicePlan, ...]:
    """Every service's plan, in the stack's order, with the workers where robomaker is."""
    workers = _workers(config, stack, notes)
    reserved = {device.uuid: TRAINER_MIN_MEMORY_MIB for device in trainer}
    placed = place_workers(simulator, max(len(workers), 1), config.worker_placement, reserved)
    worker_plans: dict[str, ServicePlan] = {}
    for index, worker in enumerate(workers):
        devices: tuple[Assignment, ...] = ()
        if placed:
            device, reason = placed[index]
            devices = (device,)
            notes.explanations.append(f"{worker.name}: {short(device)}: {reason}")
        worker_plans[worker.name] = _service_plan(
            config,
            worker.source,
            devices,
            name=worker.name,
            slot=worker.slot,
            extends=_extends(worker.source) if worker.generated else None,
            replicas=1 if worker.generated else None,
        )
    generated = any(worker.generated for worker in workers)
    plans: list[ServicePlan] = []
    for source in stack.services:
        if source.role is Role.MPS_DAEMON:
            continue  # planned with the sharing (drgpu.sharing)
        if source.name in worker_plans:
            plans.append(worker_plans[source.name])
        elif source.name == SIMULATOR_SERVICE and generated:
            plans.append(_replaced(config, source, len(workers)))
            plans.extend(worker_plans.values())
        elif source.role in (Role.TRAINER, Role.TRAINER_LAUNCHER):
            plans.append(_service_plan(config, source, trainer))
        elif source.role is Role.SIMULATOR:
            devices = _single(config, source, placed, simulator, notes)
            plans.append(_service_plan(config, source, devices))
        else:
            plans.append(_service_plan(config, source, ()))
    return tuple(plans)


def _single(
    config: Config,
    source: StackService,
    placed: list[tuple[Assignment, str]],
    simulator: tuple[Assignment, ...],
    notes: _Notes,
) -> tuple[Assignment, ...]:
    """The devices of a simulator that is no worker: the whole list written, or for
    `auto` one GPU (auto never takes more GPUs than there are workers)."""
    if not config.simulator_devices.auto or not placed:
        return simulator
    device, reason = placed[0]
    notes.explanations.append(f"{source.name}: {short(device)}: {reason}")
    return (device,)


def _extends(source: StackService) -> Extends:
    return Extends(service=source.name, files=tuple(str(path) for path in source.files))


def _replaced(config: Config, source: StackService, workers: int) -> ServicePlan:
    """The robomaker service itself, kept from starting: its workers run instead."""
    plan = _service_plan(config, source, ())
    return ServicePlan(
        name=plan.name,
        role=plan.role,
        devices=(),
        capabilities=(),
        environment=plan.environment,
        labels=plan.labels,
        note=(
            f"not started: {SIMULATOR_SERVICE}-1 ... {SIMULATOR_SERVICE}-{workers}"
            f" run instead (DR_WORKERS={workers})"
        ),
        replicas=0,
    )


def _service_plan(
    config: Config,
    source: StackService,
    devices: tuple[Assignment, ...],
    *,
    name: str | None = None,
    slot: int | None = None,
    extends: Extends | None = None,
    replicas: int | None = None,
) -> ServicePlan:
    role = source.role
    capabilities: tuple[str, ...] = ()
    note = None
    if role is Role.TRAINER:
        capabilities = TRAINER_CAPABILITIES
    elif role is Role.SIMULATOR:
        capabilities = SIMULATOR_CAPABILITIES + (("display",) if config.host_x else ())
    elif role is Role.TRAINER_LAUNCHER:
        note = (
            "starts the trainer through SageMaker local mode and forwards its"
            " CUDA_VISIBLE_DEVICES; rl_coach itself gets no GPU"
        )
    else:
        devices = ()
    uuids = ",".join(device.uuid for device in devices)
    environment: dict[str, str] = {}
    if role is Role.TRAINER_LAUNCHER:
        environment = {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": uuids,
            "NVIDIA_VISIBLE_DEVICES": "void",
        }
    elif devices:
        environment = {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": uuids,
            "NVIDIA_VISIBLE_DEVICES": uuids,
        }
    else:
        environment = {"NVIDIA_VISIBLE_DEVICES": "void"}
    if slot is not None:
        environment["DOCKER_REPLICA_SLOT"] = str(slot)
    gets_request = bool(devices) and role is not Role.TRAINER_LAUNCHER
    reset_keys = []
    if not gets_request and source.has_device_requests:
        reset_keys.append("deploy.resources.reservations.devices")
    if source.has_gpus_key:
        reset_keys.append("gpus")
    if extends is not None and "container_name" in source.keys:
        reset_keys.append("container_name")  # copies cannot share one name
    return ServicePlan(
        name=name or source.name,
        role=role,
        devices=devices,
        capabilities=capabilities if gets_request else (),
        environment=tuple(environment.items()),
        labels=run_labels(
            config.run_key,
            config.sharing,
            role,
            uuids if gets_request else "",
            forwarded=uuids if role is Role.TRAINER_LAUNCHER else "",
        ),
        reset_keys=tuple(reset_keys),
        note=note,
        replicas=replicas,
        extends=extends,
    )


def _other_runs(
    config: Config,
    services: Sequence[ServicePlan],
    inventory: Inventory,
    claims: Sequence[Claim],
    notes: _Notes,
) -> bool:
    """Check the plan against GPUs other runs hold; whether any conflict was found."""
    mine: dict[str, tuple[Assignment, list[str]]] = {}
    for service in services:
        for device in service.devices:
            mine.setdefault(device.uuid, (device, []))[1].append(service.name)
    held: dict[tuple[str, str], tuple[Assignment, Claim, list[str]]] = {}
    for claim in claims:
        if claim.run_id == config.run_key:
            continue
        for uuid in claim.uuids:
            theirs = locate(uuid, inventory)
            if theirs is None:
                continue
            for device, _names in mine.values():
                if overlaps(device, theirs):
                    entry = held.setdefault((device.uuid, claim.run_id), (device, claim, []))
                    if claim.service not in entry[2]:
                        entry[2].append(claim.service)
    conflict = False
    for (uuid, run), (device, claim, their_services) in held.items():
        names = ", ".join(mine[uuid][1])
        message = (
            f"{describe_gpu(device.gpu)}, planned for {names}, is held by run {run!r}"
            f" ({', '.join(their_services)})"
        )
        if config.sharing == "timeslice" and claim.sharing == "timeslice":
            notes.warnings.append(f"{message}; both runs use DRGPU_SHARING=timeslice: shared")
        elif config.sharing == "timeslice":
            conflict = True
            notes.problems.append(
                f"{message}, which does not share it (DRGPU_SHARING={claim.sharing} there)"
            )
        else:
            conflict = True
            notes.problems.append(
                f"{message}; DRGPU_SHARING={config.sharing} does not share GPUs between runs"
            )
    return conflict


def _memory_warnings(
    trainer: tuple[Assignment, ...],
    services: Sequence[ServicePlan],
    notes: _Notes,
) -> None:
    notes.warnings.extend(
        f"the trainer's GPU {device.gpu.index} ({device.gpu.name},"
        f" {device.memory_total_mib} MiB) has under 8 GiB; DeepRacer training needs about 8 GiB"
        for device in trainer
        if device.memory_total_mib < TRAINER_MIN_MEMORY_MIB
    )
    workers: dict[str, tuple[Assignment, int]] = {}
    for service in services:
        if service.role is Role.SIMULATOR and not service.disabled:
            for device in service.devices:
                workers[device.uuid] = (device, workers.get(device.uuid, (device, 0))[1] + 1)
    notes.warnings.extend(
        f"the simulator's GPU {device.gpu.index} ({device.gpu.name},"
        f" {device.memory_total_mib} MiB) has under 1 GiB for each of {count} worker(s)"
        for device, count in workers.values()
        if device.memory_total_mib < SIMULATOR_MIN_MEMORY_MIB_PER_WORKER * count
    )


def _unused_requests(config: Config, stack: Stack) -> list[str]:
    warnings = []
    has_trainer = stack.names(Role.TRAINER) or stack.names(Role.TRAINER_LAUNCHER)
    if config.trainer_devices.wants_gpu and not has_trainer:
        warnings.append(
            f"{config.where(TRAINER_DEVICES_KEY)} is set, but the stack has no sagemaker"
            " or rl_coach service"
        )
    if config.simulator_devices.wants_gpu and not stack.names(Role.SIMULATOR):
        warnings.append(
            f"{config.where(SIMULATOR_DEVICES_KEY)} is set, but the stack has no robomaker service"
        )
    return warnings
