"""What a Swarm's engine says (through `docker_api`): a stack's services and their tasks,
its containers on this node, what is left of it, and this node and the swarm's nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drgpu.core.facts import ContainerFacts, EngineFacts, TaskFacts
from drgpu.errors import DockerError
from drgpu.host import docker_api
from drgpu.host.docker_api import Connection, filters
from drgpu.host.engine import STACK_LABEL, containers, environment, listing

TASK_ID_LABEL = "com.docker.swarm.task.id"


def stack_containers(namespace: str) -> dict[str, ContainerFacts]:
    """This node's containers of a Swarm stack, by the id of the task each runs."""
    with docker_api.connected() as engine:
        found = containers(engine, {"label": f"{STACK_LABEL}={namespace}"})
    return {
        container.labels[TASK_ID_LABEL]: container
        for container in found
        if TASK_ID_LABEL in container.labels
    }


def stack_tasks(namespace: str) -> list[TaskFacts]:
    """Every task of every service of a Swarm stack (the manager sees all nodes')."""
    with docker_api.connected() as engine:
        tasks = [
            (str((service.get("Spec") or {}).get("Name") or ""), task)
            for service in _services(engine, namespace)
            for task in engine.call(
                "GET", f"/tasks?filters={filters({'service': str(service['ID'])})}"
            ).checked("list a service's tasks", 200)
        ]
    return sorted(
        (_task_facts(name, task) for name, task in tasks),
        key=lambda task: (task.service, task.slot, task.id),
    )


def task_log_tail(task_id: str, lines: int) -> list[str]:
    """A task's last log lines as the manager gathers them from its node (`docker service
    logs --tail`); none when they cannot be read."""
    query = f"stdout=1&stderr=1&tail={lines}"
    answer = docker_api.call("GET", f"/tasks/{task_id}/logs?{query}")
    if answer.status != 200:
        return []
    return docker_api.unframed(answer.body).decode("utf-8", "replace").splitlines()[-lines:]


def _services(engine: Connection, namespace: str) -> list[Mapping[str, Any]]:
    query = filters({"label": f"{STACK_LABEL}={namespace}"})
    found = engine.call("GET", f"/services?filters={query}").checked("list services", 200)
    return list(found or [])


def _task_facts(service: str, task: Mapping[str, Any]) -> TaskFacts:
    spec = (task.get("Spec") or {}).get("ContainerSpec") or {}
    status = task.get("Status") or {}
    return TaskFacts(
        id=task["ID"],
        service=service,
        slot=int(task.get("Slot") or 0),
        node_id=task.get("NodeID") or "",
        state=status.get("State") or "unknown",
        desired_state=task.get("DesiredState") or "",
        error=status.get("Err") or "",
        environment=environment(spec.get("Env")),
        generic_resources=_named_resources(task.get("GenericResources") or []),
    )


def _named_resources(resources: list[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    named = (resource.get("NamedResourceSpec") for resource in resources)
    return tuple((spec["Kind"], spec["Value"]) for spec in named if spec)


def _resource_text(resource: Mapping[str, Any]) -> str:
    """`KIND=VALUE`, as daemon.json's node-generic-resources writes it."""
    spec = resource.get("NamedResourceSpec") or resource.get("DiscreteResourceSpec") or {}
    return f"{spec.get('Kind', '?')}={spec.get('Value', '?')}"


def stack_leftovers(namespace: str) -> dict[str, int]:
    """How many services, tasks, containers (on this node) and networks of a stack are left
    (a removed service's tasks linger a moment: `docker stack ps`, which DRfC's start
    script asks, still lists them)."""
    label = {"label": f"{STACK_LABEL}={namespace}"}
    with docker_api.connected() as engine:
        networks = engine.call("GET", f"/networks?filters={filters(label)}")
        tasks = engine.call("GET", f"/tasks?filters={filters(label)}")
        return {
            "services": len(_services(engine, namespace)),
            "tasks": len(tasks.checked("list tasks", 200) or []),
            "containers": len(listing(engine, label)),
            "networks": len(networks.checked("list networks", 200) or []),
        }


def stack_service_count(namespace: str) -> int:
    """How many Swarm services the stack `namespace` has; 0 on an engine that is no swarm
    manager (it has no services to ask about)."""
    query = filters({"label": f"{STACK_LABEL}={namespace}"})
    answer = docker_api.call("GET", f"/services?filters={query}")
    if answer.status == 503:  # this node is not a swarm manager
        return 0
    return len(answer.checked("list services", 200))


def this_swarm() -> tuple[EngineFacts | None, str | None]:
    """This engine's swarm facts; when it cannot be asked, None and why."""
    try:
        return engine_facts(), None
    except DockerError as exc:
        return None, f"cannot ask the swarm ({exc.message}): laid out for a one-node swarm"


def engine_facts() -> EngineFacts:
    """This node's engine: runtimes, advertised generic resources, Swarm state and labels."""
    with docker_api.connected() as engine:
        info = engine.call("GET", "/info").checked("say what it is", 200) or {}
        swarm = info.get("Swarm") or {}
        node_labels: Mapping[str, str] | None = None
        nodes: dict[str, Mapping[str, str]] = {}
        if swarm.get("LocalNodeState") == "active" and swarm.get("ControlAvailable"):
            for node in engine.call("GET", "/nodes").checked("list the swarm's nodes", 200):
                nodes[str(node["ID"])] = (node.get("Spec") or {}).get("Labels") or {}
            node_labels = nodes.get(swarm["NodeID"], {})
    return EngineFacts(
        version=str(info.get("ServerVersion") or ""),
        default_runtime=str(info.get("DefaultRuntime") or ""),
        runtimes=tuple(sorted(info.get("Runtimes") or {})),
        generic_resources=tuple(
            _resource_text(resource) for resource in info.get("GenericResources") or []
        ),
        swarm_state=str(swarm.get("LocalNodeState") or "inactive"),
        node_labels=None if node_labels is None else dict(node_labels),
        node_id=str(swarm.get("NodeID") or ""),
        swarm_nodes=nodes,
    )
