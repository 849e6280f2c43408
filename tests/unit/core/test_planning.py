"""Planning: who gets which GPU, every problem at once, warnings, rl_coach and resets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from drgpu.core.compose_stack import Stack
from drgpu.core.inputs import Inputs
from drgpu.core.model import GpuProcess, Inventory, Plan, Role
from drgpu.core.planning import make_plan
from drgpu.core.settings import Config
from drgpu.errors import ExitCode, GpuValidationError
from drgpu.host.files import base_stack_file, load_stack, read_settings
from tests.plan_warnings import order_free

MakeConfig = Callable[..., Config]
WriteStack = Callable[[str], Stack]

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0, 22912 MiB
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # gtx_m40 index 1, 4096 MiB
A100_MIG_2 = "MIG-a1000000-0000-4000-8000-0000000000a2"  # 9856 MiB
DRFC_TRAINING = Path(__file__).resolve().parents[2] / "golden" / "stacks" / "drfc-training.yml"


@pytest.fixture
def base_stack() -> Stack:
    return load_stack([base_stack_file()])


@pytest.fixture
def drfc_stack() -> Stack:
    return load_stack([DRFC_TRAINING])


def plan(config: Config, stack: Stack, inventory: Inventory) -> Plan:
    return make_plan(config, stack, inventory)


def problems(config: Config, stack: Stack, inventory: Inventory) -> list[str]:
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, stack, inventory)
    assert caught.value.exit_code is ExitCode.GPU_VALIDATION
    return [f.message for f in caught.value.findings]


def env(plan_: Plan, service: str) -> dict[str, str]:
    return dict(plan_.service(service).environment)


# --- who gets what ---------------------------------------------------------------------------


def test_each_role_gets_its_own_gpus(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(
        make_config(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1"),
        base_stack,
        gtx_m40,
    )
    assert [(s.name, s.role, [d.uuid for d in s.devices]) for s in result.services] == [
        ("sagemaker", Role.TRAINER, [M40]),
        ("robomaker", Role.SIMULATOR, [GTX1650]),
    ]
    assert env(result, "sagemaker") == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": M40,
        "NVIDIA_VISIBLE_DEVICES": M40,
    }


def test_capabilities_per_role(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(
        make_config(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1"),
        base_stack,
        gtx_m40,
    )
    assert result.service("sagemaker").capabilities == ("gpu", "compute", "utility")
    assert result.service("robomaker").capabilities == ("gpu", "compute", "utility", "graphics")


def test_host_x_adds_the_display_capability_to_the_simulator_only(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(
        make_config(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1", DR_HOST_X="true"),
        base_stack,
        gtx_m40,
    )
    assert "display" in result.service("robomaker").capabilities
    assert "display" not in result.service("sagemaker").capabilities


@pytest.mark.parametrize("x_on", [0, 1])
def test_host_x_names_the_x_servers_gpu_and_warns_where_it_is_not_the_simulators(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory, x_on: int
) -> None:
    xorg = GpuProcess(pid=1234, used_memory_mib=40, kind="G")
    gpus = tuple(
        replace(gpu, processes=(xorg,)) if gpu.index == x_on else gpu for gpu in gtx_m40.gpus
    )
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1", DR_HOST_X="true"
    )
    result = plan(config, base_stack, replace(gtx_m40, gpus=gpus))
    named = f"the X server renders on GPU {x_on} ({gpus[x_on].name}: graphics PID 1234)"
    warnings = [warning.message for warning in result.warnings]
    x_lines = [w for w in (*warnings, *result.explanations) if "X server" in w]
    assert len(x_lines) == 1 and named in x_lines[0]
    assert (x_lines[0] in warnings) is (x_on == 0)  # the simulator has GPU 1
    assert "not the simulator's GPU 1" in x_lines[0] or x_on == 1


def test_labels_name_gpus_role_and_run(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0", DR_RUN_ID="3"), base_stack, gtx_m40)
    assert dict(result.service("sagemaker").labels) == {
        "drgpu.gpus": M40,
        "drgpu.role": "trainer",
        "drgpu.run_id": "3",
    }
    assert (result.project, result.run_id) == ("deepracer-3", "3")


def test_service_without_gpu_gets_void(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), base_stack, gtx_m40)
    robomaker = result.service("robomaker")
    assert dict(robomaker.environment) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert not robomaker.has_gpu
    assert robomaker.capabilities == ()


def test_other_services_get_void(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          sagemaker: {image: trainer}
          minio: {image: minio}
        """
    )
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), stack, gtx_m40)
    assert result.service("minio").role is Role.OTHER
    assert env(result, "minio") == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_every_numbered_robomaker_is_a_simulator(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          robomaker-1: {image: sim}
          robomaker-2: {image: sim}
        """
    )
    result = plan(make_config(DR_ROBOMAKER_CUDA_DEVICES="1"), stack, gtx_m40)
    assert [[d.uuid for d in s.devices] for s in result.services] == [[GTX1650], [GTX1650]]


def test_cpu_only_plan_needs_no_gpu(make_config: MakeConfig, base_stack: Stack) -> None:
    result = plan(make_config(), base_stack, Inventory(gpus=()))
    assert all(not service.has_gpu for service in result.services)
    assert result.warnings == ()


def test_mig_slice_goes_to_the_trainer(
    make_config: MakeConfig, base_stack: Stack, mig_l4: Inventory
) -> None:
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES=A100_MIG_2), base_stack, mig_l4)
    assert [d.uuid for d in result.service("sagemaker").devices] == [A100_MIG_2]


# --- problems --------------------------------------------------------------------------------


def test_same_gpu_for_trainer_and_simulator_is_refused(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES="81:00.0")
    assert problems(config, base_stack, gtx_m40) == [
        "1: NVIDIA GeForce GTX 1650 (4096 MiB, 00000000:81:00.0) is asked for by both the"
        " trainer (DR_SAGEMAKER_CUDA_DEVICES) and the simulator (DR_ROBOMAKER_CUDA_DEVICES);"
        " DRGPU_SHARING=exclusive gives each GPU to one of them"
    ]


def test_all_for_both_roles_overlaps_on_every_gpu(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="all", DR_ROBOMAKER_CUDA_DEVICES="all")
    assert len(problems(config, base_stack, gtx_m40)) == 2


def test_every_problem_is_reported_at_once(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="7", DR_ROBOMAKER_CUDA_DEVICES="GPU-ffff")
    found = problems(config, base_stack, gtx_m40)
    assert [problem.split(":")[0] for problem in found] == [
        "DR_SAGEMAKER_CUDA_DEVICES",
        "DR_ROBOMAKER_CUDA_DEVICES",
    ]


def test_problems_name_the_file_and_line(
    tmp_path: Path, base_stack: Stack, gtx_m40: Inventory
) -> None:
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_RUN_ID=0\nDR_SAGEMAKER_CUDA_DEVICES=9\n", encoding="utf-8")
    found = problems(read_settings(Inputs(env_file)), base_stack, gtx_m40)
    assert found[0].startswith(f"DR_SAGEMAKER_CUDA_DEVICES ({env_file}:2): no GPU matches '9'")


def test_a_gpu_that_does_not_exist_hints_at_the_machines_gpus(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    with pytest.raises(GpuValidationError) as caught:
        make_plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="5"), base_stack, gtx_m40)
    assert (
        caught.value.hint == "`drgpu gpus` lists this machine's GPUs; a bare index is nvidia-smi's"
    )


def test_in_a_swarm_a_gpu_no_one_has_hints_once_at_every_nodes_gpus(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    """Each problem carries its fix; the error's hint says each fix once."""
    from drgpu.core.facts import NodeFacts, advertised

    node = NodeFacts("node2", "bed", "worker", "ready", {}, ("GPU-2",))
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="5", DR_ROBOMAKER_CUDA_DEVICES="GPU-7")
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40, nodes=[node])
    assert len([f.message for f in caught.value.findings]) == 2
    assert caught.value.hint == (
        "`drgpu gpus` lists this machine's GPUs; a bare index is nvidia-smi's; or the swarm's"
        f" nodes: {advertised([node])[0]}"
    )


def test_all_on_a_machine_without_gpus_is_refused(
    make_config: MakeConfig, base_stack: Stack
) -> None:
    found = problems(make_config(DR_SAGEMAKER_CUDA_DEVICES="all"), base_stack, Inventory(gpus=()))
    assert found == ["DR_SAGEMAKER_CUDA_DEVICES: 'all' asks for GPUs, but this machine has none"]


# --- warnings --------------------------------------------------------------------------------


def test_trainer_under_8_gib_is_warned(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="1"), base_stack, gtx_m40)
    assert order_free(result.warnings) == (
        "the trainer's GPU 1 (NVIDIA GeForce GTX 1650, 4096 MiB) has under 8 GiB;"
        " DeepRacer training needs about 8 GiB",
    )


def test_trainer_with_8_gib_or_more_is_not_warned(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    assert (
        order_free(plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), base_stack, gtx_m40).warnings)
        == ()
    )


def test_mig_slice_memory_is_judged_by_the_slice_not_its_gpu(
    make_config: MakeConfig, base_stack: Stack, mig_l4: Inventory
) -> None:
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES="1", DR_ROBOMAKER_CUDA_DEVICES=A100_MIG_2, DR_WORKERS="10"
    )
    assert order_free(plan(config, base_stack, mig_l4).warnings) == (
        "the simulator's GPU 0 (NVIDIA A100-SXM4-40GB, 9856 MiB) has under 1 GiB"
        " for each of 10 worker(s)",
    )


@pytest.mark.parametrize(("workers", "warned"), [("4", False), ("5", True)])
def test_simulator_needs_1_gib_per_worker(
    make_config: MakeConfig,
    base_stack: Stack,
    gtx_m40: Inventory,
    workers: str,
    warned: bool,
) -> None:
    result = plan(
        make_config(
            DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1", DR_WORKERS=workers
        ),
        base_stack,
        gtx_m40,
    )
    expected = (
        f"the simulator's GPU 1 (NVIDIA GeForce GTX 1650, 4096 MiB) has under 1 GiB"
        f" for each of {workers} worker(s)",
    )
    assert order_free(result.warnings) == (expected if warned else ())


def test_trainer_request_without_a_trainer_service_is_warned(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  robomaker: {image: sim}\n")
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), stack, gtx_m40)
    assert order_free(result.warnings) == (
        "DR_SAGEMAKER_CUDA_DEVICES is set, but the stack has no sagemaker or rl_coach service",
    )


def test_simulator_request_without_a_simulator_service_is_warned(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  sagemaker: {image: trainer}\n")
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1")
    assert order_free(plan(config, stack, gtx_m40).warnings) == (
        "DR_ROBOMAKER_CUDA_DEVICES is set, but the stack has no robomaker service",
    )


# --- rl_coach (DeepRacer-for-cloud's training stack) -----------------------------------------


def test_rl_coach_is_the_trainer_launcher(drfc_stack: Stack) -> None:
    assert [(s.name, s.role) for s in drfc_stack.services] == [
        ("rl_coach", Role.TRAINER_LAUNCHER),
        ("robomaker", Role.SIMULATOR),
    ]


def test_rl_coach_forwards_the_trainer_uuid_but_gets_no_gpu(
    make_config: MakeConfig, drfc_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(
        make_config(DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1"),
        drfc_stack,
        gtx_m40,
    )
    rl_coach = result.service("rl_coach")
    assert env(result, "rl_coach") == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": M40,
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    assert not rl_coach.has_gpu
    assert rl_coach.capabilities == ()
    assert dict(rl_coach.labels)["drgpu.gpus"] == ""
    assert rl_coach.note is not None and "rl_coach itself gets no GPU" in rl_coach.note


def test_rl_coach_counts_as_a_trainer_for_unused_request_warnings(
    make_config: MakeConfig, drfc_stack: Stack, gtx_m40: Inventory
) -> None:
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), drfc_stack, gtx_m40)
    assert order_free(result.warnings) == ()


# --- resets of what the user's compose files already ask for ---------------------------------


def test_service_with_device_requests_but_no_gpu_gets_them_reset(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          sagemaker:
            image: trainer
            deploy:
              resources:
                reservations:
                  devices:
                    - driver: nvidia
                      count: all
                      capabilities: [gpu]
        """
    )
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="none"), stack, gtx_m40)
    assert result.service("sagemaker").reset_keys == ("deploy.resources.reservations.devices",)


def test_service_with_device_requests_and_a_gpu_needs_no_reset(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          sagemaker:
            deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1}]}}}
        """
    )
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), stack, gtx_m40)
    assert result.service("sagemaker").reset_keys == ()


def test_rl_coach_with_device_requests_gets_them_reset(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          rl_coach:
            deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1}]}}}
        """
    )
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), stack, gtx_m40)
    assert result.service("rl_coach").reset_keys == ("deploy.resources.reservations.devices",)


def test_gpus_key_is_always_reset(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          sagemaker: {image: trainer, gpus: all}
          robomaker: {image: sim, gpus: all}
        """
    )
    result = plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), stack, gtx_m40)
    assert result.service("sagemaker").reset_keys == ("gpus",)
    assert result.service("robomaker").reset_keys == ("gpus",)


def test_resets_are_seen_across_compose_files(
    make_config: MakeConfig, tmp_path: Path, gtx_m40: Inventory
) -> None:
    base = tmp_path / "base.yml"
    base.write_text("services:\n  robomaker: {image: sim}\n", encoding="utf-8")
    extra = tmp_path / "gpu.yml"
    extra.write_text("services:\n  robomaker: {gpus: all}\n", encoding="utf-8")
    result = plan(make_config(), load_stack([base, extra]), gtx_m40)
    assert result.service("robomaker").reset_keys == ("gpus",)
