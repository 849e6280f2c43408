"""Planning simulator workers (DR_WORKERS) and `auto` devices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from drgpu.core.compose_stack import Stack
from drgpu.core.model import Inventory, Plan, Role
from drgpu.core.planning import make_plan
from drgpu.core.settings import Config
from drgpu.core.topology import inventory_from_json
from drgpu.errors import GpuValidationError
from drgpu.host.files import base_stack_file, load_stack
from tests.plan_warnings import order_free

MakeConfig = Callable[..., Config]
WriteStack = Callable[[str], Stack]

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0, 22912 MiB
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # gtx_m40 index 1, 4096 MiB


def card(bus: int, memory: int, cc: list[int], **extra: object) -> dict[str, object]:
    return {
        "uuid": f"GPU-0000000{bus}-0000-4000-8000-00000000000{bus}",
        "name": f"Card {bus}",
        "pci_bus_id": f"0{bus}:00.0",
        "memory_total_mib": memory,
        "compute_capability": cc,
        **extra,
    }


# index 0: 4 GiB, 1: 24 GiB cc 5.2, 2: 24 GiB cc 8.9, 3: 16 GiB
MIXED = inventory_from_json(
    {
        "gpus": [
            card(1, 4096, [7, 5]),
            card(2, 24576, [5, 2]),
            card(3, 24576, [8, 9]),
            card(4, 16384, [7, 5]),
        ]
    }
)


def uuid(index: int) -> str:
    return MIXED.gpus[index].uuid


@pytest.fixture
def base_stack() -> Stack:
    return load_stack([base_stack_file()])


def gpus_of(plan: Plan) -> dict[str, list[str]]:
    return {s.name: [d.uuid for d in s.devices] for s in plan.services}


def env(plan: Plan, service: str) -> dict[str, str]:
    return dict(plan.service(service).environment)


# --- workers ---------------------------------------------------------------------------------


def test_one_worker_keeps_the_single_robomaker_service(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    plan = make_plan(make_config(DR_ROBOMAKER_CUDA_DEVICES="0,1"), base_stack, gtx_m40)
    assert [s.name for s in plan.services] == ["sagemaker", "robomaker"]
    robomaker = plan.service("robomaker")
    assert [d.uuid for d in robomaker.devices] == [M40, GTX1650]
    assert "DOCKER_REPLICA_SLOT" not in env(plan, "robomaker")
    assert robomaker.extends is None and robomaker.replicas is None


def test_workers_are_copies_of_robomaker_spread_over_the_simulator_gpus(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_ROBOMAKER_CUDA_DEVICES="1,0", DR_WORKERS="3")
    plan = make_plan(config, base_stack, gtx_m40)
    assert gpus_of(plan) == {
        "sagemaker": [],
        "robomaker": [],
        "robomaker-1": [GTX1650],
        "robomaker-2": [M40],
        "robomaker-3": [GTX1650],
    }
    for slot in (1, 2, 3):
        worker = plan.service(f"robomaker-{slot}")
        assert worker.role is Role.SIMULATOR
        assert env(plan, worker.name)["DOCKER_REPLICA_SLOT"] == str(slot)
        assert env(plan, worker.name)["CUDA_VISIBLE_DEVICES"] == worker.devices[0].uuid
        assert (worker.extends, worker.extends_files) == ("robomaker", (str(base_stack_file()),))
        assert worker.replicas == 1
        assert dict(worker.labels)["drgpu.gpus"] == worker.devices[0].uuid


def test_robomaker_itself_is_kept_from_starting_when_workers_replace_it(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    plan = make_plan(make_config(DR_WORKERS="2"), base_stack, gtx_m40)
    robomaker = plan.service("robomaker")
    assert robomaker.disabled and robomaker.replicas == 0
    assert robomaker.note == "not started: robomaker-1 ... robomaker-2 run instead (DR_WORKERS=2)"


def test_the_plan_explains_which_worker_got_which_gpu(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_ROBOMAKER_CUDA_DEVICES="0,1", DR_WORKERS="2")
    plan = make_plan(config, base_stack, gtx_m40)
    assert plan.explanations == (
        "robomaker-1: GPU 0 (Tesla M40 24GB): spread: worker 1 of 2, round-robin over GPUs 0, 1",
        "robomaker-2: GPU 1 (NVIDIA GeForce GTX 1650): spread: worker 2 of 2,"
        " round-robin over GPUs 0, 1",
    )


def test_pack_puts_workers_on_the_gpu_with_the_most_free_memory(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(
        DR_ROBOMAKER_CUDA_DEVICES="1,0", DR_WORKERS="3", DRGPU_WORKER_PLACEMENT="pack"
    )
    plan = make_plan(config, base_stack, gtx_m40)
    assert {name: gpus for name, gpus in gpus_of(plan).items() if "-" in name} == {
        "robomaker-1": [M40],
        "robomaker-2": [M40],
        "robomaker-3": [M40],
    }
    assert plan.explanations[0].startswith("robomaker-1: GPU 0 (Tesla M40 24GB): pack: 22802 MiB")


def test_workers_without_a_simulator_gpu_run_on_the_cpu(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    plan = make_plan(make_config(DR_WORKERS="2"), base_stack, gtx_m40)
    assert env(plan, "robomaker-2") == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "DOCKER_REPLICA_SLOT": "2",
    }
    assert plan.explanations == ()


def test_a_stacks_own_numbered_workers_are_used_as_they_are(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          sagemaker: {image: trainer}
          robomaker-2: {image: sim}
          robomaker-1: {image: sim}
        """
    )
    config = make_config(DR_ROBOMAKER_CUDA_DEVICES="0,1", DR_WORKERS="2")
    plan = make_plan(config, stack, gtx_m40)
    assert gpus_of(plan) == {"sagemaker": [], "robomaker-2": [GTX1650], "robomaker-1": [M40]}
    assert env(plan, "robomaker-2")["DOCKER_REPLICA_SLOT"] == "2"
    assert all(s.extends is None and s.replicas is None for s in plan.services)
    # Both GPUs go to the workers: the trainer, whose key is not set, is on the CPU, said.
    assert [w.split(":")[0] for w in order_free(plan.warnings)] == [
        "DR_SAGEMAKER_CUDA_DEVICES is not set and no GPU is free for the trainer (auto found"
        " no free GPU for the trainer"
    ]


def test_a_worker_count_other_than_the_stacks_own_workers_is_warned(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  robomaker-1: {image: sim}\n  robomaker-2: {image: sim}\n")
    plan = make_plan(make_config(DR_WORKERS="3"), stack, gtx_m40)
    assert [warning.message for warning in plan.warnings] == [
        "DR_WORKERS is 3, but the stack defines 2 simulator worker(s) itself"
        " (robomaker-1, robomaker-2): drgpu places those"
    ]


def test_workers_extend_robomaker_from_every_file_that_defines_it(
    make_config: MakeConfig, tmp_path: Path, gtx_m40: Inventory
) -> None:
    first, second = tmp_path / "a.yml", tmp_path / "b.yml"
    first.write_text("services:\n  robomaker: {image: sim}\n  sagemaker: {image: t}\n")
    second.write_text("services:\n  robomaker: {environment: {A: b}}\n")
    plan = make_plan(make_config(DR_WORKERS="2"), load_stack([first, second]), gtx_m40)
    worker = plan.service("robomaker-2")
    assert (worker.extends, worker.extends_files) == ("robomaker", (str(first), str(second)))


def test_memory_is_judged_per_gpu_by_the_workers_placed_on_it(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_ROBOMAKER_CUDA_DEVICES="1,0", DR_WORKERS="9")
    plan = make_plan(config, base_stack, gtx_m40)
    assert order_free(plan.warnings)[1:] == (
        "the simulator's GPU 1 (NVIDIA GeForce GTX 1650, 4096 MiB) has under 1 GiB"
        " for each of 5 worker(s)",
    )


# --- auto ------------------------------------------------------------------------------------


def test_auto_gives_the_trainer_the_most_memory_then_compute_and_workers_the_rest(
    make_config: MakeConfig, base_stack: Stack
) -> None:
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES="auto", DR_ROBOMAKER_CUDA_DEVICES="auto", DR_WORKERS="3"
    )
    plan = make_plan(config, base_stack, MIXED)
    assert gpus_of(plan) == {
        "sagemaker": [uuid(2)],
        "robomaker": [],
        "robomaker-1": [uuid(1)],
        "robomaker-2": [uuid(3)],
        "robomaker-3": [uuid(0)],
    }
    assert plan.explanations[:2] == (
        "trainer (auto): GPU 2 (Card 3): the free GPU with the most memory"
        " (24576 MiB, compute 8.9)",
        "simulators (auto): GPU 1 (Card 2), GPU 3 (Card 4), GPU 0 (Card 1):"
        " the free GPUs besides the trainer's, the most memory first",
    )


def test_auto_for_one_simulator_takes_one_gpu(make_config: MakeConfig, base_stack: Stack) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="auto", DR_ROBOMAKER_CUDA_DEVICES="auto")
    plan = make_plan(config, base_stack, MIXED)
    assert gpus_of(plan) == {"sagemaker": [uuid(2)], "robomaker": [uuid(1)]}
    assert plan.explanations[-1].startswith("robomaker: GPU 1 (Card 2): spread")


def test_auto_trainer_avoids_a_gpu_named_for_the_simulator(
    make_config: MakeConfig, base_stack: Stack
) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="auto", DR_ROBOMAKER_CUDA_DEVICES="2")
    assert gpus_of(make_plan(config, base_stack, MIXED))["sagemaker"] == [uuid(1)]


def test_auto_simulators_avoid_a_gpu_named_for_the_trainer(
    make_config: MakeConfig, base_stack: Stack
) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="auto")
    assert gpus_of(make_plan(config, base_stack, MIXED))["robomaker"] == [uuid(2)]


def test_auto_avoids_gpus_with_foreign_processes(
    make_config: MakeConfig, base_stack: Stack
) -> None:
    busy = inventory_from_json(
        {
            "gpus": [
                card(1, 8192, [7, 5]),
                card(2, 24576, [8, 9], processes=[{"pid": 4242, "used_memory_mib": 900}]),
            ]
        }
    )
    plan = make_plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="auto"), base_stack, busy)
    assert gpus_of(plan)["sagemaker"] == [busy.gpus[0].uuid]
    assert plan.explanations[0].endswith("passed over GPU 1 (1 foreign process(es))")


def test_auto_with_no_free_gpu_left_for_the_simulators_is_refused_when_exclusive(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="0,1", DR_ROBOMAKER_CUDA_DEVICES="auto")
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40)
    assert [f.message for f in caught.value.findings] == [
        "DR_ROBOMAKER_CUDA_DEVICES: auto found no free GPU for the simulators:"
        " GPU 0 (the other role's), GPU 1 (the other role's)"
    ]


def test_auto_shares_the_trainers_gpu_when_sharing_is_allowed(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES="0",
        DR_ROBOMAKER_CUDA_DEVICES="auto",
        DRGPU_SHARING="timeslice",
    )
    plan = make_plan(config, base_stack, Inventory(gpus=gtx_m40.gpus[:1]))
    assert gpus_of(plan) == {"sagemaker": [M40], "robomaker": [M40]}
    assert "share the trainer's" in plan.explanations[0]


def test_auto_on_a_machine_without_gpus_is_refused(
    make_config: MakeConfig, base_stack: Stack
) -> None:
    with pytest.raises(GpuValidationError) as caught:
        make_plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="auto"), base_stack, Inventory(gpus=()))
    assert [f.message for f in caught.value.findings] == [
        "DR_SAGEMAKER_CUDA_DEVICES: auto found no GPU for the trainer: this machine has none"
    ]


def test_workers_drop_a_container_name_they_would_copy(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  robomaker: {image: sim, container_name: robo, gpus: all}\n")
    plan = make_plan(make_config(DR_WORKERS="2"), stack, gtx_m40)
    assert plan.service("robomaker-1").reset_keys == ("gpus", "container_name")
    assert plan.service("robomaker").reset_keys == ()
