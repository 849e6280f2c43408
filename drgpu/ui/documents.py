"""The one JSON convention of every `--json` document.

A document is an object with `schema_version`, `ok`, and the command's own keys; each
judgement in it is a finding, written by `finding()` with the same keys everywhere:
`kind`, `subject`, `level`, `message`, `fix`, then the finding's own facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from drgpu.core.findings import Finding, failed
from drgpu.core.model import Assignment, Plan

if TYPE_CHECKING:
    from drgpu.core.cost import Ledger
    from drgpu.core.cuda_verdict import CheckResult
    from drgpu.core.swarm_node import SetupReport
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
