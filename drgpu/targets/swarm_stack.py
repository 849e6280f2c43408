"""Docker Swarm: a plan as a complete stack file, each GPU service pinned (its GPUs in
NVIDIA_VISIBLE_DEVICES, per replica slot) or reserving `NVIDIA-GPU` generic resources
(docs/swarm.md), or as the override DRfC's swarm style appends to its files (docs/drfc.md)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from drgpu.core import labels
from drgpu.core.facts import NodeFacts
from drgpu.core.model import HEADER_MARK, Plan, Role
from drgpu.core.numbers import is_digits
from drgpu.core.redaction import masked, masked_data, service_secrets
from drgpu.core.service_gpus import (
    ONE_NODE,
    TEMPLATED_KEYS,
    ServiceGpus,
    SwarmService,
    SwarmStack,
    own_gpus_environment,
    service_gpus,
)
from drgpu.core.swarm_node import (
    GPU_KIND,
    RESOURCE_VARIABLE,
    SIMULATOR_CONSTRAINT,
    TRAINER_CONSTRAINT,
    SwarmLayout,
)
from drgpu.targets.compose_override import compose_text, dump_yaml

HEADER = f"""\
# Written by drgpu for swarm stack {{project}}: {{how}}.
# Do not edit: `drgpu up` writes it anew. Change system.env and run `drgpu plan` instead.
# A pinned service names its GPUs in NVIDIA_VISIBLE_DEVICES, which the node's default
# runtime (nvidia) obeys; a reserving one gets {RESOURCE_VARIABLE}=<uuids> from the engine.
"""
OVERRIDE_HEADER = f"""\
{HEADER_MARK} for swarm stack {{project}}: appended to DRfC's -c list.
# Do not edit: `drgpu up` (or `drgpu drfc-env`) writes it anew; `drgpu down` removes it.
# Each GPU service names its GPUs in NVIDIA_VISIBLE_DEVICES, which the node's default
# runtime (nvidia) obeys; DRfC's files keep their replicas and node-label constraints.
"""
OVERRIDE_VERSION = "3.7"  # DRfC's own files' format
PINNED_HOW = "GPU services pinned to their GPUs on this node"
GENERIC_HOW = f"the trainer pinned, simulators reserving {GPU_KIND} generic resources"
NODE_CONSTRAINT = "node.id == {node}"
# The service keys of the Compose file format 3.13 that `docker stack deploy` reads.
STACK_SERVICE_KEYS = frozenset((
    "build", "cap_add", "cap_drop", "cgroupns_mode", "cgroup_parent", "command", "configs",
    "container_name", "credential_spec", "depends_on", "deploy", "devices", "dns", "dns_search",
    "domainname", "entrypoint", "env_file", "environment", "expose", "external_links",
    "extra_hosts", "group_add", "healthcheck", "hostname", "image", "init", "ipc", "isolation",
    "labels", "links", "logging", "mac_address", "network_mode", "networks", "pid", "ports",
    "privileged", "read_only", "restart", "security_opt", "shm_size", "secrets", "sysctls",
    "stdin_open", "stop_grace_period", "stop_signal", "tmpfs", "tty", "ulimits",
    "oom_score_adj", "user", "userns_mode", "volumes", "working_dir"
))  # fmt: skip
DEPLOY_KEYS = frozenset((
    "mode", "endpoint_mode", "replicas", "labels", "rollback_config", "update_config",
    "resources", "restart_policy", "placement"
))  # fmt: skip
_PORT_KEYS = ("mode", "target", "published", "protocol")
_TOP_LEVEL_KEYS = ("networks", "volumes", "secrets", "configs")


@dataclass(frozen=True)
class SwarmView:
    """A plan as Swarm would run it: each service's GPUs, pinned or the engine's choice."""

    services: tuple[SwarmService, ...]
    layout: SwarmLayout
    warnings: tuple[str, ...]
    nodes: tuple[NodeFacts, ...] = ()  # the swarm's, as its manager lists them


def swarm_services(
    plan: Plan,
    names: Collection[str],
    workers: int,
    layout: SwarmLayout = ONE_NODE,
    nodes: Collection[NodeFacts] = (),
) -> tuple[SwarmService, ...]:
    """Each planned service of the stack as Swarm gets it: simulator replicas pinned by slot
    (on the node of `nodes` with their GPUs, else here) or reserving; other GPU services here."""
    owner = {u: n.id for n in nodes if n.id != layout.node_id for u in n.advertised_gpus}
    return tuple(
        _swarm_service(plan, shape, layout, owner) for shape in service_gpus(plan, names, workers)
    )


def _swarm_service(
    plan: Plan, shape: ServiceGpus, layout: SwarmLayout, owner: Mapping[str, str]
) -> SwarmService:
    service = plan.service(shape.name)
    here = (NODE_CONSTRAINT.format(node=layout.node_id),) if layout.node_id else ()
    there = {owner[uuid] for slot in shape.pinned for uuid in slot if uuid in owner}
    environment = dict(service.environment)
    pinned, gpus = shape.pinned, shape.gpus
    constraints: tuple[str, ...] = ()
    if service.role is Role.SIMULATOR:
        if there:  # another node's GPUs, named by UUID: planning keeps them on one node
            constraints = (SIMULATOR_CONSTRAINT, NODE_CONSTRAINT.format(node=min(there)))
        elif layout.pin_simulators or not gpus:
            constraints = (SIMULATOR_CONSTRAINT, *(here if gpus else ()))
        else:
            # Given GPUs by the engine. NVIDIA_VISIBLE_DEVICES=void fails closed: the runtime
            # prefers the swarm resource variable, and a node not set up for it gives none.
            constraints, pinned = (SIMULATOR_CONSTRAINT,), ()
            environment = {**own_gpus_environment(gpus), "NVIDIA_VISIBLE_DEVICES": "void"}
    elif service.role in (Role.TRAINER, Role.TRAINER_LAUNCHER):
        constraints = (TRAINER_CONSTRAINT, *here)
    elif pinned:  # GPUs of its own (DRGPU_DEVICES_<SERVICE>): pinned as the trainer is
        constraints = here
    held = ",".join(sorted({uuid for slot in pinned for uuid in slot}))
    launcher = service.role is Role.TRAINER_LAUNCHER
    forwarded = ",".join(d.uuid for d in service.devices) if launcher else ""
    extra = [
        *labels.run_labels(plan.run_id, plan.sharing, service.role, held, forwarded=forwarded),
        (labels.SWARM_GPUS, str(gpus)),
    ]
    if len(pinned) > 1:
        environment["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        environment.update(dict.fromkeys(TEMPLATED_KEYS, slot_template(pinned)))
        slots = ";".join(f"{slot}={','.join(ids)}" for slot, ids in enumerate(pinned, 1))
        extra.append((labels.GPUS_BY_SLOT, slots))
    return SwarmService(
        name=shape.name,
        role=shape.role,
        gpus=gpus,
        replicas=shape.replicas,
        environment=tuple(environment.items()),
        labels=tuple(extra),
        constraints=constraints,
        pinned=pinned,
    )


def slot_template(pinned: tuple[tuple[str, ...], ...]) -> str:
    """A Swarm template naming each slot's GPUs, `void` (none) for any other slot."""
    branches = "".join(
        f'{{{{{"if" if slot == 1 else "else if"} eq .Task.Slot "{slot}"}}}}'
        + template_text(",".join(gpus))
        for slot, gpus in enumerate(pinned, 1)
    )
    return branches + "{{else}}void{{end}}"


def template_text(text: str) -> str:
    """`text` as literal text of a Go template: each `{` an action printing it, so that no
    `{{` in it starts an action."""
    return text.replace("{", '{{"{"}}')


def render_stack(
    plan: Plan,
    model: Mapping[str, Any],
    services: tuple[SwarmService, ...],
    layout: SwarmLayout = ONE_NODE,
    secrets: Iterable[str] = (),
) -> SwarmStack:
    """The stack file for `docker stack deploy`: Compose's resolved `model` made Swarm's;
    `shown_text` masks secret keys' values and `secrets` wherever they appear."""
    mine = {service.name: service for service in services}
    warnings: list[str] = []
    document: dict[str, Any] = {
        "services": {
            name: _stack_service(name, body, mine.get(name), warnings)
            for name, body in (model.get("services") or {}).items()
        }
    }
    document.update({key: model[key] for key in _TOP_LEVEL_KEYS if model.get(key)})
    how = GENERIC_HOW if any(s.reserves for s in services) else PINNED_HOW
    header = HEADER.format(project=plan.project, how=how)
    text = header + dump_yaml(compose_text(document))
    services_shown = {name: _masked_service(body) for name, body in document["services"].items()}
    hidden = (*secrets, *service_secrets(document["services"]))
    safe = masked_data({**document, "services": services_shown}, hidden)
    shown = header + dump_yaml(compose_text(safe))
    return SwarmStack(
        project=plan.project,
        text=text,
        services=services,
        warnings=tuple(warnings),
        layout=layout,
        sharing=plan.sharing,
        secret_text=None if shown == text else shown,
    )


def render_swarm_override(
    plan: Plan, services: tuple[SwarmService, ...], layout: SwarmLayout = ONE_NODE
) -> SwarmStack:
    """The override appended to DRfC's `-c` list (format 3: no device requests, `gpus`,
    `extends` or `!reset`): each service's environment, drgpu's labels, the constraint to a
    node or the generic-resource reservations, not DRfC's replicas or node-label ones."""
    drfc = (SIMULATOR_CONSTRAINT, TRAINER_CONSTRAINT)
    bodies: dict[str, Any] = {}
    for service in services:
        constraints = tuple(c for c in service.constraints if c not in drfc)
        kept = replace(service, replicas=None, constraints=constraints)
        bodies[service.name] = _stack_service(service.name, {}, kept, [])
    return SwarmStack(
        project=plan.project,
        text=OVERRIDE_HEADER.format(project=plan.project)
        + dump_yaml({"version": OVERRIDE_VERSION, "services": bodies}),
        services=services,
        warnings=(),
        layout=layout,
        sharing=plan.sharing,
    )


def _masked_service(body: Mapping[str, Any]) -> dict[str, Any]:
    environment = body.get("environment")
    if not isinstance(environment, Mapping):
        return dict(body)
    return {
        **body,
        "environment": {key: masked(str(key), value) for key, value in environment.items()},
    }


def _stack_service(
    name: str, body: Mapping[str, Any], swarm: SwarmService | None, warnings: list[str]
) -> dict[str, Any]:
    written = {key: value for key, value in body.items() if value is not None and key != "gpus"}
    service = {key: value for key, value in written.items() if key in STACK_SERVICE_KEYS}
    if dropped := sorted(written.keys() - service.keys()):
        warnings.append(f"swarm has no {', '.join(dropped)}: left out of service {name}")
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
        if swarm.constraints:
            placement = dict(deploy.get("placement") or {})
            constraints = list(placement.get("constraints") or [])
            constraints.extend(c for c in swarm.constraints if c not in constraints)
            deploy["placement"] = {**placement, "constraints": constraints}
        if swarm.reserves:
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
    if isinstance(kept.get("published"), str) and is_digits(kept["published"]):
        kept["published"] = int(kept["published"])
    return kept
