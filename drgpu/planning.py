"""From settings, a stack and an inventory to a plan: who gets which GPU, checked."""

from __future__ import annotations

from drgpu.config import SIMULATOR_DEVICES_KEY, TRAINER_DEVICES_KEY, Config
from drgpu.devices import DeviceRequest, describe_gpu, resolve
from drgpu.errors import GpuValidationError
from drgpu.model import Assignment, Inventory, Plan, Role, ServicePlan
from drgpu.stack import Stack, StackService

TRAINER_MIN_MEMORY_MIB = 8 * 1024
SIMULATOR_MIN_MEMORY_MIB_PER_WORKER = 1024
TRAINER_CAPABILITIES = ("gpu", "compute", "utility")
SIMULATOR_CAPABILITIES = ("gpu", "compute", "utility", "graphics")
ORDER_NOTE = (
    "GPU indices are nvidia-smi's (PCI bus order), not CUDA's default fastest-first order;"
    " drgpu renders full UUIDs and sets CUDA_DEVICE_ORDER=PCI_BUS_ID"
)


def make_plan(config: Config, stack: Stack, inventory: Inventory) -> Plan:
    """Check every request against the machine and decide each service's devices.

    Every problem is collected and raised at once as a `GpuValidationError`.
    """
    problems: list[str] = []
    trainer = _resolve(config, TRAINER_DEVICES_KEY, config.trainer_devices, inventory, problems)
    simulator = _resolve(
        config, SIMULATOR_DEVICES_KEY, config.simulator_devices, inventory, problems
    )
    problems.extend(_overlaps(config, trainer, simulator))
    if problems:
        raise GpuValidationError(problems, hint=ORDER_NOTE)
    warnings = _memory_warnings(config, trainer, simulator) + _unused_requests(config, stack)
    services = tuple(
        _service_plan(config, stack_service, trainer, simulator) for stack_service in stack.services
    )
    return Plan(
        project=config.project, run_id=config.run_id, services=services, warnings=tuple(warnings)
    )


def _resolve(
    config: Config,
    key: str,
    request: DeviceRequest,
    inventory: Inventory,
    problems: list[str],
) -> tuple[Assignment, ...]:
    assignments, found = resolve(request, inventory)
    problems.extend(f"{config.where(key)}: {problem}" for problem in found)
    if request.all and not assignments:
        problems.append(f"{config.where(key)}: 'all' asks for GPUs, but this machine has none")
    return tuple(assignments)


def _overlaps(
    config: Config, trainer: tuple[Assignment, ...], simulator: tuple[Assignment, ...]
) -> list[str]:
    shared = [device for device in trainer if device.uuid in {d.uuid for d in simulator}]
    return [
        f"{describe_gpu(device.gpu)} is asked for by both the trainer"
        f" ({config.where(TRAINER_DEVICES_KEY)}) and the simulator"
        f" ({config.where(SIMULATOR_DEVICES_KEY)}); DRGPU_SHARING={config.sharing}"
        " gives each GPU to one of them"
        for device in shared
    ]


def _memory_warnings(
    config: Config, trainer: tuple[Assignment, ...], simulator: tuple[Assignment, ...]
) -> list[str]:
    warnings = [
        f"the trainer's GPU {device.gpu.index} ({device.gpu.name},"
        f" {device.memory_total_mib} MiB) has under 8 GiB; DeepRacer training needs about 8 GiB"
        for device in trainer
        if device.memory_total_mib < TRAINER_MIN_MEMORY_MIB
    ]
    needed = SIMULATOR_MIN_MEMORY_MIB_PER_WORKER * config.workers
    warnings.extend(
        f"the simulator's GPU {device.gpu.index} ({device.gpu.name},"
        f" {device.memory_total_mib} MiB) has under 1 GiB for each of {config.workers} worker(s)"
        for device in simulator
        if device.memory_total_mib < needed
    )
    return warnings


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


def _service_plan(
    config: Config,
    stack_service: StackService,
    trainer: tuple[Assignment, ...],
    simulator: tuple[Assignment, ...],
) -> ServicePlan:
    name, role = stack_service.name, stack_service.role
    devices: tuple[Assignment, ...] = ()
    capabilities: tuple[str, ...] = ()
    note = None
    if role is Role.TRAINER:
        devices, capabilities = trainer, TRAINER_CAPABILITIES
    elif role is Role.SIMULATOR:
        devices = simulator
        capabilities = SIMULATOR_CAPABILITIES + (("display",) if config.host_x else ())
    elif role is Role.TRAINER_LAUNCHER:
        devices = trainer
        note = (
            "starts the trainer through SageMaker local mode and forwards its"
            " CUDA_VISIBLE_DEVICES; rl_coach itself gets no GPU"
        )
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
    gets_request = bool(devices) and role is not Role.TRAINER_LAUNCHER
    reset_keys = []
    if not gets_request and stack_service.has_device_requests:
        reset_keys.append("deploy.resources.reservations.devices")
    if stack_service.has_gpus_key:
        reset_keys.append("gpus")
    return ServicePlan(
        name=name,
        role=role,
        devices=devices,
        capabilities=capabilities if gets_request else (),
        environment=tuple(environment.items()),
        labels=(
            ("drgpu.gpus", uuids if gets_request else ""),
            ("drgpu.role", role.value),
            ("drgpu.run_id", config.run_id),
        ),
        reset_keys=tuple(reset_keys),
        note=note,
    )
