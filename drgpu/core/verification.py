"""Prove a started stack matches its plan: its Compose containers, or its Swarm tasks."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from drgpu.core.device_driver import request_ids
from drgpu.core.facts import ContainerFacts, EngineFacts, NodeFacts, TaskFacts
from drgpu.core.labels import ROLE, SERVICE, split_list
from drgpu.core.model import Plan, Role, ServicePlan
from drgpu.core.modes import DeviceDriver, Sharing
from drgpu.core.service_gpus import SwarmService, SwarmStack
from drgpu.core.swarm_node import (
    GPU_KIND,
    NODE_LABELS,
    PINNED_VARIABLE,
    RESOURCE_VARIABLE,
    RUNTIME,
    SWARM_GPUS_KEY,
    SwarmLayout,
    reserved_gpus,
)
from drgpu.core.swarm_view import given_up, slot_of
from drgpu.errors import DockerError, GpuValidationError

CONSTRAINT_RACE = "no longer meets constraints"


def verify(plan: Plan, containers: list[ContainerFacts]) -> list[str]:
    """Every way the containers differ from the plan; empty when they match."""
    problems: list[str] = []
    for service in plan.services:
        mine = [container for container in containers if container.service == service.name]
        problems.extend(f"{c.name}: {p}" for c in mine if (p := c.stop_problem(service.has_gpu)))
        if service.disabled and mine:
            problems.append(f"service {service.name} has {len(mine)} container(s), planned 0")
        elif not (mine or service.disabled or service.placeholder):
            problems.append(f"service {service.name} has no container")
        for container in [] if service.disabled else mine:
            found = _container_problems(service, container, plan.device_driver, containers)
            problems.extend(f"{container.name}: {p}" for p in found)
    return problems


def start_refused(
    plan: Plan, containers: Iterable[ContainerFacts], *, by_script: bool
) -> str | None:
    """Why the plan must not start over its Compose project's containers (None: nothing is in
    the way): simulators running without a container of any of its trainers (DRfC's
    dr-stop-training leaves drgpu's workers, which Compose would keep beside a new trainer);
    or any container where DRfC's start script starts it (`by_script`)."""
    trainers = {s.name for s in plan.services if s.role in (Role.TRAINER, Role.TRAINER_LAUNCHER)}
    compose = [c for c in containers if SERVICE in c.labels]  # a Swarm stack goes whole
    left = [c.service for c in compose if not c.stopped]  # the MPS daemon too, where it runs
    simulators = any(c.labels.get(ROLE) == Role.SIMULATOR and not c.stopped for c in compose)
    if trainers and simulators and not any(c.service in trainers for c in compose):
        return (
            f"{plan.project}: {', '.join(left)} still run without {', '.join(sorted(trainers))},"
            " left by a stop without drgpu's override (as DRfC's dr-stop-training leaves"
            " drgpu's workers)"
        )
    if by_script and compose:
        return (
            f"{plan.project} has containers already ({', '.join(c.name for c in compose)}):"
            " DRfC's start script would start a second SageMaker trainer beside its own"
            " (and -w would wipe the model it trains)"
        )
    return None


def stopped_badly(
    plan: Plan, containers: Iterable[ContainerFacts]
) -> list[tuple[ContainerFacts, str]]:
    """Each container whose state fails verification, and why (as `verify` words it)."""
    planned = {service.name: service for service in plan.services}
    return [
        (container, problem)
        for container in containers
        if container.service in planned
        and (problem := container.stop_problem(planned[container.service].has_gpu))
    ]


def _container_problems(
    service: ServicePlan,
    container: ContainerFacts,
    driver: DeviceDriver,
    containers: list[ContainerFacts],
) -> list[str]:
    requests = container.device_requests
    if service.placeholder:  # its replicas run `true`: only their device requests count
        return [f"has {len(requests)} device request(s), planned none"] if requests else []
    problems = _unlike(service.environment, container.environment)
    if requests and not service.has_gpu:
        problems.append(f"has {len(requests)} device request(s), planned none")
    elif service.has_gpu and len(requests) != 1:
        problems.append(f"has {len(requests)} device requests, planned 1")
    elif service.has_gpu:
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
    ipc = service.ipc or ""
    owner = ipc.removeprefix("service:")  # an MPS client shares its daemon's IPC namespace
    wanted = {f"container:{c.id}" for c in containers if c.service == owner}
    if owner != ipc and container.ipc_mode not in wanted:
        problems.append(f"IPC mode {container.ipc_mode!r}, planned the IPC namespace of {owner}")
    return problems


def _unlike(planned: Iterable[tuple[str, str]], environment: Mapping[str, str]) -> list[str]:
    """Each planned variable the environment lacks or holds otherwise."""
    return [
        f"{key}={environment.get(key, '<unset>')!r}, planned {value!r}"
        for key, value in planned
        if environment.get(key) != value
    ]


def stack_service_name(project: str, service: str) -> str:
    """The name Swarm gives a stack's service."""
    return f"{project}_{service}"


def waiting_on(stack: SwarmStack, tasks: list[TaskFacts]) -> tuple[list[str], list[str]]:
    """What the deployed stack still waits for, and what will not resolve by waiting."""
    waiting: list[str] = []
    stuck: list[str] = []
    for service in stack.services:
        full = stack_service_name(stack.project, service.name)
        own = [task for task in tasks if task.service == full]
        wanted = [task for task in own if task.desired_state == "running"]
        running = [task for task in wanted if task.state == "running"]
        # A service without GPUs whose command ended well is done, as in Compose style
        # (DRfC's evaluation rl_coach echoes and exits); a GPU service must keep running.
        done = 0 if service.gpus else sum(task.state == "complete" for task in own)
        unfinished = sum(task.state != "complete" for task in wanted)
        if len(running) + done < (service.replicas or 1) or len(running) < unfinished:
            waiting.append(f"{service.name}: {len(running)}/{service.replicas or 1} running")
        stuck.extend(
            f"{service.name}: {task.error}"
            for task in wanted
            if task.state == "pending" and task.error.startswith("no suitable node")
        )
        ended_states = ("failed", "rejected", *(("complete",) if service.gpus else ()))
        ended = sorted((t for t in own if t.state in ended_states), key=lambda t: t.version)
        # Stuck: a slot Swarm gave up (its restart condition none), or every task ended.
        gave_up = {slot_of(task) for task in given_up(own)}
        ended = [t for t in ended if slot_of(t) in gave_up] or ([] if running else ended)
        # Docker 20.10 rejects a task whose node "no longer meets constraints" while the
        # node's own failure is the real one: name that, the race is noise.
        real = [t for t in ended if CONSTRAINT_RACE not in t.error] or ended
        if ended:
            stuck.append(
                f"{service.name}: task {real[-1].state}: {real[-1].error or 'its command ended'}"
            )
    return waiting, stuck


def stuck_hint(stuck: list[str]) -> str:
    """What helps with the reasons `waiting_on` found stuck, else how to see them whole."""
    hints = [hint for cause, hint in STUCK_HINTS if any(cause in reason for reason in stuck)]
    return "\n  ".join(hints) or "`docker service ps --no-trunc <stack>_<service>` shows why"


STUCK_HINTS = (
    (
        "no suitable node",
        "each GPU task needs a node with the label and free NVIDIA-GPU resources:"
        " `drgpu swarm-setup` on each node, `docker node update --label-add`",
    ),
    (
        CONSTRAINT_RACE,
        "Docker 20.10 rejects a GPU task as its node first joins the stack's network, and a"
        " restart condition none never replaces it: `drgpu up` again (the node has joined)",
    ),
    (
        "bind source path does not exist",
        "a bind mount's source is missing on the task's node: create it there, or fix the"
        " volume in the compose files (rl_coach mounts the engine's /var/run/docker.sock)",
    ),
)


def verify_tasks(
    stack: SwarmStack, tasks: list[TaskFacts], containers: Mapping[str, ContainerFacts]
) -> list[str]:
    """Every way the running tasks differ from the stack (`containers`: this node's, by task id,
    what each task really got); empty when they match."""
    node = stack.layout.node_id
    problems: list[str] = []
    holders: dict[tuple[str, str], list[tuple[SwarmService, str]]] = {}
    pinned_here = {
        uuid: service.name for service in stack.services for slot in service.pinned for uuid in slot
    }
    for service in stack.services:
        full = stack_service_name(stack.project, service.name)
        for task in tasks:
            if task.service != full or task.state != "running":
                continue
            label = f"{service.name}.{task.slot}"
            container = containers.get(task.id)
            given, found_problems = _task_gpus(service, task, container, node)
            problems.extend(f"{label}: {problem}" for problem in found_problems)
            if service.reserves:
                problems.extend(
                    f"{label} was given GPU {uuid}, pinned for {pinned_here[uuid]}"
                    for uuid in given
                    if uuid in pinned_here and (node is None or task.node_id == node)
                )
            for uuid in given:
                holders.setdefault((task.node_id, uuid), []).append((service, label))
            environment = container.environment if container else task.environment
            problems.extend(
                f"{label}: {problem}"
                for problem in _unlike(service.environment_for(task.slot).items(), environment)
                if container or "{{" not in problem  # a template not yet expanded
            )
    for (node_id, uuid), names in sorted(holders.items()):
        # the workers of one simulator service may share a GPU, no other two tasks
        first = names[0][0]
        workers = first.role is Role.SIMULATOR and all(s.name == first.name for s, _ in names)
        if len(names) > 1 and stack.sharing == Sharing.EXCLUSIVE and not workers:
            tasks_text = " and ".join(label for _service, label in names)
            problems.append(f"GPU {uuid} of node {node_id[:12]} is given to {tasks_text}")
    return problems


def _task_gpus(
    service: SwarmService, task: TaskFacts, container: ContainerFacts | None, node: str | None
) -> tuple[tuple[str, ...], list[str]]:
    """The GPUs a task really got, and what is wrong with them."""
    reserved = reserved_gpus(task)
    problems: list[str] = []
    pinned = service.pinned_for(task.slot)
    if service.reserves:
        if len(reserved) != service.gpus:
            problems.append(f"holds {len(reserved)} {GPU_KIND}, planned {service.gpus}")
        variable = container.environment.get(RESOURCE_VARIABLE) if container else None
        if container is not None and sorted(split_list(variable)) != sorted(reserved):
            problems.append(f"{RESOURCE_VARIABLE}={variable!r}, the engine reserved {reserved}")
        return reserved, problems
    if pinned is None:
        if reserved:
            problems.append(f"holds {GPU_KIND} {', '.join(reserved)}, planned none")
        return reserved, problems
    if reserved:
        problems.append(
            f"holds {GPU_KIND} {', '.join(reserved)}: the NVIDIA runtime would expose those"
            f" ({RESOURCE_VARIABLE}) instead of its pinned GPUs"
        )
    there = service.node or node  # another node's GPUs are proven there (`probes_elsewhere`)
    if there is not None and task.node_id != there:
        problems.append(f"runs on node {task.node_id[:12]}, pinned to node {there[:12]}")
    elif container is None and there == node:
        problems.append("no container of it on this node: its GPUs cannot be checked")
    elif container is not None:
        visible, wanted = container.environment.get(PINNED_VARIABLE), ",".join(pinned)
        if visible != wanted:
            problems.append(f"{PINNED_VARIABLE}={visible!r}, planned {wanted!r}")
        if RESOURCE_VARIABLE in container.environment:
            problems.append(
                f"{RESOURCE_VARIABLE}={container.environment[RESOURCE_VARIABLE]!r}, which the"
                " NVIDIA runtime prefers to its pinned GPUs"
            )
    return pinned, problems


def short_of_gpus(services: Collection[SwarmService], nodes: Collection[NodeFacts]) -> str | None:
    """Why the reserving tasks cannot all start (Swarm would leave some pending): they need more
    GPUs than the ready, active simulator nodes advertise; None if they fit or no node is known."""
    wanted = sum(s.gpus * (s.replicas or 1) for s in services if s.reserves)
    label = NODE_LABELS[1]
    taking = (n for n in nodes if n.state == "ready" and n.availability == "active")
    room = sum(len(n.advertised_gpus) for n in taking if n.labels.get(label) == "true")
    if not nodes or wanted <= room:
        return None
    names = ", ".join(s.name for s in services if s.reserves)
    return (
        f"{names}: {wanted} {GPU_KIND} resource(s) reserved in all, but the ready, active"
        f" nodes labelled {label} advertise {room} by UUID"
    )


def exposed_gpus(services: tuple[SwarmService, ...], layout: SwarmLayout) -> list[str]:
    """GPUs pinned for a service that this node also advertises while simulators reserve
    generic resources: the engine could give a simulator one of them."""
    if not any(service.reserves for service in services):
        return []
    problems: list[str] = []
    for service in services:
        uuids = {uuid for slot in service.pinned for uuid in slot}
        if service.role is Role.TRAINER_LAUNCHER:
            uuids |= set(service.forwarded)
        problems.extend(
            f"GPU {uuid}, pinned for {service.name}, is advertised to Swarm by this node"
            f" ({GPU_KIND}={uuid}): the engine may give it to a simulator"
            for uuid in sorted(uuids)
            if uuid in layout.advertised
        )
    return problems


def check_node(stack: SwarmStack, facts: EngineFacts) -> None:
    """Refuse a stack this node would not isolate (`exposed_gpus`; pinned GPUs need the nvidia
    default runtime) or the swarm cannot place (`short_of_gpus`)."""
    if exposed := exposed_gpus(stack.services, stack.layout):
        raise GpuValidationError(
            exposed,
            hint="`drgpu swarm-setup` prints node-generic-resources without the trainer's GPU"
            f" (then restart dockerd), or {SWARM_GPUS_KEY}=pin runs the simulators on this node",
        )
    if short := short_of_gpus(stack.services, facts.nodes):
        raise GpuValidationError(
            [short],
            hint="fewer workers (DR_WORKERS), or more nodes advertising GPUs: `drgpu"
            f" swarm-setup` on each, and `docker node update --label-add {NODE_LABELS[1]}=true`",
        )
    pinned = [s.name for s in stack.services if s.pinned]
    # On a node in no swarm, `docker stack deploy` itself says so: that is the error to give.
    if pinned and facts.swarm_state == "active" and facts.default_runtime != RUNTIME:
        raise DockerError(
            f"this node's default runtime is {facts.default_runtime or 'unknown'}, not"
            f" {RUNTIME}: Swarm tasks would get no GPU ({', '.join(pinned)})",
            hint="`drgpu swarm-setup` prints the daemon.json this node needs",
        )
