"""The SageMaker trainer rl_coach starts (outside the compose project): status and
cuda-check check that its CUDA_VISIBLE_DEVICES names exactly the forwarded GPU."""

from __future__ import annotations

import json
from dataclasses import replace

from drgpu.core import labels
from drgpu.core.cuda_verdict import judge_trainer
from drgpu.core.drfc_scripts import is_sagemaker_local
from drgpu.core.facts import ContainerFacts
from drgpu.core.gpu_usage import build_status, trainer_checks
from drgpu.core.model import Gpu, Inventory
from drgpu.ui.documents import status_document

A, B = "GPU-aaaa", "GPU-bbbb"


def coach(run_id: str, forwarded: str) -> ContainerFacts:
    return ContainerFacts(
        id=f"coach-{run_id}",
        name=f"deepracer-{run_id}-rl_coach-1",
        service="rl_coach",
        project=f"deepracer-{run_id}",
        state="running",
        labels={
            labels.RUN_ID: run_id,
            labels.ROLE: "trainer-launcher",
            labels.FORWARDED_GPUS: forwarded,
        },
    )


def trainer(name: str, visible: str | None, service: str = "") -> ContainerFacts:
    return ContainerFacts(
        id=f"id-{name}",
        name=name,
        service=service,
        project="tmpabc",
        state="running",
        environment={"CUDA_VISIBLE_DEVICES": visible} if visible is not None else {},
    )


def test_sagemaker_local_names_and_services_are_recognised() -> None:
    assert is_sagemaker_local(trainer("tmpx1y2-algo-1-ab3cd-1", A))
    assert is_sagemaker_local(trainer("tmpx1y2_algo-2-ab3cd_1", A))
    assert is_sagemaker_local(trainer("whatever", A, service="algo-1-ab3cd"))
    assert not is_sagemaker_local(trainer("deepracer-0-robomaker-1", A))


def test_each_trainer_is_matched_to_the_rl_coach_that_forwards_its_gpu() -> None:
    good, wrong = trainer("t1-algo-1-aaaaa-1", A), trainer("t2-algo-1-bbbbb-1", None)
    checks = trainer_checks([good, wrong], [coach("0", A), coach("1", B)])
    assert [(c.container.name, c.run_id, c.ok) for c in checks] == [
        ("t1-algo-1-aaaaa-1", "0", True),
        ("t2-algo-1-bbbbb-1", None, False),
    ]
    assert checks[1].message == (
        "SageMaker trainer t2-algo-1-bbbbb-1 has CUDA_VISIBLE_DEVICES=<unset>,"
        " which no rl_coach of drgpu's forwards"
    )
    # No rl_coach of drgpu's at all: the trainers are none of drgpu's business.
    assert trainer_checks([good, wrong], []) == ()


def test_with_one_rl_coach_a_wrong_trainer_is_its_violation() -> None:
    gpus = tuple(
        Gpu(index=n, uuid=uuid, name="NVIDIA L4", pci_bus_id=f"0:{n}", memory_total_mib=1)
        for n, uuid in enumerate((A, B))
    )
    status = build_status(
        Inventory(gpus=gpus), [coach("0", A)], [], {}, sagemaker=[trainer("t-algo-1-x1-1", B)]
    )
    [violation] = [v for v in status.violations if v.kind == "trainer-gpu"]
    assert (violation.facts["gpu_index"], violation.facts["gpu_uuid"]) == (1, B)
    assert violation.message == (
        "SageMaker trainer t-algo-1-x1-1 of run 0 has CUDA_VISIBLE_DEVICES=1: NVIDIA L4,"
        " but deepracer-0-rl_coach-1 forwards 0: NVIDIA L4"
    )
    [seen] = status_document(status)["sagemaker_trainers"]
    assert (seen["run_id"], seen["forwarded_gpus"], seen["ok"]) == ("0", ["GPU-aaaa"], False)


def test_a_trainer_told_a_bare_number_is_told_which_gpu_that_is_in_its_order() -> None:
    """CUDA ranks GPU 1 (compute capability 8.9) first: the trainer's `0` is GPU 1."""
    gpus = tuple(
        Gpu(
            index=n,
            uuid=u,
            name=name,
            pci_bus_id=f"0:{n}",
            memory_total_mib=1,
            compute_capability=cc,
        )
        for n, (u, name, cc) in enumerate(((A, "Tesla M40", (5, 2)), (B, "NVIDIA L4", (8, 9))))
    )
    told = trainer("t-algo-1-x1-1", "0")
    status = build_status(Inventory(gpus=gpus), [coach("0", A)], [], {}, sagemaker=[told])
    [violation] = [v for v in status.violations if v.kind == "trainer-gpu"]
    assert violation.message.endswith(
        "has CUDA_VISIBLE_DEVICES=0, but deepracer-0-rl_coach-1 forwards 0: Tesla M40"
        " (its 0 is 1: NVIDIA L4, in CUDA's fastest-first order)"
    )
    pci = replace(told, environment={**told.environment, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    status = build_status(Inventory(gpus=gpus), [coach("0", A)], [], {}, sagemaker=[pci])
    [violation] = [v for v in status.violations if v.kind == "trainer-gpu"]
    assert violation.message.endswith("(its 0 is 0: Tesla M40, in PCI bus order)")


def test_cuda_must_show_exactly_the_forwarded_gpu_in_the_trainer() -> None:
    [check] = trainer_checks([trainer("t-algo-1-x1-1", A)], [coach("0", A)])
    report = {"nvml": {"devices": [{"uuid": A}, {"uuid": B}]}, "cuda": {"devices": []}}
    result = judge_trainer(check, 0, json.dumps(report))
    assert [f.message for f in result.findings] == ["CUDA shows no GPU, planned ['GPU-aaaa']"]
    report["cuda"] = {"devices": [{"uuid": A}]}
    assert judge_trainer(check, 0, json.dumps(report)).ok
