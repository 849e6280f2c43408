"""`drgpu report`'s output: a table per run (its services, then the run in all) on stdout,
or one JSON document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drgpu.core.cost import Usage, by_service, to_json, usage_json
from drgpu.ui.documents import document
from drgpu.ui.tables import _row, _table, console, print_json
from drgpu.ui.talk import note

if TYPE_CHECKING:
    from drgpu.commands.report import Report

_COLUMNS = ("Service", "GPU hours", "Energy", "Peak memory", "Mean util", "Throttled")


def show_report(report: Report, *, json_output: bool) -> None:
    """The report as tables, or with `json_output` as JSON (its workers too)."""
    runs = sorted({run for run, _, _ in report.ledger})
    if json_output:
        print_json(document((), path=str(report.path), runs=[_run(report, r) for r in runs]))
        return
    if not runs:
        note(f"no GPU cost kept yet in {report.path}: `drgpu status --watch` keeps it")
    for run in runs:
        services = by_service(report.ledger, run)
        table = _table(f"GPU cost of run {run}", *_COLUMNS)
        total = Usage()
        for service, usage in services.items():
            _row(table, service, *_cells(usage))
            total = total.plus(usage)
        _row(table, "(run)", *_cells(total))
        console().print(table)


def _cells(usage: Usage) -> list[str]:
    mean = usage.mean_utilization
    return [
        f"{usage.gpu_seconds / 3600:.2f}",
        f"{usage.energy_j / 3600:.1f} Wh",
        f"{usage.peak_memory_mib} MiB",
        "n/a" if mean is None else f"{mean:.0f} %",
        f"{usage.throttled_seconds:.0f} s",
    ]


def _run(report: Report, run: str) -> dict[str, Any]:
    services = by_service(report.ledger, run)
    return {
        "run": run,
        "services": [{"service": name, **usage_json(u)} for name, u in services.items()],
        "workers": [w for w in to_json(report.ledger) if w["run"] == run],
    }
