"""Each command's result, shown: a table for people (or JSON for machines) on stdout, and
its warnings on stderr. What only one command shows is imported when it is shown, so
`drgpu plan` does not wait for the other commands' modules (start-up time)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from drgpu.errors import GpuValidationError
from drgpu.ui import tables
from drgpu.ui.documents import (
    cuda_check_document,
    document,
    plan_document,
    report_document,
    swarm_setup_document,
)
from drgpu.ui.talk import note

if TYPE_CHECKING:
    from drgpu.commands.cuda_check import CudaCheckResult
    from drgpu.commands.doctor import DoctorResult
    from drgpu.commands.gpus import GpusResult
    from drgpu.commands.plan import PlanResult
    from drgpu.commands.report import Report
    from drgpu.commands.status import StatusResult
    from drgpu.commands.up import Deployed, Started
    from drgpu.core.swarm_node import SetupReport
    from drgpu.targets.compose_override import Rendered


def show_plan(result: PlanResult, *, json_output: bool) -> None:
    """`drgpu plan`: the plan (as Swarm runs it, with a Swarm view), then its warnings."""
    if json_output:
        tables.print_json(plan_document(result.plan, result.warnings, result.swarm_view))
    else:
        tables.plan_table(result.plan, result.swarm_view)
    tables.warnings(finding.message for finding in result.warnings)


@contextmanager
def refusal_shown(*, json_output: bool) -> Iterator[None]:
    """A refused plan under `--json`: its problems as a document on stdout, then the error
    (its line on stderr, exit 3), so a script reading stdout learns why."""
    try:
        yield
    except GpuValidationError as refused:
        if json_output and refused.findings:
            tables.print_json(document(refused.findings))
        raise


def show_rendered(result: Rendered, *, to_stdout: bool) -> None:
    """`drgpu render`: the text (secret values masked) unless it went to a file; warnings."""
    if to_stdout:
        sys.stdout.write(result.shown)
    tables.warnings(result.warnings)


def show_up(result: Started | Deployed) -> None:
    """`drgpu up`: what was started, each container's (or task's) GPUs verified."""
    from drgpu.commands.up import Deployed  # lazy: start-up time

    if isinstance(result, Deployed):
        tables.warnings(result.stack.warnings)
        tables.swarm_up_table(result.stack, result.tasks, result.unproven)
    else:
        tables.up_table(result.plan, result.containers, result.unproven)


def show_gpus(result: GpusResult, *, json_output: bool, full: bool) -> None:
    """`drgpu gpus`: each GPU in nvidia-smi order, CUDA's beside, and who holds it."""
    if json_output:
        from drgpu.ui.status_view import gpus_document  # lazy: start-up time

        tables.print_json(gpus_document(result.inventory, result.holders))
    else:
        tables.gpus_table(result.inventory, full=full, holders=result.holders)


def show_status(result: StatusResult, *, json_output: bool) -> None:
    """`drgpu status`: the snapshot (a watch has shown its own)."""
    if result.watched or result.last is None:
        return
    from drgpu.ui.status_view import status_document  # lazy: start-up time

    if json_output:
        tables.print_json(status_document(result.last))
    else:
        from drgpu.ui.live import status_frame  # lazy: start-up time

        status_frame(result.last)


def show_doctor(result: DoctorResult, *, json_output: bool) -> None:
    """`drgpu doctor`: the checklist."""
    if json_output:
        tables.print_json(document(result.checks))
    else:
        tables.doctor_table(result.checks)


def show_cuda_check(result: CudaCheckResult, *, json_output: bool) -> None:
    """`drgpu cuda-check` from the host: what each container sees."""
    if json_output:
        tables.print_json(cuda_check_document(result.project, result.results))
    else:
        tables.check_table(result.project, result.results)


def show_swarm_setup(setup: SetupReport, *, json_output: bool) -> None:
    """`drgpu swarm-setup`: what this node needs, and what differs."""
    from drgpu.core import swarm_node as node  # lazy: start-up time

    if json_output:
        tables.print_json(swarm_setup_document(setup))
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
    """`drgpu report`: a table per run (its services, then the run in all), or JSON (its
    workers too)."""
    if json_output:
        tables.print_json(report_document(report.ledger, str(report.path)))
    elif not report.ledger:
        note(f"no GPU cost kept yet in {report.path}: `drgpu status --watch` keeps it")
    else:
        tables.cost_tables(report.ledger)
