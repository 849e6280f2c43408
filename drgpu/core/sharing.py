"""GPU sharing (DRGPU_SHARING, docs/sharing.md): what `timeslice` and `mps` add to a plan
(`exclusive` adds nothing: overlaps were refused while planning)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from drgpu.core.compose_stack import MPS_DAEMON_SERVICE, Stack
from drgpu.core.labels import run_labels
from drgpu.core.model import Assignment, Role, ServicePlan
from drgpu.core.modes import Sharing
from drgpu.core.placement import short
from drgpu.core.settings import MPS_KEYS, Config

GPU_CAPABILITIES = ("gpu", "compute", "utility")  # a GPU service's; a simulator adds graphics
TIMESLICE_ENVIRONMENT = (
    ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
)
MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
MPS_LOG_DIRECTORY = "/tmp/nvidia-log"
MPS_PIPE_VOLUME = "drgpu-mps-pipe"
MPS_LOG_VOLUME = "drgpu-mps-log"
MPS_VOLUMES = (f"{MPS_PIPE_VOLUME}:{MPS_PIPE_DIRECTORY}", f"{MPS_LOG_VOLUME}:{MPS_LOG_DIRECTORY}")
MPS_COMMAND = (
    "sh",
    "-c",
    f"nvidia-cuda-mps-control -d && exec tail -F {MPS_LOG_DIRECTORY}/control.log",
)
MPS_ENVIRONMENT = (
    ("CUDA_MPS_PIPE_DIRECTORY", MPS_PIPE_DIRECTORY),
    ("CUDA_MPS_LOG_DIRECTORY", MPS_LOG_DIRECTORY),
)


@dataclass(frozen=True)
class Shared:
    """The services with their sharing settings, and what was found on the way."""

    services: tuple[ServicePlan, ...]
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    explanations: tuple[str, ...] = ()
    tmpfs_volumes: tuple[str, ...] = ()


def apply_sharing(config: Config, stack: Stack, services: Sequence[ServicePlan]) -> Shared:
    """The plan's services as DRGPU_SHARING wants them."""
    warnings = [
        f"{config.where(key)} is set, but DRGPU_SHARING={config.sharing}: it applies to mps only"
        for key in MPS_KEYS
        if config.values.get(key) and config.sharing != Sharing.MPS
    ]
    own_daemon = stack.service(MPS_DAEMON_SERVICE)
    if config.sharing == Sharing.MPS:
        shared = _mps(config, own_daemon.keys if own_daemon else frozenset(), tuple(services))
        if shared is not None:
            return shared
        warnings.append("DRGPU_SHARING=mps, but no GPU is shared: no MPS daemon is started")
    if config.sharing == Sharing.TIMESLICE:
        services = tuple(
            replace(s, environment=s.environment + TIMESLICE_ENVIRONMENT) if s.has_gpu else s
            for s in services
        )
    if own_daemon is not None:
        services = (*services, _idle_daemon(config, own_daemon.has_device_requests))
    return Shared(tuple(services), warnings=tuple(warnings))


def users(services: Iterable[ServicePlan]) -> dict[str, tuple[Assignment, list[ServicePlan]]]:
    """Each device (by UUID) with the services planned on it."""
    found: dict[str, tuple[Assignment, list[ServicePlan]]] = {}
    for service in services:
        for device in service.devices:
            found.setdefault(device.uuid, (device, []))[1].append(service)
    return found


def _mps(
    config: Config, own_keys: frozenset[str], services: tuple[ServicePlan, ...]
) -> Shared | None:
    """MPS for the GPUs two or more services share; None when no GPU is shared.
    `own_keys`: what the stack's own drgpu-mps service sets."""
    shared = {uuid: entry for uuid, entry in users(services).items() if len(entry[1]) > 1}
    clients = [
        s for s in services if s.has_gpu and any(device.uuid in shared for device in s.devices)
    ]
    if not clients:
        return None
    problems = [
        f"{client.name} gets MIG device {device.uuid}: drgpu does not run MPS on MIG devices"
        for client in clients
        for device in client.devices
        if device.mig is not None
    ]
    warnings = [
        f"{short(device)} is shared through MPS, but the trainer that {launcher.name} starts"
        " runs outside Compose and does not join MPS"
        for device, sharers in shared.values()
        for launcher in sharers
        if launcher.role is Role.TRAINER_LAUNCHER
    ]
    warnings.extend(_limit_warnings(config, shared))
    devices = tuple(sorted((d for d, _ in users(clients).values()), key=lambda d: d.gpu.index))
    names = {client.name for client in clients}
    explanation = (
        f"{MPS_DAEMON_SERVICE}: MPS control daemon for"
        f" {', '.join(short(device) for device in devices)}; its clients"
        f" ({', '.join(sorted(names))}) share its IPC namespace and pipe directory"
    )
    return Shared(
        services=(
            *(_as_client(config, s) if s.name in names else s for s in services),
            _daemon(config, devices, own_keys),
        ),
        problems=tuple(problems),
        warnings=tuple(warnings),
        explanations=(explanation,),
        tmpfs_volumes=(MPS_PIPE_VOLUME, MPS_LOG_VOLUME),
    )


def _daemon(
    config: Config, devices: tuple[Assignment, ...], own_keys: frozenset[str]
) -> ServicePlan:
    """The MPS control daemon; what the stack's own drgpu-mps sets is kept."""
    uuids = ",".join(device.uuid for device in devices)
    return ServicePlan(
        name=MPS_DAEMON_SERVICE,
        role=Role.MPS_DAEMON,
        devices=devices,
        capabilities=GPU_CAPABILITIES,
        environment=(
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            ("CUDA_VISIBLE_DEVICES", uuids),
            ("NVIDIA_VISIBLE_DEVICES", uuids),
            *MPS_ENVIRONMENT,
        ),
        labels=run_labels(config.run_key, config.sharing, Role.MPS_DAEMON, uuids),
        note="the MPS control daemon of the shared GPUs",
        image=None if {"image", "build"} & own_keys else config.mps_image,
        command=() if {"command", "entrypoint"} & own_keys else MPS_COMMAND,
        init="init" not in own_keys,
        network_mode=None if "network_mode" in own_keys else "none",
        ipc="shareable",
        volumes=MPS_VOLUMES,
    )


def _as_client(config: Config, service: ServicePlan) -> ServicePlan:
    threads, memory = _limits(config, service.role)
    environment = list(MPS_ENVIRONMENT)
    if threads is not None:
        environment.append(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(threads)))
    if memory is not None:
        limit = ",".join(f"{device.uuid}={mps_memory(memory)}" for device in service.devices)
        environment.append(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", limit))
    return replace(
        service,
        environment=service.environment + tuple(environment),
        ipc=f"service:{MPS_DAEMON_SERVICE}",
        depends_on=(MPS_DAEMON_SERVICE,),
        volumes=MPS_VOLUMES,
    )


def mps_memory(mib: int) -> str:
    """MPS's spelling of a memory limit: `2G`, or `1536M` when not whole gibibytes."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def _limits(config: Config, role: Role) -> tuple[int | None, int | None]:
    if role is Role.TRAINER:
        return config.mps_sagemaker_threads, config.mps_sagemaker_memory
    if role is Role.SIMULATOR:
        return config.mps_robomaker_threads, config.mps_robomaker_memory
    return None, None


def _limit_warnings(
    config: Config, shared: dict[str, tuple[Assignment, list[ServicePlan]]]
) -> list[str]:
    warnings = []
    for device, sharers in shared.values():
        threads = [(s.name, t) for s in sharers if (t := _limits(config, s.role)[0]) is not None]
        if sum(t for _, t in threads) > 100:
            parts = ", ".join(f"{name} {t}%" for name, t in threads)
            warnings.append(
                f"MPS thread percentages on {short(device)} add up to"
                f" {sum(t for _, t in threads)}% ({parts}): its clients will contend for SMs"
            )
        memory = [m for s in sharers if (m := _limits(config, s.role)[1]) is not None]
        if sum(memory) > device.memory_total_mib:
            warnings.append(
                f"MPS memory limits on {short(device)} add up to {sum(memory)} MiB,"
                f" more than its {device.memory_total_mib} MiB"
            )
    return warnings


def _idle_daemon(config: Config, has_device_requests: bool) -> ServicePlan:
    """The stack's own drgpu-mps service when no GPU is shared through MPS: no GPU."""
    return ServicePlan(
        name=MPS_DAEMON_SERVICE,
        role=Role.MPS_DAEMON,
        devices=(),
        capabilities=(),
        environment=(("NVIDIA_VISIBLE_DEVICES", "void"),),
        labels=run_labels(config.run_key, config.sharing, Role.MPS_DAEMON, ""),
        reset_keys=("deploy.resources.reservations.devices",) if has_device_requests else (),
        note="no GPU is shared through MPS",
    )
