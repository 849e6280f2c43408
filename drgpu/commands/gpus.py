"""`drgpu gpus`: this host's GPUs from NVML, and which drgpu run holds each (from the engine)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from drgpu.core.facts import ContainerFacts
from drgpu.core.gpu_usage import holders_by_gpu
from drgpu.errors import DockerError
from drgpu.host import engine, nvml, process
from drgpu.host.cuda import default_order
from drgpu.ui.talk import warn

if TYPE_CHECKING:
    from drgpu.core.gpu_usage import Holder
    from drgpu.core.model import Inventory


@dataclass(frozen=True)
class GpusResult:
    """This host's GPUs and each GPU index's holders (None: the engine could not be asked)."""

    inventory: Inventory
    holders: dict[int, tuple[Holder, ...]] | None


def gpus() -> GpusResult:
    """Read NVML and, meanwhile, the engine (holders None, with a warning, when it fails)."""
    found: list[list[ContainerFacts] | DockerError] = []

    def ask_engine() -> None:
        try:
            found.append(engine.drgpu_containers())
        except DockerError as exc:
            found.append(exc)

    with process.meanwhile(ask_engine):  # NVML failing is said at once, not after the engine
        inventory = nvml.read_inventory()
        if inventory.gpus:
            inventory = replace(inventory, cuda_order=default_order(inventory))
    if isinstance(found[0], DockerError):
        warn(f"{found[0].message.splitlines()[0]}; not showing which run holds each GPU")
        return GpusResult(inventory, None)
    return GpusResult(inventory, holders_by_gpu(inventory, found[0]))
