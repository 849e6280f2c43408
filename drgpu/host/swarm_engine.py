"""What a Swarm's engine says (through `docker_api`): a stack's services and their tasks,
its containers on this node, what is left of it, and this node and the swarm's nodes."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from drgpu.core import labels
from drgpu.core.facts import ContainerFacts, EngineFacts, NodeFacts, TaskFacts
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.core.swarm_node import GPU_KIND
from drgpu.core.swarm_view import SwarmState
from drgpu.errors import DockerError
from drgpu.host import docker_api
from drgpu.host.docker_api import Connection, filters
from drgpu.host.engine import containers, daemon_facts_of, environment, listing

TASK_ID_LABEL = "com.docker.swarm.task.id"
SOCKET = "/var/run/docker.sock"  # where the proof job finds its node's engine
JOB_TIMEOUT_S = 30.0
POLL_S = 0.1


def stack_containers(namespace: str) -> dict[str, ContainerFacts]:
    """This node's containers of a Swarm stack, by the id of the task each runs."""
    with docker_api.connected() as engine:
        found = containers(engine, _stack(namespace))
    return {
        container.labels[TASK_ID_LABEL]: container
        for container in found
        if TASK_ID_LABEL in container.labels
    }


def stack_tasks(namespace: str) -> list[TaskFacts]:
    """Every task of every service of a Swarm stack (the manager sees all nodes')."""
    with docker_api.connected() as engine:
        tasks = [
            _task_facts(str((service.get("Spec") or {}).get("Name") or ""), task)
            for service in _services(engine, namespace)
            for task in _tasks(engine, {"service": str(service["ID"])}, "list a service's tasks")
        ]
    return sorted(tasks, key=lambda task: (task.service, task.slot, task.id))


def managed_tasks(namespace: str) -> tuple[list[TaskFacts], str] | None:
    """Every task of a Swarm stack, and this node's id; None where this engine is no swarm
    manager, which cannot see other nodes' tasks."""
    swarm = docker_api.call("GET", "/info").checked("say what it is", 200).get("Swarm") or {}
    if not swarm.get("ControlAvailable"):
        return None
    return stack_tasks(namespace), str(swarm.get("NodeID") or "")


def task_log_tail(task_id: str, lines: int) -> list[str]:
    """A task's last log lines as the manager gathers them from its node (`docker service
    logs --tail`); none when they cannot be read."""
    answer = docker_api.call("GET", f"/tasks/{task_id}/logs?stdout=1&stderr=1&tail={lines}")
    if answer.status != 200:
        return []
    return docker_api.unframed(answer.body).decode("utf-8", "replace").splitlines()[-lines:]


def proofs_on_nodes(
    namespace: str,
    source: str,
    wanted: Mapping[str, Mapping[str, list[str]]],
    images: Mapping[str, str],
) -> tuple[dict[str, tuple[int, str]], dict[str, str]]:
    """The probe's (`source`) (exit code, output) by task id beside the stack's tasks on other
    nodes (`wanted`: node id: task id: its arguments), each node's job in the image of one of
    its tasks (`images`), and why each failed node's job failed."""
    results: dict[str, tuple[int, str]] = {}
    failures: dict[str, str] = {}
    jobs = {}
    for node, tasks in wanted.items():  # the job itself holds no GPU
        env = ["NVIDIA_VISIBLE_DEVICES=void", f"DRGPU_TASKS={json.dumps(tasks)}"]
        jobs[node] = (images[node], ["--on-node", namespace, node], env)
    for node, (said, failed) in on_nodes(f"proof-{namespace}", source, jobs).items():
        for line in said:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                results[line["task"]] = (int(line["exit_code"]), str(line["output"]))
        failure = failed or next((line["error"] for line in said if "error" in line), None)
        if failure:
            failures[node] = str(failure)
    return results, failures


def on_nodes(
    name: str, source: str, jobs: Mapping[str, tuple[str, list[str], list[str]]]
) -> dict[str, tuple[list[dict[str, Any]], str | None]]:
    """Run drgpu's probe (`source`) once on each node (`jobs`: node id: image, the probe's
    arguments, environment) with the node's engine socket (DRGPU_NODE_SOCKET, a Swarm template
    such as `/run/{{.Node.ID}}.sock`, else this engine's) and /proc at /host/proc: the JSON
    objects each job printed (`service logs`), and why it failed (None: it completed)."""
    said: dict[str, tuple[list[dict[str, Any]], str | None]] = {}
    with docker_api.connected() as engine:
        made = {
            node: engine.call("POST", "/services/create", _job(name, source, node, *job)).checked(
                "create a job on a node", 201
            )["ID"]
            for node, job in jobs.items()
        }
        try:
            for node, job in made.items():
                failure = _job_done(engine, job)
                logs = engine.call("GET", f"/services/{job}/logs?stdout=1&stderr=1")
                lines = []
                for line in docker_api.unframed(logs.body).decode("utf-8", "replace").splitlines():
                    with contextlib.suppress(ValueError):
                        lines.append(json.loads(line))
                said[node] = ([x for x in lines if isinstance(x, dict)], failure)
        finally:
            for job in made.values():
                engine.call("DELETE", f"/services/{job}")
    return said


def node_gpus(
    source: str, images: Mapping[str, str]
) -> dict[str, tuple[Inventory, dict[int, str]] | str]:
    """Each node's GPUs and their processes (with each PID's cgroup file), read on the
    node by the probe's `node_gpus` mode in a job seeing every GPU (`images`: node id: an
    image with python3); or why it could not be read."""
    env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"]
    jobs = {node: (image, ["--node-gpus"], env) for node, image in images.items()}
    try:
        said = on_nodes(f"status-{os.getpid()}", source, jobs)
    except DockerError as exc:
        return dict.fromkeys(images, f"the reading job failed: {exc.message}")
    read: dict[str, tuple[Inventory, dict[int, str]] | str] = {}
    for node, (lines, failure) in said.items():
        nvml: dict[str, Any] = next((line["nvml"] for line in lines if "nvml" in line), {})
        cgroups: dict[str, str] = next((line["cgroups"] for line in lines if "cgroups" in line), {})
        why = failure or nvml.get("error") or (None if nvml.get("available") else "no NVML")
        read[node] = f"the reading job said: {why}" if why else _inventory(nvml, cgroups)
    return read


def _inventory(
    nvml: Mapping[str, Any], cgroups: Mapping[str, str]
) -> tuple[Inventory, dict[int, str]]:
    """The probe's NVML section as an inventory (a query that failed: processes unknown)."""
    said = [(d, str(d.get("error") or "")) for d in nvml.get("devices") or []]
    gpus = tuple(
        Gpu(
            index=int(d["index"]),
            uuid=str(d.get("uuid") or ""),
            name=str(d.get("name") or "?"),
            pci_bus_id=str(d.get("pci_bus_id") or ""),
            memory_total_mib=int(d.get("memory_total_mib") or 0),
            memory_used_mib=int(d.get("memory_used_mib") or 0),
            processes=tuple(
                GpuProcess(int(p["pid"]), int(p["used_memory_mib"]), str(p["kind"]))
                for p in d.get("processes") or []
            ),
            error=error if "GPU is lost" in error else None,
            processes_unknown=error or "not read" if d.get("processes") is None else None,
        )
        for d, error in said
    )
    return Inventory(gpus, nvml.get("driver_version")), {int(k): str(v) for k, v in cgroups.items()}


def _job(
    name: str, source: str, node: str, image: str, arguments: list[str], env: list[str]
) -> dict[str, Any]:
    from drgpu.probe import LAUNCHER, SOURCE_VARIABLE

    proc = {"Type": "bind", "Source": "/proc", "Target": "/host/proc", "ReadOnly": True}
    path = os.environ.get("DRGPU_NODE_SOCKET") or docker_api.address().socket_path
    return {
        "Name": f"drgpu-{name}-{node[:12]}",
        "Labels": {"drgpu.proof": name},
        # a service, not a job: Docker < 24 never removes a deleted job's tasks and
        # containers (moby/moby#44312); one replica that is not restarted runs once
        "Mode": {"Replicated": {"Replicas": 1}},
        "TaskTemplate": {
            "ContainerSpec": {
                "Image": image,
                "Command": ["python3", "-c", LAUNCHER, *arguments],
                "Env": [f"{SOURCE_VARIABLE}={source}", *env],
                "Mounts": [{"Type": "bind", "Source": path or SOCKET, "Target": SOCKET}, proc],
            },
            "Placement": {"Constraints": [f"node.id=={node}"]},
            "RestartPolicy": {"Condition": "none"},
        },
    }


def _job_done(engine: Connection, job: str) -> str | None:
    """Wait until the job's task on its node ends; None when it completed, else why not."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        for task in _tasks(engine, {"service": job}, "list the job's task"):
            status = task.get("Status") or {}
            if status.get("State") == "complete":
                return None
            if status.get("State") in ("failed", "rejected", "shutdown"):
                return f"the proof job {status.get('State')}: {status.get('Err') or 'no error'}"
        time.sleep(POLL_S)
    return f"the proof job did not end in {JOB_TIMEOUT_S:.0f}s (is the node down?)"


def _services(engine: Connection, namespace: str) -> list[Mapping[str, Any]]:
    found = engine.call("GET", f"/services?filters={filters(_stack(namespace))}")
    return list(found.checked("list services", 200, kind=list))


def _tasks(engine: Connection, wanted: Mapping[str, str], what: str) -> list[Mapping[str, Any]]:
    found = engine.call("GET", f"/tasks?filters={filters(wanted)}")
    return list(found.checked(what, 200, kind=list))


def _stack(namespace: str) -> dict[str, str]:
    return {"label": f"{labels.SWARM_STACK}={namespace}"}


def _task_facts(service: str, task: Mapping[str, Any]) -> TaskFacts:
    spec = (task.get("Spec") or {}).get("ContainerSpec") or {}
    status = task.get("Status") or {}
    container = status.get("ContainerStatus") or {}
    tags = dict(spec.get("Labels") or {})
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
        run_id=tags.get(labels.RUN_ID, ""),
        labels=tags,
        started=bool(container.get("PID")),
        image=str(spec.get("Image") or ""),
        container_id=str(container.get("ContainerID") or ""),
        version=int((task.get("Version") or {}).get("Index") or 0),
    )


def swarm_picture(engine: Connection, here: str) -> SwarmState | None:
    """Every node of the swarm and every task of drgpu's stacks, as the manager records
    them (`here`: this node's id, whose GPUs are read; None: this engine is no manager)."""
    nodes = _nodes(engine)
    if nodes is None:
        return None
    services = engine.call("GET", "/services").checked("list services", 200, kind=list)
    names = {s["ID"]: str((s.get("Spec") or {}).get("Name") or "") for s in services}
    tasks = [
        _task_facts(names.get(task.get("ServiceID"), ""), task)
        for task in engine.call("GET", "/tasks").checked("list tasks", 200, kind=list)
    ]
    return SwarmState(nodes, tuple(task for task in tasks if task.run_id), (here,), here=here)


def _nodes(engine: Connection) -> tuple[NodeFacts, ...] | None:
    answer = engine.call("GET", "/nodes")
    if answer.status == 503:
        return None
    return tuple(map(_node_facts, answer.checked("list the swarm's nodes", 200, kind=list)))


def _node_facts(node: Mapping[str, Any]) -> NodeFacts:
    description, spec = node.get("Description") or {}, node.get("Spec") or {}
    resources = (description.get("Resources") or {}).get("GenericResources") or []
    named = _named_resources(resources)
    return NodeFacts(
        id=str(node["ID"]),
        hostname=str(description.get("Hostname") or "?"),
        role=str(spec.get("Role") or ""),
        state=str((node.get("Status") or {}).get("State") or "unknown"),
        labels=spec.get("Labels") or {},
        availability=str(spec.get("Availability") or "active"),
        advertised_gpus=tuple(value for kind, value in named if kind == GPU_KIND),
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
    (a removed service's tasks linger: `docker stack ps`, which DRfC's start asks, lists them)."""
    label = _stack(namespace)
    with docker_api.connected() as engine:
        networks = engine.call("GET", f"/networks?filters={filters(label)}")
        tasks = _tasks(engine, label, "list tasks")
        return {
            "services": len(_services(engine, namespace)),
            "tasks": len(tasks),
            "containers": len(listing(engine, label)),
            "networks": len(networks.checked("list networks", 200, kind=list)),
        }


def stack_service_count(namespace: str) -> int:
    """How many Swarm services the stack `namespace` has; 0 on an engine that is no swarm
    manager (it has no services to ask about)."""
    answer = docker_api.call("GET", f"/services?filters={filters(_stack(namespace))}")
    if answer.status == 503:  # this node is not a swarm manager
        return 0
    return len(answer.checked("list services", 200, kind=list))


def this_swarm() -> tuple[EngineFacts | None, str | None]:
    """This engine's swarm facts; when it cannot be asked, None and why."""
    try:
        return engine_facts(), None
    except DockerError as exc:
        return None, f"cannot ask the swarm ({exc.message}): laid out for a one-node swarm"


def engine_facts() -> EngineFacts:
    """This node's engine: runtimes, advertised generic resources, Swarm state and labels,
    and on a manager every node of the swarm (one listing)."""
    with docker_api.connected() as engine:
        answer = engine.call("GET", "/info")
        info = answer.checked("say what it is", 200)
        swarm = info.get("Swarm") or {}
        manager = swarm.get("LocalNodeState") == "active" and swarm.get("ControlAvailable")
        nodes = (_nodes(engine) or ()) if manager else ()
        here = next((dict(node.labels) for node in nodes if node.id == swarm.get("NodeID")), {})
    return replace(
        daemon_facts_of(info, answer.headers),
        generic_resources=tuple(map(_resource_text, info.get("GenericResources") or [])),
        swarm_state=str(swarm.get("LocalNodeState") or "inactive"),
        node_labels=here if manager else None,
        node_id=str(swarm.get("NodeID") or ""),
        nodes=nodes,
    )
