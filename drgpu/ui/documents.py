"""The `--json` documents, and their one convention.

A document is an object with `schema_version`, `ok`, and the command's own keys; each
judgement in it is a finding, written by `finding()` with the same keys everywhere:
`kind`, `subject`, `level`, `message`, `fix`, then the finding's own facts (every
violation and warning of `status` too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from drgpu.core import labels
from drgpu.core.findings import Finding, failed
from drgpu.core.index_order import cuda_order, ordinals
from drgpu.core.model import Assignment, Inventory, Plan
from drgpu.core.topology import inventory_to_json

if TYPE_CHECKING:
    from drgpu.core.cost import Ledger
    from drgpu.core.cuda_verdict import CheckResult
    from drgpu.core.gpu_usage import Holder, Status
    from drgpu.core.swarm_node import SetupReport
    from drgpu.core.swarm_view import SwarmState
    from drgpu.targets.swarm_stack import SwarmView

SCHEMA_VERSION = 2  # 2: every judgement is a finding (kind, subject, level, message, fix)


def finding(item: Finding) -> dict[str, Any]:
    """One finding as JSON."""
    return {
        "kind": item.kind,
        "subject": item.subject,
        "level": str(item.level),
        "message": item.message,
        "fix": item.fix,
        **item.facts,
    }


def document(findings: Iterable[Finding], **body: Any) -> dict[str, Any]:
    """A command's document: `ok` (no finding failed), its keys, then `findings`."""
    items = list(findings)
    return {
        "schema_version": SCHEMA_VERSION,
        "ok": not failed(items),
        **body,
        "findings": [finding(item) for item in items],
    }


def plan_document(
    plan: Plan, warnings: Iterable[Finding], view: SwarmView | None = None
) -> dict[str, Any]:
    """The `drgpu plan --json` document: each service's GPUs, each warning a finding; in
    swarm mode (`view`), how Swarm runs it too."""
    body: dict[str, Any] = {
        "project": plan.project,
        "run_id": plan.run_id,
        "services": {
            service.name: {
                "role": service.role.value,
                "gpus": [_device_json(device) for device in service.devices],
                "device_request": service.has_gpu and view is None,
                "capabilities": list(service.capabilities),
                "environment": dict(service.environment),
                "labels": dict(service.labels),
                "note": service.note,
                "replicas": service.replicas,
                "ipc": service.ipc,
            }
            for service in plan.services
        },
        "sharing": plan.sharing,
        "device_driver": plan.device_driver,
        "explanations": list(plan.explanations),
        "index_order": plan.index_note,
    }
    if view is not None:
        body["docker_style"] = "swarm"
        body["swarm"] = {
            "pin_simulators": view.layout.pin_simulators,
            "node_id": view.layout.node_id,
            "services": {
                service.name: {
                    "role": service.role.value,
                    "replicas": service.replicas,
                    "gpus_per_task": service.gpus,
                    "engine_chooses": service.reserves,
                    "pinned_by_slot": [list(uuids) for uuids in service.pinned],
                    "forwarded_gpus": list(service.forwarded),
                    "constraints": list(service.constraints),
                    "environment": dict(service.environment),
                }
                for service in view.services
            },
            "nodes": [asdict(node) for node in view.nodes],
        }
    return document(warnings, **body)


def _device_json(device: Assignment) -> dict[str, Any]:
    return {
        "index": device.gpu.index,
        "uuid": device.uuid,
        "name": device.gpu.name,
        "pci_bus_id": device.gpu.pci_bus_id,
        "memory_total_mib": device.memory_total_mib,
        "mig_parent_uuid": device.gpu.uuid if device.mig else None,
    }


def cuda_check_document(project: str, results: Iterable[CheckResult]) -> dict[str, Any]:
    """The `cuda-check --json` document of a host-side check: what each container sees,
    and every finding about them (subject: the container)."""
    checked = list(results)
    rows = [
        {
            "service": r.service,
            "container": r.container,
            "expected": list(r.expected),
            "seen_nvml": list(r.seen_nvml),
            "seen_cuda": list(r.seen_cuda),
            "ok": r.ok,
            "gpu_injection": r.injection,
            "replica": r.replica or None,
            "node": r.node or None,
        }
        for r in checked
    ]
    return document([f for r in checked for f in r.findings], project=project, results=rows)


def swarm_setup_document(setup: SetupReport) -> dict[str, Any]:
    """The `drgpu swarm-setup --json` document: what the node needs, and its findings."""
    from drgpu.core import swarm_node as node  # lazy: start-up time of other commands

    return document(
        setup.findings,
        generic_resource_kind=node.GPU_KIND,
        resource_variable=node.RESOURCE_VARIABLE,
        node_generic_resources=list(setup.resources),
        daemon_json={"path": str(setup.daemon_json_path), "wanted": setup.daemon_json},
        toolkit_config={
            "path": str(setup.toolkit_path),
            "line": node.TOOLKIT_LINE,
            "mode_lines": list(node.MODE_LINES),
        },
        node_labels=[f"{label}=true" for label in node.NODE_LABELS],
    )


def report_document(ledger: Ledger, path: str) -> dict[str, Any]:
    """The `drgpu report --json` document: each run's services, and its workers."""
    from drgpu.core import cost  # lazy: only `report` needs it

    workers = cost.to_json(ledger)
    runs = [
        {
            "run": run,
            "services": [
                {"service": name, **cost.usage_json(usage)}
                for name, usage in cost.by_service(ledger, run).items()
            ],
            "workers": [worker for worker in workers if worker["run"] == run],
        }
        for run in sorted({run for run, _, _ in ledger})
    ]
    return document((), path=path, runs=runs)


# The keys of `status --json` that are a record's fields by the same name.
_GPU_KEYS = ("index", "uuid", "name", "lost", "error", "utilization_gpu_percent")
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
                **{key: getattr(gpu, key) for key in _GPU_KEYS},
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
    from drgpu.core.gpu_usage import forwarded_uuids  # lazy: only `status` needs it

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
