"""The `--json` documents of `drgpu status` and `drgpu gpus` (drgpu.ui.documents' convention:
every violation and warning is a finding)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from drgpu.core import labels
from drgpu.core.gpu_usage import Holder, Status, forwarded_uuids
from drgpu.core.index_order import cuda_order, ordinals
from drgpu.core.topology import inventory_to_json
from drgpu.ui.documents import document

if TYPE_CHECKING:
    from drgpu.core.model import Inventory
    from drgpu.core.swarm_view import SwarmState

# The keys of `status --json` that are a record's fields by the same name.
_PROCESS_KEYS = ("container", "container_id", "run_id", "service", "verdict")
_TASK_KEYS = ("id", "service", "slot", "run_id", "node_id", "state", "desired_state")


def status_document(status: Status) -> dict[str, Any]:
    """The `drgpu status --json` document (`ok`: no violation and no warning)."""
    return document(
        status.findings,
        ok=status.ok,
        run_id=status.run_id,
        gpus=[
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "lost": gpu.lost,
                "error": gpu.error,
                "utilization_gpu_percent": gpu.utilization_gpu_percent,
                "memory_used_mib": gpu.memory_used_mib,
                "memory_total_mib": gpu.memory_total_mib,
                "processes_known": gpu.processes_unknown is None and not gpu.lost,
                "processes_error": gpu.processes_unknown,
                "held_by": [asdict(h) for h in status.holders.get(gpu.index, ())],
            }
            for gpu in status.inventory.gpus
        ],
        runs=_runs_document(status),
        processes=[
            {
                "pid": p.pid,
                "gpu_index": p.gpu.index,
                "gpu_uuid": p.gpu.uuid,
                "used_memory_mib": p.used_memory_mib,
                "type": p.kind,
                **{key: getattr(p, key) for key in _PROCESS_KEYS},
                "reason": p.reason or None,
                "message": p.message or None,
            }
            for p in status.processes
        ],
        notes=list(status.notes),
        sagemaker_trainers=[
            {
                "container": check.container.name,
                "id": check.container.id,
                "run_id": check.run_id,
                "rl_coach": check.launcher.name if check.launcher else None,
                "cuda_visible_devices": list(check.visible),
                "forwarded_gpus": list(check.planned),
                "ok": check.ok,
            }
            for check in status.trainers
        ],
        **({} if status.swarm is None else {"swarm": swarm_document(status.swarm)}),
    )


def swarm_document(swarm: SwarmState) -> dict[str, Any]:
    """The swarm as its manager records it: nodes, and the tasks of drgpu's runs."""
    return {
        "nodes": [{**asdict(n), "gpus_seen": n.id in swarm.seen} for n in swarm.nodes],
        "tasks": [
            {
                **{key: getattr(t, key) for key in _TASK_KEYS},
                "error": t.error or None,
                "generic_gpus": [v for _, v in t.generic_resources],
                "nvidia_visible_devices": t.environment.get("NVIDIA_VISIBLE_DEVICES"),
            }
            for t in swarm.tasks
        ],
    }


def gpus_document(
    inventory: Inventory, holders: Mapping[int, tuple[Holder, ...]] | None
) -> dict[str, Any]:
    """The `drgpu gpus --json` document: the inventory (with `cuda_order` when the CUDA
    driver told it), each GPU with its holders (`held_by`, None when the engine could not
    be asked) and its CUDA ordinals (`cuda_indices`, guessed when `cuda_order_guessed`)."""
    result = {"schema_version": 1, **inventory_to_json(inventory)}  # no judgement in it
    order = cuda_order(inventory)
    cuda_indices = ordinals(order)
    result["cuda_order_guessed"] = not order.known
    for entry, gpu in zip(result["gpus"], inventory.gpus, strict=True):
        entry["cuda_indices"] = list(cuda_indices.get(gpu.index, ()))
        entry["held_by"] = (
            None if holders is None else [asdict(h) for h in holders.get(gpu.index, ())]
        )
    return result


def _runs_document(status: Status) -> list[dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = {}
    for c in status.containers:
        run = runs.setdefault(
            c.labels[labels.RUN_ID],
            {"run_id": c.labels[labels.RUN_ID], "project": c.project, "services": {}},
        )
        run["services"].setdefault(c.service, []).append(
            {
                "container": c.name,
                "id": c.id,
                "state": c.state,
                "gpus": list(labels.given_gpus(c)),
                "forwarded_gpus": list(forwarded_uuids(c)),
                "processes": [
                    {"pid": p.pid, "gpu_index": p.gpu.index, "verdict": p.verdict}
                    for p in status.processes
                    if p.container_id == c.id
                ],
            }
        )
    return list(runs.values())
