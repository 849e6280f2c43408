"""Placement: `auto`, simulator workers (spread and pack), and what other runs hold."""

from __future__ import annotations

from dataclasses import replace

import pytest

from drgpu.core.model import Assignment, Claim, Gpu, GpuProcess, Inventory, MigDevice
from drgpu.core.modes import WorkerPlacement
from drgpu.core.placement import (
    busy_gpus,
    choose_simulators,
    choose_trainer,
    locate,
    overlaps,
    place_workers,
)


def gpu(
    index: int,
    memory: int,
    cc: tuple[int, int] = (8, 0),
    *,
    used: int = 0,
    processes: int = 0,
    mig: bool = False,
    lost: bool = False,
) -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-{index}",
        name=f"Card {index}",
        pci_bus_id=f"00000000:0{index}:00.0",
        memory_total_mib=memory,
        memory_used_mib=used,
        compute_capability=cc,
        mig_mode=mig,
        mig_devices=(MigDevice(f"MIG-{index}a", memory // 2),) if mig else (),
        processes=tuple(GpuProcess(pid=100 + n, used_memory_mib=10) for n in range(processes)),
        error="gpu_is_lost" if lost else None,
    )


def machine(*gpus: Gpu) -> Inventory:
    return Inventory(gpus=gpus)


def indices(devices: tuple[Assignment, ...] | list[Assignment]) -> list[int]:
    return [device.gpu.index for device in devices]


# --- what is busy ----------------------------------------------------------------------------


def test_gpus_held_by_other_runs_are_busy_and_name_the_runs() -> None:
    inventory = machine(gpu(0, 8000), gpu(1, 8000), gpu(2, 8000))
    claims = [
        Claim("a", "sagemaker", ("GPU-0",)),
        Claim("b", "robomaker", ("GPU-0", "GPU-1")),
        Claim("mine", "sagemaker", ("GPU-2",)),
    ]
    assert busy_gpus(inventory, claims, "mine") == {
        "GPU-0": "held by run 'a', 'b'",
        "GPU-1": "held by run 'b'",
    }


def test_foreign_processes_make_a_gpu_busy_unless_this_run_holds_it() -> None:
    inventory = machine(gpu(0, 8000, processes=2), gpu(1, 8000, processes=1))
    claims = [Claim("mine", "sagemaker", ("GPU-1",))]
    assert busy_gpus(inventory, claims, "mine") == {"GPU-0": "2 foreign process(es)"}


def test_a_gpu_whose_processes_cannot_be_listed_is_never_taken_for_free() -> None:
    unlisted = replace(gpu(0, 8000), processes_unknown="compute processes: Not Supported")
    inventory = machine(unlisted, gpu(1, 8000))
    assert busy_gpus(inventory, [], "mine") == {
        "GPU-0": "its processes cannot be listed (compute processes: Not Supported)"
    }
    assert busy_gpus(inventory, [Claim("mine", "sagemaker", ("GPU-0",))], "mine") == {}


def test_a_claimed_mig_slice_makes_its_gpu_busy_and_unknown_uuids_are_ignored() -> None:
    inventory = machine(gpu(0, 40000, mig=True))
    claims = [Claim("a", "sagemaker", ("MIG-0a", "GPU-gone"))]
    assert busy_gpus(inventory, claims, "mine") == {"GPU-0": "held by run 'a'"}


def test_locate_and_overlaps_treat_a_whole_gpu_as_covering_its_slices() -> None:
    a100 = gpu(0, 40000, mig=True)
    inventory = machine(a100, gpu(1, 8000))
    whole, slice_, other = (
        locate("GPU-0", inventory),
        locate("MIG-0a", inventory),
        locate("GPU-1", inventory),
    )
    assert whole is not None and slice_ is not None and other is not None
    assert slice_.mig is not None and slice_.gpu == a100
    assert overlaps(whole, slice_) and overlaps(slice_, whole) and overlaps(slice_, slice_)
    assert not overlaps(whole, other)
    assert locate("GPU-9", inventory) is None


# --- auto for the trainer --------------------------------------------------------------------


def test_trainer_gets_the_gpu_with_the_most_memory() -> None:
    inventory = machine(gpu(0, 4096), gpu(1, 24576, (5, 2)), gpu(2, 16384, (8, 9)))
    choice = choose_trainer(inventory, {}, set(), may_share=False)
    assert indices(choice.devices) == [1]
    assert choice.problem is None
    assert choice.reason == "the free GPU with the most memory (24576 MiB, compute 5.2)"


def test_equal_memory_goes_to_the_higher_compute_capability_then_the_lower_index() -> None:
    inventory = machine(gpu(0, 16384, (7, 5)), gpu(1, 16384, (8, 6)), gpu(2, 16384, (8, 6)))
    assert indices(choose_trainer(inventory, {}, set(), may_share=False).devices) == [1]


def test_trainer_passes_over_busy_lost_and_mig_gpus_and_says_so() -> None:
    inventory = machine(
        gpu(0, 80000, mig=True), gpu(1, 48000), gpu(2, 40000, lost=True), gpu(3, 8000)
    )
    choice = choose_trainer(inventory, {"GPU-1": "held by run 'b'"}, set(), may_share=False)
    assert indices(choice.devices) == [3]
    assert choice.reason.endswith(
        "; passed over GPU 0 (in MIG mode: auto takes whole GPUs only),"
        " GPU 1 (held by run 'b'), GPU 2 (lost)"
    )


def test_trainer_avoids_the_simulators_gpus() -> None:
    inventory = machine(gpu(0, 24000), gpu(1, 8000))
    assert indices(choose_trainer(inventory, {}, {"GPU-0"}, may_share=False).devices) == [1]


def test_trainer_shares_a_simulator_gpu_only_when_sharing_and_nothing_else_is_free() -> None:
    inventory = machine(gpu(0, 24000))
    refused = choose_trainer(inventory, {}, {"GPU-0"}, may_share=False)
    assert refused.devices == ()
    assert refused.problem == "auto found no free GPU for the trainer: GPU 0 (the other role's)"
    shared = choose_trainer(inventory, {}, {"GPU-0"}, may_share=True)
    assert indices(shared.devices) == [0]
    assert "shared with the simulator" in shared.reason


def test_no_free_gpu_for_the_trainer_lists_why_for_each() -> None:
    inventory = machine(gpu(0, 8000, processes=1), gpu(1, 8000))
    busy = {"GPU-0": "1 foreign process(es)", "GPU-1": "held by run 'x'"}
    choice = choose_trainer(inventory, busy, set(), may_share=True)
    assert choice.problem == (
        "auto found no free GPU for the trainer: GPU 0 (1 foreign process(es)),"
        " GPU 1 (held by run 'x')"
    )


def test_auto_on_a_machine_without_gpus() -> None:
    choice = choose_trainer(machine(), {}, set(), may_share=False)
    assert choice.problem == "auto found no GPU for the trainer: this machine has none"


# --- auto for the simulators -----------------------------------------------------------------


def test_simulators_get_the_free_rest_the_most_memory_first() -> None:
    inventory = machine(gpu(0, 4096), gpu(1, 24000), gpu(2, 16000), gpu(3, 8000, processes=1))
    trainer = (Assignment(inventory.gpus[1]),)
    choice = choose_simulators(inventory, {"GPU-3": "1 foreign process(es)"}, trainer, False)
    assert indices(choice.devices) == [2, 0]
    assert choice.reason.endswith("passed over GPU 3 (1 foreign process(es))")


def test_simulators_share_the_trainers_gpu_only_when_sharing() -> None:
    inventory = machine(gpu(0, 24000))
    trainer = (Assignment(inventory.gpus[0]),)
    assert choose_simulators(inventory, {}, trainer, may_share=False).problem == (
        "auto found no free GPU for the simulators: GPU 0 (the other role's)"
    )
    shared = choose_simulators(inventory, {}, trainer, may_share=True)
    assert indices(shared.devices) == [0]
    assert "share the trainer's" in shared.reason


# --- workers ---------------------------------------------------------------------------------


def test_spread_deals_workers_round_robin() -> None:
    devices = [Assignment(gpu(1, 8000)), Assignment(gpu(2, 8000))]
    placed = place_workers(devices, 3, WorkerPlacement.SPREAD, {})
    assert indices([device for device, _ in placed]) == [1, 2, 1]
    assert placed[1][1] == "spread: worker 2 of 3, round-robin over GPUs 1, 2"


def test_pack_fills_the_gpu_with_the_most_free_memory_first() -> None:
    small, big = Assignment(gpu(0, 4096, used=2048)), Assignment(gpu(1, 3072))
    placed = place_workers([small, big], 5, WorkerPlacement.PACK, {})
    # free: small 2048 MiB, big 3072 MiB: three workers fit on big, then small.
    assert indices([device for device, _ in placed]) == [1, 1, 1, 0, 0]
    assert placed[0][1].startswith("pack: 3072 MiB free before this worker")


def test_pack_counts_memory_the_trainer_will_take() -> None:
    shared, spare = Assignment(gpu(0, 16384)), Assignment(gpu(1, 10240))
    placed = place_workers([shared, spare], 2, WorkerPlacement.PACK, {"GPU-0": 8192})
    assert indices([device for device, _ in placed]) == [1, 1]


def test_pack_with_no_room_left_puts_workers_where_most_is_left() -> None:
    devices = [Assignment(gpu(0, 1024)), Assignment(gpu(1, 1536))]
    placed = place_workers(devices, 3, WorkerPlacement.PACK, {})
    assert indices([device for device, _ in placed]) == [1, 0, 1]


@pytest.mark.parametrize("mode", list(WorkerPlacement))
def test_no_devices_place_no_workers(mode: WorkerPlacement) -> None:
    assert place_workers([], 3, mode, {}) == []
