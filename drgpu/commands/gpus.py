"""`drgpu gpus`: this host's GPUs from NVML, and which drgpu run holds each (from the engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drgpu.core.gpu_usage import Holder
    from drgpu.core.model import Inventory


def read() -> tuple[Inventory, dict[int, tuple[Holder, ...]] | None]:
    """The inventory and, for each GPU index, its holders (None, with a warning, when the
    engine cannot be asked)."""
    import threading

    from drgpu.core.facts import ContainerFacts
    from drgpu.core.gpu_usage import holders_by_gpu
    from drgpu.errors import DockerError
    from drgpu.host import engine
    from drgpu.host.nvml import read_inventory
    from drgpu.ui.talk import warn

    # Ask the engine while NVML starts.
    found: list[list[ContainerFacts] | DockerError] = []

    def ask_engine() -> None:
        try:
            found.append(engine.drgpu_containers())
        except DockerError as exc:
            found.append(exc)

    asking = threading.Thread(target=ask_engine, daemon=True)
    asking.start()
    inventory = read_inventory()
    if inventory.gpus:
        from dataclasses import replace

        from drgpu.host.cuda import default_order

        inventory = replace(inventory, cuda_order=default_order(inventory))
    asking.join()
    holders = None
    if isinstance(found[0], DockerError):
        warn(f"{found[0].message.splitlines()[0]}; not showing which run holds each GPU")
    else:
        holders = holders_by_gpu(inventory, found[0])
    return inventory, holders


def document(inventory: Inventory, holders: dict[int, tuple[Holder, ...]] | None) -> dict[str, Any]:
    """The `drgpu gpus --json` document (`schema_version` 1, as every drgpu document has):
    the inventory (with `cuda_order` when the CUDA driver told it), each GPU with its
    holders and its CUDA ordinals (`cuda_indices`, guessed when `cuda_order_guessed`)."""
    from drgpu.core.gpu_usage import holders_document
    from drgpu.core.index_order import cuda_order, ordinals
    from drgpu.core.topology import inventory_to_json

    result = {"schema_version": 1, **inventory_to_json(inventory)}
    order = cuda_order(inventory)
    cuda_indices = ordinals(order)
    result["cuda_order_guessed"] = not order.known
    for entry, gpu in zip(result["gpus"], inventory.gpus, strict=True):
        entry["cuda_indices"] = list(cuda_indices.get(gpu.index, ()))
        entry["held_by"] = None if holders is None else holders_document(holders.get(gpu.index, ()))
    return result
