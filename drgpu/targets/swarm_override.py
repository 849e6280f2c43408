"""DeepRacer-for-cloud's swarm style: drgpu's override, appended to the `-c` list DRfC's
start script hands `docker stack deploy` (docs/drfc.md).

The Compose file format 3 has no device requests, `gpus`, `extends` or `!reset`, so the
override carries only what the docker CLI merges: each service's environment (GPUs in
NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES, by slot template for replicas), drgpu's
labels, the constraint to this node or the generic-resource reservations. Pure.
"""

from __future__ import annotations

from typing import Any

from drgpu.core.model import HEADER_MARK, Plan
from drgpu.core.service_gpus import ONE_NODE, SwarmService, SwarmStack
from drgpu.core.swarm_node import GPU_KIND, SIMULATOR_CONSTRAINT, TRAINER_CONSTRAINT, SwarmLayout
from drgpu.targets.swarm_stack import dump_document

VERSION = "3.7"  # DRfC's own files' format
HEADER = f"""\
{HEADER_MARK} for swarm stack {{project}}: appended to DRfC's -c list.
# Do not edit: `drgpu up` (or `drgpu drfc-env`) writes it anew; `drgpu down` removes it.
# Each GPU service names its GPUs in NVIDIA_VISIBLE_DEVICES, which the node's default
# runtime (nvidia) obeys; DRfC's files keep their replicas and node-label constraints.
"""
# DRfC's swarm files carry these already (docker-compose-*-swarm.yml).
_DRFC_CONSTRAINTS = frozenset([SIMULATOR_CONSTRAINT, TRAINER_CONSTRAINT])


def render_swarm_override(
    plan: Plan, services: tuple[SwarmService, ...], layout: SwarmLayout = ONE_NODE
) -> SwarmStack:
    """The override of `plan`'s services as Swarm gets them (`swarm_stack.swarm_services`),
    and what drgpu expects of the deployed stack."""
    document: dict[str, Any] = {
        "version": VERSION,
        "services": {service.name: _service(service) for service in services},
    }
    return SwarmStack(
        project=plan.project,
        text=HEADER.format(project=plan.project) + dump_document(document),
        services=services,
        warnings=(),
        layout=layout,
        sharing=plan.sharing,
    )


def _service(service: SwarmService) -> dict[str, Any]:
    body: dict[str, Any] = {
        "environment": dict(service.environment),
        "labels": dict(service.labels),
    }
    deploy: dict[str, Any] = {}
    constraints = [c for c in service.constraints if c not in _DRFC_CONSTRAINTS]
    if constraints:
        deploy["placement"] = {"constraints": constraints}
    if service.reserves:
        generic = [{"discrete_resource_spec": {"kind": GPU_KIND, "value": service.gpus}}]
        deploy["resources"] = {"reservations": {"generic_resources": generic}}
    if deploy:
        body["deploy"] = deploy
    return body
