"""DRGPU_SHARING: exclusive refuses overlaps, timeslice allows them, mps adds a daemon."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from drgpu.core.compose_stack import Stack
from drgpu.core.model import Inventory, Plan, Role
from drgpu.core.planning import make_plan
from drgpu.core.settings import Config
from drgpu.core.sharing import MPS_COMMAND, mps_memory
from drgpu.errors import GpuValidationError
from drgpu.host.files import base_stack_file, load_stack
from tests.plan_warnings import order_free

MakeConfig = Callable[..., Config]
WriteStack = Callable[[str], Stack]

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0, 22912 MiB
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # gtx_m40 index 1, 4096 MiB
A100_MIG_1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
TIMESLICE = {
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "PYTORCH_ALLOC_CONF": "expandable_segments:True",
}


@pytest.fixture
def base_stack() -> Stack:
    return load_stack([base_stack_file()])


def env(plan: Plan, service: str) -> dict[str, str]:
    return dict(plan.service(service).environment)


def shared_config(make_config: MakeConfig, sharing: str, **more: str) -> Config:
    """Trainer and simulator both on GPU 0 (the M40)."""
    return make_config(
        DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="0", DRGPU_SHARING=sharing, **more
    )


# --- exclusive and timeslice -----------------------------------------------------------------


def test_exclusive_refuses_the_overlap(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    with pytest.raises(GpuValidationError, match="DRGPU_SHARING=exclusive gives each GPU"):
        make_plan(shared_config(make_config, "exclusive"), base_stack, gtx_m40)


def test_exclusive_lets_workers_share_the_simulator_gpu(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_ROBOMAKER_CUDA_DEVICES="1", DR_WORKERS="2")
    plan = make_plan(config, base_stack, gtx_m40)
    assert all("TF_FORCE_GPU_ALLOW_GROWTH" not in env(plan, s.name) for s in plan.services)
    assert "drgpu.sharing" not in dict(plan.service("robomaker-1").labels)


def test_timeslice_allows_the_overlap_with_a_warning(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    plan = make_plan(shared_config(make_config, "timeslice"), base_stack, gtx_m40)
    assert [d.uuid for d in plan.service("robomaker").devices] == [M40]
    assert order_free(plan.warnings)[0].startswith(
        "0: Tesla M40 24GB (22912 MiB, 00000000:03:00.0) is asked for by both the trainer"
    )
    assert "DRGPU_SHARING=timeslice: they take turns on it" in order_free(plan.warnings)[0]


def test_timeslice_tells_every_gpu_service_to_grow_its_memory(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  sagemaker: {}\n  robomaker: {}\n  redis: {}\n")
    plan = make_plan(shared_config(make_config, "timeslice"), stack, gtx_m40)
    for name in ("sagemaker", "robomaker"):
        assert TIMESLICE.items() <= env(plan, name).items()
        assert dict(plan.service(name).labels)["drgpu.sharing"] == "timeslice"
    assert env(plan, "redis") == {"NVIDIA_VISIBLE_DEVICES": "void"}


# --- mps -------------------------------------------------------------------------------------


def test_mps_adds_a_daemon_for_the_shared_gpu(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    plan = make_plan(shared_config(make_config, "mps"), base_stack, gtx_m40)
    daemon = plan.service("drgpu-mps")
    assert daemon.role is Role.MPS_DAEMON and daemon.has_gpu
    assert [d.uuid for d in daemon.devices] == [M40]
    assert daemon.image == "nvidia/cuda:12.4.1-base-ubuntu22.04"
    assert daemon.command == MPS_COMMAND and "nvidia-cuda-mps-control -d" in daemon.command[-1]
    assert (daemon.ipc, daemon.network_mode, daemon.init) == ("shareable", "none", True)
    assert env(plan, "drgpu-mps") == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": M40,
        "NVIDIA_VISIBLE_DEVICES": M40,
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_LOG_DIRECTORY": "/tmp/nvidia-log",
    }
    assert plan.tmpfs_volumes == ("drgpu-mps-pipe", "drgpu-mps-log")
    assert plan.explanations[-1].startswith("drgpu-mps: MPS control daemon for GPU 0")


def test_mps_clients_share_the_daemons_ipc_and_pipes_and_start_after_it(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    plan = make_plan(shared_config(make_config, "mps"), base_stack, gtx_m40)
    for name in ("sagemaker", "robomaker"):
        client = plan.service(name)
        assert client.ipc == "service:drgpu-mps"
        assert client.depends_on == ("drgpu-mps",)
        assert client.volumes == (
            "drgpu-mps-pipe:/tmp/nvidia-mps",
            "drgpu-mps-log:/tmp/nvidia-log",
        )
        assert env(plan, name)["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        assert env(plan, name)["CUDA_VISIBLE_DEVICES"] == M40
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env(plan, name)


def test_mps_limits_are_rendered_per_role_and_per_device(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = shared_config(
        make_config,
        "mps",
        DR_WORKERS="2",
        DRGPU_MPS_SAGEMAKER_THREADS="60",
        DRGPU_MPS_ROBOMAKER_THREADS="20",
        DRGPU_MPS_SAGEMAKER_MEMORY="8G",
        DRGPU_MPS_ROBOMAKER_MEMORY="2048M",
    )
    plan = make_plan(config, base_stack, gtx_m40)
    assert env(plan, "sagemaker")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "60"
    assert env(plan, "sagemaker")["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{M40}=8G"
    for worker in ("robomaker-1", "robomaker-2"):
        assert env(plan, worker)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
        assert env(plan, worker)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{M40}=2G"
    assert order_free(plan.warnings) == ()


def test_a_client_with_two_gpus_gets_a_memory_limit_for_each(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES="0",
        DR_ROBOMAKER_CUDA_DEVICES="0,1",
        DRGPU_SHARING="mps",
        DRGPU_MPS_ROBOMAKER_MEMORY="1536M",
    )
    plan = make_plan(config, base_stack, gtx_m40)
    assert env(plan, "robomaker")["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == (
        f"{M40}=1536M,{GTX1650}=1536M"
    )
    assert [d.uuid for d in plan.service("drgpu-mps").devices] == [M40, GTX1650]


@pytest.mark.parametrize(("mib", "text"), [(2048, "2G"), (1536, "1536M"), (8192, "8G")])
def test_mps_memory_is_written_in_mps_units(mib: int, text: str) -> None:
    assert mps_memory(mib) == text


def test_thread_percentages_over_100_on_one_gpu_are_warned(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = shared_config(
        make_config,
        "mps",
        DR_WORKERS="2",
        DRGPU_MPS_SAGEMAKER_THREADS="60",
        DRGPU_MPS_ROBOMAKER_THREADS="30",
    )
    plan = make_plan(config, base_stack, gtx_m40)
    assert order_free(plan.warnings) == (
        "MPS thread percentages on GPU 0 (Tesla M40 24GB) add up to 120%"
        " (sagemaker 60%, robomaker-1 30%, robomaker-2 30%): its clients will contend for SMs",
    )


def test_memory_limits_beyond_the_gpu_are_warned(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES="1",
        DR_ROBOMAKER_CUDA_DEVICES="1",
        DRGPU_SHARING="mps",
        DRGPU_MPS_SAGEMAKER_MEMORY="3G",
        DRGPU_MPS_ROBOMAKER_MEMORY="2G",
    )
    plan = make_plan(config, base_stack, gtx_m40)
    assert (
        "MPS memory limits on GPU 1 (NVIDIA GeForce GTX 1650) add up to 5120 MiB,"
        " more than its 4096 MiB"
    ) in [warning.message for warning in plan.warnings]


def test_mps_without_a_shared_gpu_starts_no_daemon(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1", DRGPU_SHARING="mps"
    )
    plan = make_plan(config, base_stack, gtx_m40)
    assert [s.name for s in plan.services] == ["sagemaker", "robomaker"]
    assert order_free(plan.warnings) == (
        "DRGPU_SHARING=mps, but no GPU is shared: no MPS daemon is started",
    )
    assert plan.service("sagemaker").ipc is None


def test_mps_is_not_run_on_mig_devices(
    make_config: MakeConfig, base_stack: Stack, mig_l4: Inventory
) -> None:
    config = make_config(
        DR_SAGEMAKER_CUDA_DEVICES=A100_MIG_1,
        DR_ROBOMAKER_CUDA_DEVICES=A100_MIG_1,
        DRGPU_SHARING="mps",
    )
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, mig_l4)
    assert caught.value.findings[0].message == (
        f"sagemaker gets MIG device {A100_MIG_1}: drgpu does not run MPS on MIG devices"
    )


def test_a_stacks_own_mps_daemon_keeps_what_it_sets(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          sagemaker: {image: trainer}
          robomaker: {image: sim}
          drgpu-mps: {image: my/mps, command: [my-mps], init: false, network_mode: host}
        """
    )
    plan = make_plan(shared_config(make_config, "mps"), stack, gtx_m40)
    daemon = plan.service("drgpu-mps")
    assert (daemon.image, daemon.command, daemon.init, daemon.network_mode) == (
        None,
        (),
        False,
        None,
    )
    assert daemon.ipc == "shareable" and daemon.has_gpu


def test_a_stacks_own_mps_daemon_gets_drgpus_image_and_command_where_it_sets_none(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          sagemaker: {image: trainer}
          robomaker: {image: sim}
          drgpu-mps: {volumes: ["./fake:/usr/local/bin/nvidia-cuda-mps-control:ro"]}
        """
    )
    config = shared_config(make_config, "mps", DRGPU_MPS_IMAGE="registry.local/cuda:12")
    daemon = make_plan(config, stack, gtx_m40).service("drgpu-mps")
    assert (daemon.image, daemon.command, daemon.init, daemon.network_mode) == (
        "registry.local/cuda:12",
        MPS_COMMAND,
        True,
        "none",
    )


def test_a_stacks_own_mps_daemon_gets_no_gpu_when_nothing_is_shared(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  sagemaker: {}\n  drgpu-mps: {image: my/mps}\n")
    plan = make_plan(make_config(DR_SAGEMAKER_CUDA_DEVICES="0"), stack, gtx_m40)
    assert env(plan, "drgpu-mps") == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert not plan.service("drgpu-mps").has_gpu


def test_rl_coachs_trainer_cannot_join_mps_and_is_warned(
    make_config: MakeConfig, write_stack: WriteStack, gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  robomaker: {}\n  rl_coach: {}\n")
    config = shared_config(make_config, "mps", DR_WORKERS="2")
    plan = make_plan(config, stack, gtx_m40)
    assert (
        "GPU 0 (Tesla M40 24GB) is shared through MPS, but the trainer that rl_coach starts"
        " runs outside Compose and does not join MPS"
    ) in [warning.message for warning in plan.warnings]
    assert plan.service("rl_coach").ipc is None
    assert plan.service("robomaker-1").ipc == "service:drgpu-mps"


def test_mps_settings_without_mps_sharing_are_warned(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_MPS_SAGEMAKER_THREADS="50")
    plan = make_plan(config, base_stack, gtx_m40)
    assert order_free(plan.warnings) == (
        "DRGPU_MPS_SAGEMAKER_THREADS is set, but DRGPU_SHARING=exclusive: it applies to mps only",
    )
