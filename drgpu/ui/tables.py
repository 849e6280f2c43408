"""Each command's result, shown: tables for people (or JSON for machines) on stdout,
warnings on stderr. What only one command shows is imported when it is shown, so `drgpu
plan` does not wait for the other commands' modules (start-up time)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from drgpu.core.facts import advertised
from drgpu.core.findings import Finding, Level
from drgpu.core.index_order import cuda_order, ordinals
from drgpu.core.model import Assignment, Gpu, Plan
from drgpu.core.modes import IndexOrder
from drgpu.errors import DrgpuError, GpuValidationError
from drgpu.ui.documents import (
    cuda_check_document,
    document,
    gpus_document,
    plan_document,
    report_document,
    swarm_setup_document,
)
from drgpu.ui.talk import note, visible, warn

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from drgpu.commands.cuda_check import CudaCheckResult
    from drgpu.commands.doctor import DoctorResult
    from drgpu.commands.gpus import GpusResult
    from drgpu.commands.plan import PlanResult
    from drgpu.commands.report import Report
    from drgpu.commands.up import Deployed, Started
    from drgpu.core.cost import Usage
    from drgpu.core.facts import TaskFacts
    from drgpu.core.gpu_usage import Holder
    from drgpu.core.service_gpus import SwarmService, SwarmStack
    from drgpu.core.swarm_node import SetupReport
    from drgpu.targets.compose_override import Rendered
    from drgpu.targets.swarm_stack import SwarmView

DOCTOR_WIDTH = 100  # the doctor's findings are prose: folded to fit, piped or not


def print_json(document: Any) -> None:
    """JSON on stdout."""
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


def warnings(messages: Iterable[str]) -> None:
    """Each warning on its own stderr line."""
    for message in messages:
        warn(message)


def show_plan(result: PlanResult, *, json_output: bool) -> None:
    """`drgpu plan`: the plan (as Swarm runs it, with a Swarm view), then its warnings."""
    if json_output:
        print_json(plan_document(result.plan, result.warnings, result.swarm_view))
    else:
        plan_table(result.plan, result.swarm_view)
    warnings(finding.message for finding in result.warnings)


def plan_table(plan: Plan, view: SwarmView | None = None) -> None:
    """The plan as a table on stdout, with the index-order note under it; with a Swarm
    `view`, as Swarm runs it: per service (and replica slot), the GPUs pinned to it, or how
    many the engine chooses."""
    title = f"drgpu plan for {'' if view is None else 'swarm stack '}{plan.project}"
    table = _table(title, "Service", "Role", "GPUs", "Gets")
    for service in plan.services if view is None else ():
        if service.has_gpu and not (service.disabled and service.note):
            how = "cdi device request" if plan.device_driver == "cdi" else "device request"
            gets = f"{how}: " + ", ".join(service.capabilities)
            if service.ipc and service.ipc.startswith("service:"):
                gets += "; MPS client"
        else:
            gets = service.note or "NVIDIA_VISIBLE_DEVICES=void"
        _row(table, service.name, service.role.value, _devices_text(service.devices), gets)
    if view is not None:
        devices = {device.uuid: device for s in plan.services for device in s.devices}
        for swarm_service in view.services:
            gpus, gets = _swarm_gets(swarm_service, devices, view.layout.node_id)
            _row(table, swarm_service.name, swarm_service.role.value, gpus, gets)
    table.caption = plan.index_note
    shown = console()
    shown.print(table)
    nodes = [visible(line) for line in advertised(view.nodes)] if view is not None else []
    width = shown.width if sys.stdout.isatty() else None
    for line in [*nodes, *(f"why {line}" for line in plan.explanations)]:
        sys.stdout.write(_wrapped(line, width))


def _wrapped(text: str, width: int | None) -> str:
    """`text` in lines of at most `width` cells, a UUID kept whole (None: one line, as piped
    output keeps it)."""
    if width is None:
        return f"{text}\n"
    return "".join(f"{line}\n" for line in wrap(text, width, break_on_hyphens=False))


def wrap(text: str, width: int, *, break_on_hyphens: bool = True) -> list[str]:
    """`text` in lines of at most `width` cells (20 at least), the later ones indented."""
    import textwrap  # lazy: only a terminal's lines need it

    return textwrap.wrap(
        text, max(width, 20), subsequent_indent="  ", break_on_hyphens=break_on_hyphens
    )


@contextmanager
def failure_shown(*, json_output: bool) -> Iterator[None]:
    """Under `--json`, a command that fails still prints its document on stdout, `ok` false:
    a refused plan's problems, else the error as one `error` finding; then the error (its
    line on stderr, its exit code), so a script reading stdout learns why."""
    try:
        yield
    except DrgpuError as error:
        if json_output:
            refused = error.findings if isinstance(error, GpuValidationError) else ()
            failure = Finding("drgpu", Level.FAIL, error.message, error.hint, kind="error")
            print_json(document(refused or [failure]))
        raise


def _devices_text(devices: Iterable[Assignment]) -> str:
    lines = []
    for device in devices:
        slice_note = f" MIG {device.uuid}" if device.mig else ""
        gpu = device.gpu  # index -1: another swarm node's GPU, said by UUID and node
        here = f"{gpu.index}: {gpu.name}{slice_note} ({gpu.pci_bus_id})"
        lines.append(here if gpu.index >= 0 else f"{gpu.uuid} {gpu.name}")
    return "\n".join(lines) or "none (CPU only)"


def _swarm_gets(
    service: SwarmService, devices: Mapping[str, Assignment], swarm_node: str | None
) -> tuple[str, str]:
    node = service.node or swarm_node
    where = f"node {node[:12]}" if node else "this node"
    replicas = f" x {service.replicas} replicas" if (service.replicas or 1) > 1 else ""
    if service.reserves:
        text = f"the engine's choice: {service.gpus} NVIDIA-GPU generic resource(s) per task"
        return "any advertised", text + replicas
    if service.pinned:
        several = len(service.pinned) > 1
        lines = [
            (f"slot {slot}: " if several else "") + _uuids_text(uuids, devices)
            for slot, uuids in enumerate(service.pinned, 1)
        ]
        return "\n".join(lines), f"pinned: NVIDIA_VISIBLE_DEVICES=<uuids> on {where}{replicas}"
    if service.forwarded:
        gets = f"forwards CUDA_VISIBLE_DEVICES=<uuid> to its trainer on {where}; no GPU itself"
        return _uuids_text(service.forwarded, devices), gets
    return "none (CPU only)", "NVIDIA_VISIBLE_DEVICES=void" + replicas


def _uuids_text(uuids: Iterable[str], devices: Mapping[str, Assignment]) -> str:
    """Each GPU as the plan table shows it; a UUID the plan does not know, as it is."""
    return "; ".join(_devices_text([devices[u]]) if u in devices else u for u in uuids)


def show_rendered(result: Rendered, *, to_stdout: bool) -> None:
    """`drgpu render`: the text (secret values masked) unless it went to a file; warnings."""
    if to_stdout:
        sys.stdout.write(result.shown)
    warnings(result.warnings)


def show_up(result: Started | Deployed) -> None:
    """`drgpu up`: what was started, each container's (or task's) GPUs verified, and what
    was not proven from inside."""
    from drgpu.commands.up import Deployed  # lazy: start-up time

    if isinstance(result, Deployed):
        warnings(result.stack.warnings)
        swarm_up_table(result.stack, result.tasks, result.unproven)
        return
    plan = result.plan
    why = {finding.subject: finding.message for finding in result.unproven}
    table = _table(f"{plan.project} is up", "Container", "State", "GPUs", "Verified")
    for container in result.containers:
        try:
            service = plan.service(container.service)
        except KeyError:
            continue
        verdict = why.get(container.name, "ok")
        _row(table, container.name, container.state, _devices_text(service.devices), verdict)
    console().print(table)
    _proven(f"every container of {plan.project} has exactly its planned GPUs", result.unproven)


def swarm_up_table(stack: SwarmStack, tasks: list[TaskFacts], unproven: list[Finding]) -> None:
    """The verified tasks of a deployed Swarm stack: each task's GPUs, pinned or chosen."""
    # lazy: only the swarm tables need them
    from drgpu.core.swarm_node import reserved_gpus
    from drgpu.core.verification import stack_service_name

    services = {stack_service_name(stack.project, s.name): s for s in stack.services}
    why = {finding.facts.get("task"): finding.message for finding in unproven}
    table = _table(f"{stack.project} is up (swarm)", "Task", "Node", "State", "GPUs", "Verified")
    for task in tasks:
        service = services.get(task.service)
        pinned = service.pinned_for(task.slot) if service else None
        chosen = reserved_gpus(task)
        gpus = [f"{uuid} (pinned)" for uuid in pinned or ()] + [
            f"{uuid} (engine's choice)" for uuid in chosen
        ]
        name = f"{task.service}.{task.slot}"
        verdict = why.get(f"{name}.{task.id}", "ok")
        _row(table, name, task.node_id[:12], task.state, "\n".join(gpus) or "none", verdict)
    console().print(table)
    _proven(
        f"every task of {stack.project} has exactly its planned GPUs (pinned) or its planned"
        " number of them (engine's choice); none holds another's",
        unproven,
    )


def _proven(sentence: str, unproven: list[Finding]) -> None:
    """The final sentence of `up`: what was proven, and each thing that was not."""
    if not unproven:
        note(sentence)
        return
    shown = "; ".join(f"{finding.subject} {finding.message}" for finding in unproven)
    warn(f"{sentence} as the engine says, but not proven from inside: {shown}")


def show_gpus(result: GpusResult, *, json_output: bool, full: bool) -> None:
    """`drgpu gpus`: each GPU in nvidia-smi order, CUDA's beside, and which run and service
    holds it (unless the engine could not be asked)."""
    inventory, holders = result.inventory, result.holders
    if json_output:
        print_json(gpus_document(inventory, holders))
        return
    order = cuda_order(inventory)
    cuda_indices = ordinals(order)
    columns = ["Index", "CUDA", "UUID", "Name", "PCI bus id", "Memory used/total", "Util", "CC"]
    held_by = ["Held by"] if holders is not None else []
    table = _table(f"GPUs (driver {inventory.driver_version or '?'})", *columns, "MIG", *held_by)
    for gpu in inventory.gpus:
        held = [holders_text(holders.get(gpu.index, ()), full=full)] if holders is not None else []
        if gpu.lost:
            lost = [str(gpu.index), "-", "-", f"LOST ({gpu.error})", gpu.pci_bus_id or "-"]
            _row(table, *lost, *["-"] * 4, *held)
            continue
        migs = ", ".join(m.uuid if full else m.uuid[:12] for m in gpu.mig_devices)
        _row(
            table,
            str(gpu.index),
            ",".join(map(str, cuda_indices.get(gpu.index, ()))) + ("" if order.known else "?"),
            gpu.uuid if full else gpu.uuid[:12],
            gpu.name,
            gpu.pci_bus_id,
            memory_text(gpu),
            "-" if gpu.utilization_gpu_percent is None else f"{gpu.utilization_gpu_percent}%",
            "{}.{}".format(*gpu.compute_capability) if any(gpu.compute_capability) else "n/a",
            ("on: " + migs) if gpu.mig_mode else "off",
            *held,
        )
    console().print(table)
    if order.reorders:
        guessed = (
            " (guessed, marked ?: the CUDA driver could not be asked)" if not order.known else ""
        )
        reads = {
            None: "drgpu reads bare indices in nvidia-smi's order (DRGPU_INDEX_ORDER=cuda: in"
            " CUDA's)",
            IndexOrder.PCI: "the settings here read bare indices in nvidia-smi's order"
            " (DRGPU_INDEX_ORDER=pci)",
            IndexOrder.CUDA: "the settings here read bare indices in CUDA's order"
            " (DRGPU_INDEX_ORDER=cuda)",
        }[result.index_order]
        note(
            f"CUDA's default order (fastest first, column CUDA{guessed}) differs from this"
            f" nvidia-smi order: {reads}; drgpu renders UUIDs and sets"
            " CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )


def holders_text(holders: Iterable[Holder], *, full: bool) -> str:
    """`run 0: sagemaker` per holder; a MIG slice or rl_coach's forwarding noted."""
    lines = []
    for holder in holders:
        extra = ""
        if holder.forwarded:
            extra = " (forwards it to the SageMaker trainer)"
        elif holder.uuid.startswith("MIG-"):
            extra = f" ({holder.uuid if full else holder.uuid[:12]})"
        lines.append(f"run {holder.run_id}: {holder.service}{extra}")
    return "\n".join(lines) or "-"


def memory_text(gpu: Gpu) -> str:
    """`1200/22912 MiB` (as nvidia-smi), or `n/a` where NVML cannot tell."""
    return f"{gpu.memory_used_mib}/{gpu.memory_total_mib} MiB" if gpu.memory_total_mib else "n/a"


def show_doctor(result: DoctorResult, *, json_output: bool) -> None:
    """`drgpu doctor`: the checklist, one line per check, its fix under a failure or warning."""
    if json_output:
        print_json(document(result.checks))
        return
    table = _table("drgpu doctor", "Result", "Check", "Finding")
    for check in result.checks:
        fix = f"\nfix: {check.fix}" if check.fix and check.level != Level.OK else ""
        _row(table, check.level.upper(), check.kind, check.message + fix)
    console(DOCTOR_WIDTH).print(table)


def show_cuda_check(result: CudaCheckResult, *, json_output: bool) -> None:
    """`drgpu cuda-check` from the host: what each container sees; a service with several
    (the workers) names each by its replica number (`robomaker 2`, of container
    deepracer-0-robomaker-2, or a Swarm task's slot), and a Swarm task its node."""
    project, results = result.project, result.results
    if json_output:
        print_json(cuda_check_document(project, results))
        return
    table = _table(
        f"cuda-check of {project}", "Service", "Expected", "NVML sees", "CUDA sees", "Verdict"
    )
    services = [checked.service for checked in results]
    for checked in results:
        problems = [f.message for f in checked.findings if f.level == Level.FAIL]
        verdict = "ok" if checked.ok else "MISMATCH: " + "; ".join(problems)
        several = services.count(checked.service) > 1 and checked.replica
        name = f"{checked.service} {checked.replica}" if several else checked.service
        _row(
            table,
            f"{name} on node {checked.node[:12]}" if checked.node else name,
            "\n".join(checked.expected) or "no GPU",
            "\n".join(checked.seen_nvml) or "none",
            "\n".join(checked.seen_cuda) or "none",
            verdict,
        )
    console().print(table)


def show_swarm_setup(setup: SetupReport, *, json_output: bool) -> None:
    """`drgpu swarm-setup`: what this node needs, and what differs."""
    from drgpu.core import swarm_node as node  # lazy: start-up time

    if json_output:
        print_json(swarm_setup_document(setup))
        return
    lines = [
        f"# {setup.daemon_json_path} (then restart dockerd):",
        json.dumps(setup.daemon_json, indent=2),
        "",
        f"# {setup.toolkit_path}, at the top level (before any [section]):",
        node.TOOLKIT_LINE,
        "# and, with toolkit 1.18.x (whose default mode, jit-cdi, ignores that line):",
        *node.MODE_LINES,
        "",
        "# on a manager, for each node (the trainer needs the first, simulators the second):",
        *(f"docker node update --label-add {label}=true <node>" for label in node.NODE_LABELS),
        "",
        "# this node:",
        *(f"{f.level:8} {f.subject}: {f.message}" for f in setup.findings),
    ]
    sys.stdout.write("\n".join(lines) + "\n")


def show_report(report: Report, *, json_output: bool) -> None:
    """`drgpu report`: a table per run, its services, then the run in all; or JSON (its
    workers too)."""
    from drgpu.core import cost  # lazy: only `report` needs it

    ledger = report.ledger
    if json_output:
        print_json(report_document(ledger, str(report.path)))
        return
    if not ledger:
        note(f"no GPU cost kept yet in {report.path}: `drgpu status --watch` keeps it")
    for run in sorted({run for run, _, _ in ledger}):
        table = _table(f"GPU cost of run {run}", *_COST_COLUMNS)
        total = cost.Usage()
        for service, usage in cost.by_service(ledger, run).items():
            _row(table, service, *_cost_cells(usage))
            total = total.plus(usage)
        _row(table, "(run)", *_cost_cells(total))
        console().print(table)


_COST_COLUMNS = ("Service", "GPU hours", "Energy", "Peak memory", "Mean util", "Throttled")


def _cost_cells(usage: Usage) -> list[str]:
    mean = usage.mean_utilization
    return [
        f"{usage.gpu_seconds / 3600:.2f}",
        f"{usage.energy_j / 3600:.1f} Wh",
        f"{usage.peak_memory_mib} MiB",
        "n/a" if mean is None else f"{mean:.0f} %",
        f"{usage.throttled_seconds:.0f} s",
    ]


def _table(title: str, *columns: str) -> Table:
    from rich.table import Table  # lazy: rich is heavy; only drawn output needs it

    table = Table(title=visible(title), title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _row(table: Table, *cells: str) -> None:
    """A row of text shown as written: no markup (`[link=...]`), no control characters but
    the newlines between a cell's lines (labels, names and commands come from others)."""
    table.add_row(*(visible(cell, "\n") for cell in cells))


def console(piped_width: int = 240) -> Console:
    """The stdout console of every table: a terminal's width, else `piped_width` or COLUMNS
    where narrower (piped output is not folded to 80 columns: a table line stays one line);
    no markup or emoji codes read in what it prints (`[/]` in a label is text)."""
    from rich.console import Console  # lazy: rich is heavy; only drawn output needs it

    columns = os.environ.get("COLUMNS", "")
    piped = min(piped_width, int(columns) or piped_width) if columns.isdigit() else piped_width
    width = None if sys.stdout.isatty() else piped
    return Console(soft_wrap=False, width=width, markup=False, emoji=False)
