"""Prove a started stack matches its plan, from what the engine says of each container."""

from __future__ import annotations

from collections.abc import Iterable

from drgpu.core.device_driver import request_ids
from drgpu.core.facts import ContainerFacts
from drgpu.core.model import Plan, ServicePlan
from drgpu.core.modes import DeviceDriver


def verify(plan: Plan, containers: list[ContainerFacts]) -> list[str]:
    """Every way the containers differ from the plan; empty when they match.

    A container that stopped is a problem when its service has a GPU (whatever its exit
    status: a trainer or simulator that ended is no verified stack), when it exited
    non-zero, or when it never started, died or keeps restarting.
    """
    problems: list[str] = []
    for service in plan.services:
        mine = [container for container in containers if container.service == service.name]
        problems.extend(
            f"{container.name}: {problem}"
            for container in mine
            if (problem := state_problem(service, container))
        )
        if service.placeholder:
            problems.extend(
                f"{c.name}: has {len(c.device_requests)} device request(s), planned none"
                for c in mine
                if c.device_requests
            )
            continue
        if service.disabled:
            if mine:
                problems.append(f"service {service.name} has {len(mine)} container(s), planned 0")
            continue
        if not mine:
            problems.append(f"service {service.name} has no container")
        for container in mine:
            problems.extend(
                f"{container.name}: {p}"
                for p in _container_problems(service, container, plan.device_driver)
            )
            problems.extend(
                f"{container.name}: {p}" for p in _ipc_problems(service, container, containers)
            )
    return problems


def state_problems(plan: Plan, containers: Iterable[ContainerFacts]) -> list[str]:
    """Why each container whose state fails verification fails it (as `verify` words it),
    for containers whose other facts are proven elsewhere (a Swarm task's)."""
    return [
        f"{container.name}: {state_problem(service, container)}"
        for container in stopped_badly(plan, list(containers))
        for service in plan.services
        if service.name == container.service
    ]


def stopped_badly(plan: Plan, containers: list[ContainerFacts]) -> list[ContainerFacts]:
    """The containers whose state `verify` reports (their logs tell why)."""
    planned = {service.name: service for service in plan.services}
    return [
        container
        for container in containers
        if container.service in planned and state_problem(planned[container.service], container)
    ]


def state_problem(service: ServicePlan, container: ContainerFacts) -> str | None:
    """Why a container's state fails verification, or None."""
    if not container.stopped:
        return None
    if container.state != "exited":
        return f"is {container.state}, not running"
    status = container.exit_code
    if status is None:
        return "exited"
    if status != 0:
        return f"exited with status {status}"
    if service.has_gpu:
        return "exited (status 0), but it was given a GPU to work on"
    return None


def _ipc_problems(
    service: ServicePlan, container: ContainerFacts, containers: list[ContainerFacts]
) -> list[str]:
    """An MPS client must share the IPC namespace of its daemon's container."""
    if service.ipc is None or not service.ipc.startswith("service:"):
        return []
    owner = service.ipc.removeprefix("service:")
    wanted = {f"container:{c.id}" for c in containers if c.service == owner}
    if container.ipc_mode in wanted:
        return []
    return [f"IPC mode {container.ipc_mode!r}, planned the IPC namespace of {owner}"]


def _container_problems(
    service: ServicePlan, container: ContainerFacts, driver: DeviceDriver
) -> list[str]:
    problems = [
        f"{key}={container.environment.get(key, '<unset>')!r}, planned {value!r}"
        for key, value in service.environment
        if container.environment.get(key) != value
    ]
    requests = container.device_requests
    if not service.has_gpu:
        if requests:
            problems.append(f"has {len(requests)} device request(s), planned none")
        return problems
    if len(requests) != 1:
        return [*problems, f"has {len(requests)} device requests, planned 1"]
    request = requests[0]
    planned = request_ids(driver, (device.uuid for device in service.devices))
    if request.driver != driver.value:
        problems.append(f"device request driver {request.driver!r}, planned {driver.value!r}")
    if request.device_ids != planned:
        problems.append(f"device ids {list(request.device_ids)}, planned {list(planned)}")
    if request.count:
        problems.append(f"device request count {request.count}: count selects the first GPUs")
    missing = set(service.capabilities) - set(request.capabilities)
    if missing and driver is DeviceDriver.NVIDIA:  # the engine's CDI driver ignores them
        problems.append(f"device request lacks capabilities {sorted(missing)}")
    return problems
