"""The modes a setting chooses among, as enums: each member is its text (`str(Sharing.MPS) ==
"mps"`, and `json.dumps` writes it); YAML's safe dumper needs `.value`."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar


class StrEnum(str, Enum):
    """An enum whose members are their own text (`enum.StrEnum` is Python 3.11+)."""

    def __str__(self) -> str:
        return str(self.value)


Mode = TypeVar("Mode", bound=StrEnum)


class DockerStyle(StrEnum):
    """DR_DOCKER_STYLE: where DeepRacer-for-cloud runs the stack."""

    COMPOSE = "compose"
    SWARM = "swarm"


class Sharing(StrEnum):
    """DRGPU_SHARING: how services may share a GPU (`drgpu.core.sharing`)."""

    EXCLUSIVE = "exclusive"
    TIMESLICE = "timeslice"
    MPS = "mps"


class WorkerPlacement(StrEnum):
    """DRGPU_WORKER_PLACEMENT: how simulator workers get GPUs (`drgpu.core.placement`)."""

    SPREAD = "spread"
    PACK = "pack"


class IndexOrder(StrEnum):
    """DRGPU_INDEX_ORDER: what a bare GPU index means (`drgpu.core.index_order`)."""

    PCI = "pci"
    CUDA = "cuda"

    @property
    def whose(self) -> str:
        """Whose bare indices these are, for a sentence."""
        if self is IndexOrder.PCI:
            return "nvidia-smi's (PCI bus order)"
        return "CUDA's (its default order, fastest first: DRGPU_INDEX_ORDER=cuda)"


class SwarmGpus(StrEnum):
    """DRGPU_SWARM_GPUS: how Swarm tasks get their GPUs (`drgpu.core.swarm_node`)."""

    AUTO = "auto"
    PIN = "pin"
    GENERIC = "generic"


class DeviceDriver(StrEnum):
    """DRGPU_DEVICE_DRIVER: how a Compose device request names GPUs (`core.device_driver`)."""

    AUTO = "auto"
    NVIDIA = "nvidia"
    CDI = "cdi"


def member(mode: type[Mode], text: str) -> Mode | None:
    """The member of `mode` whose text is `text`; None when none is."""
    return next((each for each in mode if each.value == text), None)


def choices(mode: type[StrEnum]) -> str:
    """The texts of a mode's members, for messages: `pci, cuda`."""
    return ", ".join(each.value for each in mode)
