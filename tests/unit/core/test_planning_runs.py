"""Several runs on one host (drgpu/core/planning.py): what other runs hold is refused,
shared or planned around."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from drgpu.core.compose_stack import Stack
from drgpu.core.model import Claim, Inventory
from drgpu.core.planning import RUNS_HINT, make_plan
from drgpu.core.settings import Config
from drgpu.errors import ExitCode, GpuValidationError
from drgpu.host.files import base_stack_file, load_stack
from tests.plan_warnings import order_free

MakeConfig = Callable[..., Config]

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # gtx_m40 index 1
A100_MIG_1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
A100_MIG_2 = "MIG-a1000000-0000-4000-8000-0000000000a2"


@pytest.fixture
def base_stack() -> Stack:
    return load_stack([base_stack_file()])


def test_exclusive_refuses_a_gpu_another_run_holds_and_names_it(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0")
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40, [Claim("a", "sagemaker", (M40,))])
    assert caught.value.exit_code is ExitCode.GPU_VALIDATION
    assert [f.message for f in caught.value.findings] == [
        "0: Tesla M40 24GB (22912 MiB, 00000000:03:00.0), planned for sagemaker, is held by"
        " run 'a' (sagemaker); DRGPU_SHARING=exclusive does not share GPUs between runs"
    ]
    assert caught.value.hint == RUNS_HINT


def test_a_runs_own_claims_are_no_conflict(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="a", DR_SAGEMAKER_CUDA_DEVICES="0")
    plan = make_plan(config, base_stack, gtx_m40, [Claim("a", "sagemaker", (M40,))])
    assert order_free(plan.warnings) == ()


def test_two_timeslice_runs_share_with_a_warning(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_SHARING="timeslice")
    held = [Claim("a", "sagemaker", (M40,), sharing="timeslice")]
    plan = make_plan(config, base_stack, gtx_m40, held)
    assert plan.warnings[-1].message.endswith(
        "is held by run 'a' (sagemaker); both runs use DRGPU_SHARING=timeslice: shared"
    )


def test_timeslice_does_not_take_a_gpu_from_an_exclusive_run(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_SHARING="timeslice")
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40, [Claim("a", "robomaker-2", (M40,))])
    assert caught.value.findings[0].message.endswith(
        "is held by run 'a' (robomaker-2), which does not share it (DRGPU_SHARING=exclusive there)"
    )


def test_mps_does_not_share_gpus_between_runs(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0", DRGPU_SHARING="mps")
    held = [Claim("a", "sagemaker", (M40,), sharing="mps")]
    with pytest.raises(GpuValidationError, match="DRGPU_SHARING=mps does not share GPUs"):
        make_plan(config, base_stack, gtx_m40, held)


def test_mig_slices_conflict_with_their_whole_gpu_but_not_with_each_other(
    make_config: MakeConfig, base_stack: Stack, mig_l4: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES=A100_MIG_2)
    make_plan(config, base_stack, mig_l4, [Claim("a", "sagemaker", (A100_MIG_1,))])
    with pytest.raises(GpuValidationError):
        make_plan(
            config,
            base_stack,
            mig_l4,
            [Claim("a", "x", ("GPU-a1000000-0000-4000-8000-000000000001",))],
        )


def test_every_held_gpu_is_reported_once_per_run(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(
        DR_RUN_ID="c", DR_SAGEMAKER_CUDA_DEVICES="0", DR_ROBOMAKER_CUDA_DEVICES="1", DR_WORKERS="2"
    )
    held = [
        Claim("a", "sagemaker", (M40,)),
        Claim("a", "robomaker", (M40,)),
        Claim("b", "robomaker-1", (GTX1650,)),
    ]
    with pytest.raises(GpuValidationError) as caught:
        make_plan(config, base_stack, gtx_m40, held)
    assert [p.split(" is held by ")[1][:7] for p in [f.message for f in caught.value.findings]] == [
        "run 'a'",
        "run 'b'",
    ]
    assert "(sagemaker, robomaker)" in caught.value.findings[0].message
    assert "planned for robomaker-1, robomaker-2" in caught.value.findings[1].message


def test_rl_coachs_forwarded_trainer_gpu_counts_as_held(
    make_config: MakeConfig, write_stack: Callable[[str], Stack], gtx_m40: Inventory
) -> None:
    stack = write_stack("services:\n  rl_coach: {}\n")
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="0")
    with pytest.raises(GpuValidationError, match="planned for rl_coach, is held by run 'a'"):
        make_plan(config, stack, gtx_m40, [Claim("a", "rl_coach", (M40,))])


def test_auto_picks_around_what_other_runs_hold(
    make_config: MakeConfig, base_stack: Stack, gtx_m40: Inventory
) -> None:
    config = make_config(DR_RUN_ID="b", DR_SAGEMAKER_CUDA_DEVICES="auto")
    plan = make_plan(config, base_stack, gtx_m40, [Claim("a", "sagemaker", (M40,))])
    assert [d.uuid for d in plan.service("sagemaker").devices] == [GTX1650]
    assert plan.explanations[0].endswith("passed over GPU 0 (held by run 'a')")
