"""What a bare GPU index means: nvidia-smi's PCI bus order (the default), or CUDA's default
order, fastest first (DRfC's "CUDA number": DRGPU_INDEX_ORDER=cuda); docs/settings.md.
CUDA's order comes from the CUDA driver (`drgpu.host.cuda`) or an inventory file's
`cuda_order`, else drgpu guesses it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from drgpu.core.devices import DeviceRequest, Selector, SelectorKind
from drgpu.core.model import Gpu, Inventory
from drgpu.core.modes import IndexOrder
from drgpu.core.topology import inventory_to_json
from drgpu.errors import ConfigError


@dataclass(frozen=True)
class CudaOrder:
    """The NVML index of each CUDA ordinal (CUDA's default order), and whether the CUDA
    driver (or an inventory file) said so, rather than drgpu's guess."""

    indices: tuple[int, ...]
    known: bool

    @property
    def reorders(self) -> bool:
        """Whether CUDA ranks the GPUs otherwise than nvidia-smi (not merely around a lost one)."""
        return self.indices != tuple(sorted(self.indices))


def cuda_order(inventory: Inventory) -> CudaOrder:
    """CUDA's default order on the machine of `inventory`: as recorded, else guessed as
    CUDA ranks, fastest first: highest compute capability first, ties in PCI bus order;
    lost GPUs left out, a GPU in MIG mode once per MIG device."""
    if inventory.cuda_order is not None:
        return CudaOrder(inventory.cuda_order, known=True)
    usable = [gpu for gpu in inventory.gpus if not gpu.lost]
    ranked = sorted(usable, key=lambda gpu: gpu.compute_capability, reverse=True)  # (stable)
    guessed = tuple(
        gpu.index
        for gpu in ranked
        for _ in (gpu.mig_devices if gpu.mig_mode and gpu.mig_devices else (None,))
    )
    return CudaOrder(guessed, known=False)


def order_from_cuda_devices(
    inventory: Inventory, devices: Sequence[dict[str, Any]]
) -> tuple[int, ...] | None:
    """NVML indices of the probe's CUDA devices in CUDA's order, matched as the probe matches
    them (`drgpu.probe.map_cuda_to_nvml`); None when one of them matches no GPU."""
    from drgpu.probe import map_cuda_to_nvml  # lazy: the probe is large; only CUDA's order

    map_cuda_to_nvml(inventory_to_json(inventory)["gpus"], devices)  # the probe's NVML keys
    indices = tuple(device["nvml_index"] for device in devices)
    return None if None in indices else indices


def bare_indices(request: DeviceRequest) -> tuple[Selector, ...]:
    """The selectors of a device value that are bare indices."""
    return tuple(s for s in request.selectors if s.kind is SelectorKind.INDEX)


def in_cuda_order(request: DeviceRequest, order: CudaOrder) -> tuple[DeviceRequest, list[str]]:
    """The request with each bare index read as a CUDA ordinal (turned into the NVML index
    of that GPU), and what could not be read: an ordinal CUDA does not have."""
    selectors: list[Selector] = []
    problems: list[str] = []
    for selector in request.selectors:
        if selector.kind is not SelectorKind.INDEX:
            selectors.append(selector)
        elif selector.index >= len(order.indices):
            problems.append(
                f"{selector.text!r}: CUDA has no device {selector.index} here"
                f" (DRGPU_INDEX_ORDER=cuda; CUDA devices 0 to {len(order.indices) - 1})"
            )
        else:
            index = order.indices[selector.index]
            selectors.append(Selector(SelectorKind.INDEX, str(index), f"index:{index}"))
    return replace(request, selectors=tuple(selectors)), problems


def index_notes(
    requests: Sequence[tuple[str, DeviceRequest]],
    inventory: Inventory,
    order: CudaOrder,
    index_order: IndexOrder,
    *,
    chosen: bool = False,
    refuse: bool = False,
    drfc: bool = False,
) -> tuple[str | None, str | None]:
    """(a warning, an explanation) when bare indices of device values (key, request) name
    other GPUs in CUDA's order than in nvidia-smi's: an explanation where read in the CUDA
    order the driver reported or in nvidia-smi's `chosen` (DRGPU_INDEX_ORDER=pci written);
    a warning where read in a guessed CUDA order or by default, or with `refuse` (CUDA's
    order known) a ConfigError whose hint is the fix (DRfC's meaning first where `drfc`)."""
    meanings = [
        meaning
        for key, request in requests
        for selector in bare_indices(request)
        if (meaning := _meaning(key, selector.index, inventory, order)) is not None
    ]
    if not meanings:
        return None, None
    guessed = "" if order.known else " (guessed: the CUDA driver's own is not known)"
    differs = f"CUDA's order{guessed} differs from nvidia-smi's here: {'; '.join(meanings)}"
    if index_order == IndexOrder.CUDA and order.known:
        return None, f"bare indices read in CUDA's order (DRGPU_INDEX_ORDER=cuda): {differs}"
    if index_order == IndexOrder.CUDA:
        return f"{differs}; read in that guessed order (DRGPU_INDEX_ORDER=cuda)", None
    if chosen:
        return None, f"bare indices read in nvidia-smi's order (DRGPU_INDEX_ORDER=pci): {differs}"
    if refuse and order.known:
        cuda, pci = "cuda (DRfC's 'CUDA number')", "pci (nvidia-smi's)"
        first, second = (cuda, pci) if drfc else (pci, cuda)
        raise ConfigError(
            f"which GPU order do bare indices use? {differs}",
            hint=f"write DRGPU_INDEX_ORDER={first} or ={second} in system.env; a GPU UUID means"
            " one GPU in every order",
        )
    return (
        f"{differs}; drgpu reads nvidia-smi's (DRGPU_INDEX_ORDER=cuda: CUDA's, DRfC's"
        " 'CUDA number'; DRGPU_INDEX_ORDER=pci: nvidia-smi's, without this warning);"
        " a GPU UUID means one GPU in every order"
    ), None


def _meaning(key: str, number: int, inventory: Inventory, order: CudaOrder) -> str | None:
    """`KEY=N: nvidia-smi's GPU N is the X (CUDA's M), CUDA's GPU N the Y (nvidia-smi's K)`,
    or None when both orders give the same GPU."""
    by_index = {gpu.index: gpu for gpu in inventory.gpus}
    smi = by_index.get(number)
    cuda = by_index.get(order.indices[number]) if number < len(order.indices) else None
    if smi is cuda:
        return None
    if smi is None:
        in_smi = f"nvidia-smi has no GPU {number}"
    else:
        again = ",".join(map(str, ordinals(order).get(smi.index, ()))) or "none: CUDA cannot use it"
        in_smi = f"nvidia-smi's GPU {number} is {_named(smi)} (CUDA's {again})"
    if cuda is None:
        in_cuda = f"CUDA has no GPU {number}"
    else:
        in_cuda = f"CUDA's GPU {number} {_named(cuda)} (nvidia-smi's {cuda.index})"
    return f"{key}={number}: {in_smi}, {in_cuda}"


def _named(gpu: Gpu) -> str:
    lost = f"a lost GPU ({gpu.pci_bus_id or 'bus id unknown'})"
    return lost if gpu.lost else f"the {gpu.name}"


def ordinals(order: CudaOrder) -> dict[int, tuple[int, ...]]:
    """The CUDA ordinal(s) of each NVML index (a GPU in MIG mode has one per MIG device)."""
    found: dict[int, tuple[int, ...]] = {}
    for ordinal, index in enumerate(order.indices):
        found[index] = (*found.get(index, ()), ordinal)
    return found
