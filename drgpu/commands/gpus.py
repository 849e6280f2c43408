"""`drgpu gpus`: this host's GPUs from NVML, and which drgpu run holds each (from the engine)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from drgpu.commands.options import resolved
from drgpu.core.facts import ContainerFacts
from drgpu.core.gpu_usage import holders_by_gpu
from drgpu.core.inputs import InputOptions
from drgpu.core.modes import IndexOrder
from drgpu.errors import ConfigError, DockerError
from drgpu.host import engine, nvml, process
from drgpu.host.cuda import default_order
from drgpu.host.files import exists, read_settings
from drgpu.ui.talk import warn

if TYPE_CHECKING:
    from drgpu.core.gpu_usage import Holder
    from drgpu.core.model import Inventory


@dataclass(frozen=True)
class GpusResult:
    """This host's GPUs, each GPU index's holders (None: the engine could not be asked), and
    what a bare index means in the settings here (None: no settings read)."""

    inventory: Inventory
    holders: dict[int, tuple[Holder, ...]] | None
    index_order: IndexOrder | None = None


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
    order = _index_order()
    if isinstance(found[0], DockerError):
        warn(f"{found[0].message.splitlines()[0]}; not showing which run holds each GPU")
        return GpusResult(inventory, None, order)
    return GpusResult(inventory, holders_by_gpu(inventory, found[0]), order)


def _index_order() -> IndexOrder | None:
    """DRGPU_INDEX_ORDER of the settings other commands read here; None where there are
    none, or they cannot be read (`plan` says why)."""
    target = resolved(InputOptions(needs_files=False))
    try:
        return read_settings(target).index_order if exists(target.env_file, file=True) else None
    except ConfigError:
        return None
