"""Docker Swarm: a plan as a complete stack file whose GPU services reserve generic resources.

Swarm cannot carry device requests. Each node advertises its GPUs as named generic
resources (daemon.json: `"node-generic-resources": ["NVIDIA-GPU=GPU-<uuid>", ...]`), a
service reserves a number of them (`generic_resources`, kind `NVIDIA-GPU`), and the
engine picks which: the container gets `DOCKER_RESOURCE_NVIDIA-GPU=<uuid>,...`, which the
NVIDIA runtime reads in place of NVIDIA_VISIBLE_DEVICES when its config.toml says
`swarm-resource = "DOCKER_RESOURCE_NVIDIA-GPU"`. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drgpu.core import labels
from drgpu.core.model import Plan, Role, ServicePlan
from drgpu.core.swarm_node import (
    GPU_KIND,
    RESOURCE_VARIABLE,
    SIMULATOR_CONSTRAINT,
    TRAINER_CONSTRAINT,
)

if TYPE_CHECKING:
    from drgpu.core.facts import TaskFacts

HEADER = """\
# Written by drgpu for swarm stack {project}: GPU services reserve {kind} generic resources.
# Do not edit: `drgpu up` writes it anew. Change system.env and run `drgpu plan` instead.
# The engine picks each task's GPUs and sets {variable}=<uuids> in its container;
# the NVIDIA runtime reads it (`drgpu swarm-setup` checks a node is set up for that).
"""
# The service keys of the Compose file format 3.13 that `docker stack deploy` reads.
STACK_SERVICE_KEYS = frozenset(
    [
        "build",
        "cap_add",
        "cap_drop",
        "cgroupns_mode",
        "cgroup_parent",
        "command",
        "configs",
        "container_name",
        "credential_spec",
        "depends_on",
        "deploy",
        "devices",
        "dns",
        "dns_search",
        "domainname",
        "entrypoint",
        "env_file",
        "environment",
        "expose",
        "external_links",
        "extra_hosts",
        "group_add",
        "healthcheck",
        "hostname",
        "image",
        "init",
        "ipc",
        "isolation",
        "labels",
        "links",
        "logging",
        "mac_address",
        "network_mode",
        "networks",
        "pid",
        "ports",
        "privileged",
        "read_only",
        "restart",
        "security_opt",
        "shm_size",
        "secrets",
        "sysctls",
        "stdin_open",
        "stop_grace_period",
        "stop_signal",
        "tmpfs",
        "tty",
        "ulimits",
        "oom_score_adj",
        "user",
        "userns_mode",
        "volumes",
        "working_dir",
    ]
)
DEPLOY_KEYS = frozenset(
    [
        "mode",
        "endpoint_mode",
        "replicas",
        "labels",
        "rollback_config",
        "update_config",
        "resources",
        "restart_policy",
        "placement",
    ]
)
_PORT_KEYS = ("mode", "target", "published", "protocol")
_TOP_LEVEL_KEYS = ("networks", "volumes", "secrets", "configs")


@dataclass(frozen=True)
class SwarmService:
    """What drgpu sets on one service of the stack."""

    name: str
    role: Role
    gpus: int
    replicas: int | None
    environment: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    constraint: str | None


@dataclass(frozen=True)
class SwarmStack:
    """A rendered stack file and what drgpu expects of it once deployed."""

    project: str
    text: str
    services: tuple[SwarmService, ...]
    warnings: tuple[str, ...]


def swarm_services(plan: Plan, names: Collection[str], workers: int) -> tuple[SwarmService, ...]:
    """Each planned service of the stack as Swarm gets it.

    A GPU service reserves as many GPUs as the plan gives it. The simulator workers
    are replicas of the stack's one simulator service, each reserving one worker's GPUs.
    """
    simulators = [s for s in plan.services if s.role is Role.SIMULATOR and s.name in names]
    per_worker = max(
        (len(s.devices) for s in plan.services if s.role is Role.SIMULATOR and s.has_gpu),
        default=0,
    )
    single_simulator = len(simulators) == 1
    return tuple(
        _swarm_service(plan, service, per_worker if single_simulator else None, workers)
        for service in plan.services
        if service.name in names
    )


def _swarm_service(
    plan: Plan, service: ServicePlan, per_worker: int | None, workers: int
) -> SwarmService:
    replicas = None
    gpus = len(service.devices) if service.has_gpu else 0
    constraint = None
    if service.role is Role.SIMULATOR:
        constraint = SIMULATOR_CONSTRAINT
        if per_worker is not None:
            gpus, replicas = per_worker, workers
    elif service.role in (Role.TRAINER, Role.TRAINER_LAUNCHER):
        constraint = TRAINER_CONSTRAINT
    environment = gpu_environment(gpus) if gpus else service.environment
    return SwarmService(
        name=service.name,
        role=service.role,
        gpus=gpus,
        replicas=replicas,
        environment=environment,
        labels=(
            (labels.ROLE, service.role.value),
            (labels.RUN_ID, plan.run_id),
            ("drgpu.swarm_gpus", str(gpus)),
        ),
        constraint=constraint,
    )


def gpu_environment(gpus: int) -> tuple[tuple[str, str], ...]:
    """The variables of a container given `gpus` GPUs by the engine.

    NVIDIA_VISIBLE_DEVICES=void fails closed: the runtime prefers the swarm resource
    variable, and a node not set up for it gives the container no GPU, never all of them.
    The container sees only its GPUs, so CUDA's indices are 0..gpus-1.
    """
    return (
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ("CUDA_VISIBLE_DEVICES", ",".join(str(index) for index in range(gpus))),
        ("NVIDIA_VISIBLE_DEVICES", "void"),
    )


def render_stack(
    plan: Plan, model: Mapping[str, Any], services: tuple[SwarmService, ...]
) -> SwarmStack:
    """The stack file for `docker stack deploy`: Compose's resolved model, made Swarm's."""
    import yaml

    mine = {service.name: service for service in services}
    warnings: list[str] = []
    document: dict[str, Any] = {
        "services": {
            name: _stack_service(name, body, mine.get(name), warnings)
            for name, body in (model.get("services") or {}).items()
        }
    }
    for key in _TOP_LEVEL_KEYS:
        if model.get(key):
            document[key] = model[key]
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    header = HEADER.format(project=plan.project, kind=GPU_KIND, variable=RESOURCE_VARIABLE)
    return SwarmStack(
        project=plan.project, text=header + body, services=services, warnings=tuple(warnings)
    )


def _stack_service(
    name: str, body: Mapping[str, Any], swarm: SwarmService | None, warnings: list[str]
) -> dict[str, Any]:
    service = {key: value for key, value in body.items() if value is not None and key != "gpus"}
    dropped = sorted(key for key in service if key not in STACK_SERVICE_KEYS)
    if dropped:
        warnings.append(f"swarm has no {', '.join(dropped)}: left out of service {name}")
    service = {key: value for key, value in service.items() if key not in dropped}
    if isinstance(service.get("depends_on"), dict):
        service["depends_on"] = sorted(service["depends_on"])
    if "ports" in service:
        service["ports"] = [_port(port) for port in service["ports"]]
    deploy = {k: v for k, v in (service.get("deploy") or {}).items() if k in DEPLOY_KEYS}
    resources = dict(deploy.get("resources") or {})
    reservations = dict(resources.get("reservations") or {})
    reservations.pop("devices", None)
    generic = [
        resource
        for resource in reservations.get("generic_resources") or []
        if (resource.get("discrete_resource_spec") or {}).get("kind") != GPU_KIND
    ]
    if swarm is not None:
        service["environment"] = {**(service.get("environment") or {}), **dict(swarm.environment)}
        service["labels"] = {**(service.get("labels") or {}), **dict(swarm.labels)}
        if swarm.replicas is not None:
            deploy["replicas"] = swarm.replicas
        if swarm.constraint is not None:
            placement = dict(deploy.get("placement") or {})
            constraints = list(placement.get("constraints") or [])
            if swarm.constraint not in constraints:
                constraints.append(swarm.constraint)
            deploy["placement"] = {**placement, "constraints": constraints}
        if swarm.gpus:
            generic.append({"discrete_resource_spec": {"kind": GPU_KIND, "value": swarm.gpus}})
    _set_or_drop(reservations, "generic_resources", generic)
    _set_or_drop(resources, "reservations", reservations)
    _set_or_drop(deploy, "resources", resources)
    _set_or_drop(service, "deploy", deploy)
    return service


def _set_or_drop(node: dict[str, Any], key: str, value: Any) -> None:
    if value:
        node[key] = value
    else:
        node.pop(key, None)


def _port(port: Any) -> Any:
    """A port in the long syntax of the 3.x format (a published port is a number there)."""
    if not isinstance(port, dict):
        return port
    kept = {key: port[key] for key in _PORT_KEYS if port.get(key) is not None}
    if isinstance(kept.get("published"), str) and kept["published"].isdigit():
        kept["published"] = int(kept["published"])
    return kept


def stack_service_name(project: str, service: str) -> str:
    """The name Swarm gives a stack's service."""
    return f"{project}_{service}"


def waiting_on(stack: SwarmStack, tasks: list[TaskFacts]) -> tuple[list[str], list[str]]:
    """What the deployed stack still waits for, and what will not resolve by waiting."""
    waiting: list[str] = []
    stuck: list[str] = []
    for service in stack.services:
        full = stack_service_name(stack.project, service.name)
        wanted = [
            task for task in tasks if task.service == full and task.desired_state == "running"
        ]
        running = [task for task in wanted if task.state == "running"]
        if len(running) < (service.replicas or 1) or len(running) < len(wanted):
            waiting.append(f"{service.name}: {len(running)}/{service.replicas or 1} running")
        stuck.extend(
            f"{service.name}: {task.error}"
            for task in wanted
            if task.state == "pending" and task.error.startswith("no suitable node")
        )
        ended = [t for t in tasks if t.service == full and t.state in ("failed", "rejected")]
        if ended and not running:
            stuck.append(f"{service.name}: task {ended[-1].state}: {ended[-1].error or '?'}")
    return waiting, stuck


def verify_tasks(stack: SwarmStack, tasks: list[TaskFacts]) -> list[str]:
    """Every way the running tasks differ from the stack; empty when they match."""
    problems: list[str] = []
    holders: dict[tuple[str, str], list[str]] = {}
    for service in stack.services:
        full = stack_service_name(stack.project, service.name)
        for task in tasks:
            if task.service != full or task.state != "running":
                continue
            label = f"{service.name}.{task.slot}"
            gpus = [value for kind, value in task.generic_resources if kind == GPU_KIND]
            if len(gpus) != service.gpus:
                problems.append(f"{label} holds {len(gpus)} {GPU_KIND}, planned {service.gpus}")
            for uuid in gpus:
                holders.setdefault((task.node_id, uuid), []).append(label)
            problems.extend(
                f"{label}: {key}={task.environment.get(key, '<unset>')!r}, planned {value!r}"
                for key, value in service.environment
                if task.environment.get(key) != value
            )
    problems.extend(
        f"GPU {uuid} of node {node[:12]} is given to {' and '.join(names)}"
        for (node, uuid), names in sorted(holders.items())
        if len(names) > 1
    )
    return problems
