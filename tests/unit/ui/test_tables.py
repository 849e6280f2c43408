"""What the tables say: GPU order, which container each cuda-check row is, and which Swarm
task `up` could not prove."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from drgpu.commands.cuda_check import CudaCheckResult
from drgpu.commands.gpus import GpusResult
from drgpu.core.cuda_verdict import CheckResult
from drgpu.core.model import Plan
from drgpu.host.files import load_inventory
from drgpu.ui.tables import plan_table, show_cuda_check, show_gpus

TOPOLOGIES = Path(__file__).parents[2] / "topologies"


def test_gpus_never_says_the_orders_differ_because_a_gpu_is_lost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_gpus(
        GpusResult(load_inventory(TOPOLOGIES / "lost.json"), None), json_output=False, full=False
    )
    shown = capsys.readouterr()
    assert "LOST" in shown.out
    assert "differs" not in shown.err


def test_gpus_says_so_where_cuda_ranks_the_gpus_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    inventory = load_inventory(TOPOLOGIES / "gtx1650-rtx3090-m40-orders.json")
    show_gpus(GpusResult(inventory, None), json_output=False, full=False)
    assert "CUDA's default order (fastest first, column CUDA) differs" in capsys.readouterr().err


def test_cuda_check_names_each_worker_by_its_replica(capsys: pytest.CaptureFixture[str]) -> None:
    results = [
        CheckResult(service, "", ("GPU-a",), ("GPU-a",), ("GPU-a",), replica=number, node=node)
        for service, number, node in [
            ("sagemaker", "1", ""),
            ("robomaker", "1", ""),
            ("robomaker", "2", "worker-node-id-1"),  # a Swarm task on another node
        ]
    ]
    show_cuda_check(CudaCheckResult("deepracer-0", results), json_output=False)
    rows = capsys.readouterr().out
    assert "robomaker 1 " in rows and "robomaker 2 on node worker-node-" in rows
    assert "sagemaker 1" not in rows and "sagemaker" in rows


def test_fields_nvml_could_not_give_are_na(capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from drgpu.core import metrics
    from drgpu.core.model import Gpu, Inventory
    from drgpu.ui.live import status_lines
    from tests.cli.test_status import a_status

    gpu = Gpu(0, "GPU-0", "Tesla T4", "00000000:01:00.0", 0)  # memory and compute unknown
    show_gpus(GpusResult(Inventory(gpus=(gpu,)), None), json_output=False, full=False)
    row = next(line for line in capsys.readouterr().out.splitlines() if "Tesla T4" in line)
    assert row.count("n/a") == 2
    status = replace(a_status("GPU-0"), inventory=Inventory(gpus=(gpu,)))
    status_lines(status)
    assert " mem n/a" in capsys.readouterr().out
    names = {s.metric.name for s in metrics.samples(status)}
    assert not names & {"drgpu_gpu_memory_used_bytes", "drgpu_gpu_memory_total_bytes"}


def test_swarm_up_marks_a_task_not_proven_from_another_node_in_its_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from drgpu.commands.proving import _judged
    from drgpu.core.facts import TaskFacts
    from drgpu.core.service_gpus import SwarmStack
    from drgpu.core.swarm_view import task_stand_in
    from drgpu.errors import DockerError
    from drgpu.ui.tables import swarm_up_table

    def unreadable() -> tuple[int, str]:
        raise DockerError("the proof job failed")

    there, here = (
        TaskFacts(f"task{slot}", "deepracer-7_robomaker", slot, node, "running", "running", "")
        for slot, node in ((1, "5oeuy38bigkyworker"), (2, "managernode01"))
    )
    unproven = list(_judged(task_stand_in("deepracer-7", there), unreadable))
    swarm_up_table(SwarmStack("deepracer-7", "", (), ()), [there, here], unproven)
    rows = [line for line in capsys.readouterr().out.splitlines() if "robomaker." in line]
    assert "not provable" in rows[0] and "ok" not in rows[0], rows
    assert rows[1].rstrip(" │").endswith("ok"), rows


@pytest.mark.parametrize("terminal", [True, False])
def test_plans_why_lines_fit_a_terminal_and_stay_whole_when_piped(
    terminal: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    why = (
        "bare indices read in nvidia-smi's order: "
        + "GPU-00000002-0000-4000-8000-000000000001 " * 6
    )
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: terminal)
    plan_table(Plan(project="deepracer-0", run_id="0", services=(), explanations=(why,)))
    shown = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out).splitlines()
    said = shown[shown.index(next(line for line in shown if line.startswith("why "))) :]
    if terminal:
        assert max(map(len, said)) <= 80 and len(said) > 1
        assert " ".join(line.strip() for line in said) == f"why {why.strip()}"
    else:
        assert said == [f"why {why}"]
