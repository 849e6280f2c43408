"""drgpu/ui/live.py: the board `status --watch` draws."""

from __future__ import annotations

from rich.console import Console

from drgpu.core.gpu_board import build_board
from drgpu.core.gpu_usage import build_status
from drgpu.core.model import GpuProcess, Inventory
from drgpu.ui.live import bar, board_view
from tests.unit.core.test_gpu_board import G0, G1, STACK, TRAINER, cgroup, gpu


def test_bars_fill_in_eighths() -> None:
    assert bar(0, 4) == "····"
    assert bar(1, 4) == "████"
    assert bar(0.5, 4) == "██··"
    assert bar(1 / 32, 4) == "▏···"


def test_the_terminal_view_draws_every_gpu_and_the_violation() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(100, 512)), gpu(1, G1)))
    board = build_board(build_status(inventory, STACK, [], {100: cgroup(TRAINER)}))
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(board_view(board, stamp="12:00:00", interval_s=1.0))
    text = console.export_text()
    assert "GPU model 0" in text and "GPU model 1" in text
    assert "run 0 · trainer · sagemaker" in text
    assert "WRONG-GPU" in text and "1 violation(s)" in text
