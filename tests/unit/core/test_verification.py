"""Verifying a started stack: replaced services must not run, MPS clients share the IPC,
and a container that stopped is no verified stack."""

from __future__ import annotations

from dataclasses import replace

import pytest

from drgpu.core.facts import ContainerFacts, DeviceRequestFacts
from drgpu.core.model import Assignment, Gpu, Plan, Role, ServicePlan
from drgpu.core.modes import DeviceDriver
from drgpu.core.verification import start_refused, stopped_badly, stuck_hint, verify


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


def gpu_service(name: str) -> ServicePlan:
    gpu = Gpu(index=0, uuid="GPU-a", name="Card", pci_bus_id="01:00.0", memory_total_mib=4096)
    return ServicePlan(
        name=name,
        role=Role.SIMULATOR,
        devices=(Assignment(gpu),),
        capabilities=("gpu",),
        environment=(),
        labels=(),
    )


def stopped(service: str, status: int, state: str = "exited") -> ContainerFacts:
    request = DeviceRequestFacts("nvidia", ("GPU-a",), 0, ("gpu",))
    return ContainerFacts(
        id=f"id-{service}",
        name=f"p-{service}-1",
        service=service,
        project="p",
        state=state,
        exit_code=status,
        device_requests=(request,) if service == "robomaker" else (),
    )


@pytest.mark.parametrize("status", [0, 1, 137])
def test_a_gpu_service_that_exited_fails_whatever_its_status(status: int) -> None:
    plan = Plan(project="p", run_id="0", services=(gpu_service("robomaker"),))
    [problem] = verify(plan, [stopped("robomaker", status)])
    assert problem.startswith("p-robomaker-1: exited")
    [(container, why)] = stopped_badly(plan, [stopped("robomaker", status)])
    assert container == stopped("robomaker", status)
    assert f"{container.name}: {why}" == problem


def test_any_service_that_exited_non_zero_fails_and_zero_passes() -> None:
    plan = Plan(project="p", run_id="0", services=(planned("redis"),))
    assert verify(plan, [stopped("redis", 0)]) == []
    assert verify(plan, [stopped("redis", 2)]) == ["p-redis-1: exited with status 2"]
    assert verify(plan, [stopped("redis", 1, state="restarting")]) == [
        "p-redis-1: is restarting, not running"
    ]


def test_a_placeholder_may_have_replicas_that_exit_zero_without_a_gpu() -> None:
    plan = Plan(
        project="p", run_id="0", services=(replace(planned("robomaker"), placeholder=True),)
    )
    assert verify(plan, [stopped("redis", 0), container("robomaker")]) == []
    with_gpu = stopped("robomaker", 0)
    assert verify(plan, [with_gpu]) == ["p-robomaker-1: has 1 device request(s), planned none"]


def running_with(request: DeviceRequestFacts) -> ContainerFacts:
    return replace(container("robomaker"), device_requests=(request,))


def test_a_cdi_plan_is_proven_by_a_cdi_request_naming_each_uuid() -> None:
    """DRGPU_DEVICE_DRIVER=cdi (or auto on a CDI-only host): the engine must hold a `cdi`
    request for `nvidia.com/gpu=<UUID>`; its capabilities do not matter to that driver."""
    plan = Plan(
        project="p",
        run_id="0",
        services=(gpu_service("robomaker"),),
        device_driver=DeviceDriver.CDI,
    )
    cdi = DeviceRequestFacts("cdi", ("nvidia.com/gpu=GPU-a",), 0, ())
    assert verify(plan, [running_with(cdi)]) == []
    nvidia = DeviceRequestFacts("nvidia", ("GPU-a",), 0, ("gpu",))
    assert verify(plan, [running_with(nvidia)]) == [
        "p-robomaker-1: device request driver 'nvidia', planned 'cdi'",
        "p-robomaker-1: device ids ['GPU-a'], planned ['nvidia.com/gpu=GPU-a']",
    ]


def test_an_nvidia_plan_refuses_a_cdi_request() -> None:
    plan = Plan(project="p", run_id="0", services=(gpu_service("robomaker"),))
    cdi = DeviceRequestFacts("cdi", ("nvidia.com/gpu=GPU-a",), 0, ("gpu",))
    assert verify(plan, [running_with(cdi)]) == [
        "p-robomaker-1: device request driver 'cdi', planned 'nvidia'",
        "p-robomaker-1: device ids ['nvidia.com/gpu=GPU-a'], planned ['GPU-a']",
    ]


def test_a_stuck_tasks_hint_matches_its_cause() -> None:
    no_node = "robomaker: no suitable node (insufficient resources on 1 node)"
    no_socket = (
        'rl_coach: task rejected: invalid mount config for type "bind": bind source path'
        " does not exist: /var/run/docker.sock"
    )
    assert "`drgpu swarm-setup` on each node" in stuck_hint([no_node])
    mount = stuck_hint([no_socket])
    assert "swarm-setup" not in mount and "label" not in mount
    assert mount.startswith("a bind mount's source is missing on the task's node")
    assert "swarm-setup" not in stuck_hint(["rl_coach: task failed: its command ended"])


def test_simulators_left_running_without_their_trainer_refuse_a_start() -> None:
    """DRfC's own stop removes what its files name, rl_coach, and leaves drgpu's workers."""
    services = (
        replace(planned("rl_coach"), role=Role.TRAINER_LAUNCHER),
        gpu_service("robomaker-1"),
    )
    plan = Plan(project="p", run_id="0", services=services)

    def compose(service: str, role: str) -> ContainerFacts:
        tags = {"com.docker.compose.service": service, "drgpu.role": role}
        return replace(container(service), labels=tags)

    worker = compose("robomaker-1", "simulator")
    assert start_refused(plan, [worker], by_script=False) == (
        "p: robomaker-1 still run without rl_coach, left by a stop without drgpu's override"
        " (as DRfC's dr-stop-training leaves drgpu's workers)"
    )
    assert (
        start_refused(plan, [worker, compose("rl_coach", "trainer-launcher")], by_script=False)
        is None
    )
    assert start_refused(plan, [], by_script=False) is None
    assert start_refused(plan, [replace(worker, state="exited")], by_script=False) is None
    daemon = compose("drgpu-mps", "mps-daemon")  # holds the GPU too: named
    assert str(start_refused(plan, [worker, daemon], by_script=False)).startswith(
        "p: robomaker-1, drgpu-mps still run without rl_coach"
    )
    assert start_refused(plan, [daemon], by_script=False) is None
    alone = Plan(project="p", run_id="0", services=(gpu_service("robomaker-1"),))
    assert start_refused(alone, [worker], by_script=False) is None  # a stack of simulators alone
    # DRfC's start script would start a second trainer beside any container of the run.
    coach = compose("rl_coach", "trainer-launcher")
    assert start_refused(plan, [coach, worker], by_script=True) == (
        "p has containers already (p-rl_coach-1, p-robomaker-1-1): DRfC's start script would"
        " start a second SageMaker trainer beside its own (and -w would wipe the model it trains)"
    )
    assert start_refused(plan, [worker], by_script=True) == start_refused(
        plan, [worker], by_script=False
    )
    assert start_refused(plan, [], by_script=True) is None
    assert (
        start_refused(plan, [replace(worker, labels={"drgpu.role": "simulator"})], by_script=False)
        is None
    )
