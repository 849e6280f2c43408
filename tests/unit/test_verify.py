"""Verifying a started stack: replaced services must not run, MPS clients share the IPC."""

from __future__ import annotations

from drgpu.core.facts import ContainerFacts
from drgpu.core.model import Plan, Role, ServicePlan
from drgpu.core.verification import verify


def planned(name: str, *, ipc: str | None = None, replicas: int | None = None) -> ServicePlan:
    return ServicePlan(
        name=name,
        role=Role.OTHER,
        devices=(),
        capabilities=(),
        environment=(),
        labels=(),
        ipc=ipc,
        replicas=replicas,
    )


def container(service: str, ipc_mode: str = "private") -> ContainerFacts:
    return ContainerFacts(
        id=f"id-{service}",
        name=f"p-{service}-1",
        service=service,
        project="p",
        state="running",
        ipc_mode=ipc_mode,
    )


def test_a_replaced_service_must_have_no_container() -> None:
    plan = Plan(project="p", run_id="0", services=(planned("robomaker", replicas=0),))
    assert verify(plan, []) == []
    assert verify(plan, [container("robomaker")]) == [
        "service robomaker has 1 container(s), planned 0"
    ]


def test_an_mps_client_must_share_the_daemons_ipc_namespace() -> None:
    plan = Plan(
        project="p",
        run_id="0",
        services=(
            planned("drgpu-mps", ipc="shareable"),
            planned("sagemaker", ipc="service:drgpu-mps"),
        ),
    )
    daemon = container("drgpu-mps", "shareable")
    assert verify(plan, [daemon, container("sagemaker", "container:id-drgpu-mps")]) == []
    assert verify(plan, [daemon, container("sagemaker")]) == [
        "p-sagemaker-1: IPC mode 'private', planned the IPC namespace of drgpu-mps"
    ]
