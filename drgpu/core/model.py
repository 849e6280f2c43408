"""The facts drgpu reasons about: GPUs, inventories and plans, as frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from drgpu.core.findings import Finding
from drgpu.core.modes import DeviceDriver, IndexOrder, Sharing

HEADER_MARK = "# Written by drgpu"  # the first line of every file drgpu writes


@dataclass(frozen=True)
class MigDevice:
    """A MIG slice of a GPU."""

    uuid: str
    memory_total_mib: int


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML reports on a GPU (host PID); kind as nvidia-smi: C, G or C+G."""

    pid: int
    used_memory_mib: int
    kind: str = "C"


@dataclass(frozen=True)
class Gpu:
    """One physical GPU, as NVML (or an inventory file) describes it."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_mib: int
    memory_used_mib: int = 0
    compute_capability: tuple[int, int] = (0, 0)
    utilization_gpu_percent: int | None = None
    temperature_c: int | None = None  # None where NVML cannot tell
    power_w: float | None = None
    mig_mode: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    error: str | None = None
    processes_unknown: str | None = None  # why NVML could not list its processes

    @property
    def lost(self) -> bool:
        """Whether NVML reported this GPU as lost (or otherwise unusable)."""
        return self.error is not None


@dataclass(frozen=True)
class Inventory:
    """Every GPU of one machine, in NVML index (PCI bus) order."""

    gpus: tuple[Gpu, ...]
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    init_error: str | None = None
    cuda_order: tuple[int, ...] | None = None  # NVML index of each CUDA ordinal, when known


class Role(str, Enum):
    """What a compose service is to drgpu."""

    TRAINER = "trainer"
    SIMULATOR = "simulator"
    TRAINER_LAUNCHER = "trainer-launcher"
    MPS_DAEMON = "mps-daemon"
    OTHER = "other"


@dataclass(frozen=True)
class Claim:
    """GPUs a container of some run holds, as its `drgpu.*` labels say."""

    run_id: str
    service: str
    uuids: tuple[str, ...]
    sharing: str = "exclusive"


@dataclass(frozen=True)
class Assignment:
    """A device a service gets: a whole GPU, or one MIG slice of it."""

    gpu: Gpu
    mig: MigDevice | None = None

    @property
    def uuid(self) -> str:
        """The UUID to render: the MIG device's when there is one."""
        return self.mig.uuid if self.mig else self.gpu.uuid

    @property
    def memory_total_mib(self) -> int:
        """The memory this assignment offers."""
        return self.mig.memory_total_mib if self.mig else self.gpu.memory_total_mib


@dataclass(frozen=True)
class ServicePlan:
    """What one compose service gets."""

    name: str
    role: Role
    devices: tuple[Assignment, ...]
    capabilities: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    reset_keys: tuple[str, ...] = ()
    note: str | None = None
    replicas: int | None = None
    extends: str | None = None  # the service this one copies (compose's `extends`),
    extends_files: tuple[str, ...] = ()  # from each file defining it, one after another
    image: str | None = None
    command: tuple[str, ...] = ()
    init: bool = False
    network_mode: str | None = None
    ipc: str | None = None
    depends_on: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    placeholder: bool = False

    @property
    def has_gpu(self) -> bool:
        """Whether the container itself gets GPUs through a device request."""
        return bool(self.devices) and self.role is not Role.TRAINER_LAUNCHER

    @property
    def disabled(self) -> bool:
        """Whether the service is kept from starting (replaced by simulator workers)."""
        return self.replicas == 0


@dataclass(frozen=True)
class Plan:
    """The whole assignment for one stack, ready to render."""

    project: str
    run_id: str
    services: tuple[ServicePlan, ...]
    warnings: tuple[Finding, ...] = ()
    explanations: tuple[str, ...] = ()
    sharing: Sharing = Sharing.EXCLUSIVE
    tmpfs_volumes: tuple[str, ...] = ()
    index_note: str = ""  # what a bare GPU index means in this plan
    index_order: IndexOrder = IndexOrder.PCI
    device_driver: DeviceDriver = DeviceDriver.NVIDIA  # nvidia or cdi (never auto)

    def service(self, name: str) -> ServicePlan:
        """The plan of the service called `name` (a KeyError if none is)."""
        return {service.name: service for service in self.services}[name]


@dataclass(frozen=True)
class GpuHealth:
    """What NVML tells of one GPU's health and counters; None where it cannot."""

    index: int
    uuid: str
    energy_mj: int | None = None  # total energy since the driver loaded
    throttle: int | None = None  # nvmlClocksEventReason* bits now
    retired_pending: bool | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    ecc_uncorrected: int | None = None  # volatile: since the driver loaded
    persistence: bool | None = None


@dataclass(frozen=True)
class GpuEvent:
    """One NVML event a watch received."""

    index: int
    uuid: str
    type: int  # XID_EVENT or ECC_EVENT
    xid: int
    time: float  # seconds since the epoch
