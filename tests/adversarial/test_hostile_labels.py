"""Labels are data (issue 29, item 3): what a container's labels say is shown as written,
never read as rich markup, and never reaches the terminal as control characters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drgpu.commands.gpus import GpusResult
from drgpu.core import gpu_usage
from drgpu.core.facts import ContainerFacts
from drgpu.core.gpu_board import build_board
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.host.files import load_inventory
from drgpu.ui import live, tables

G0 = "GPU-00000000-0000-4000-8000-000000000000"
HOSTILE = ("a[/]", "[link=http://127.0.0.1/]x[/link]", "a\x1b]0;owned\x07b", "a\nGPU 9 forged")
TOPOLOGIES = Path(__file__).parents[1] / "topologies"


def labelled(run_id: str) -> gpu_usage.Status:
    trainer = ContainerFacts(
        id="a" * 64,
        name="deepracer-0-sagemaker-1",
        service="sagemaker",
        project="deepracer-0",
        state="running",
        labels={"drgpu.run_id": run_id, "drgpu.gpus": "GPU-other", "drgpu.role": "trainer"},
    )
    gpu = Gpu(0, G0, "Tesla T4", "00000000:01:00.0", 15360, processes=(GpuProcess(1234, 9),))
    cgroups: dict[int, str | None] = {1234: f"0::/docker/{'a' * 64}\n"}
    return gpu_usage.build_status(Inventory(gpus=(gpu,)), [trainer], [], cgroups)


def shown(run_id: str) -> str:
    """The part of the label before its first control character."""
    return run_id.replace("\n", "\x1b").partition("\x1b")[0]


def assert_inert(out: str, lines: int | None = None) -> None:
    assert "\x1b" not in out and "\x07" not in out
    assert "forged" not in out or "\\nGPU 9 forged" in out
    if lines is not None:
        assert len(out.splitlines()) == lines


@pytest.mark.parametrize("run_id", HOSTILE)
def test_plain_status_lines_show_a_label_as_written(
    run_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    live.status_lines(labelled("0"))
    expected = len(capsys.readouterr().out.splitlines())
    live.status_lines(labelled(run_id))
    out = capsys.readouterr().out
    assert_inert(out, expected)
    assert shown(run_id) in out


@pytest.mark.parametrize("run_id", HOSTILE)
def test_the_board_on_a_terminal_shows_a_label_as_written(run_id: str) -> None:
    from rich.console import Console

    console = Console(force_terminal=True, width=160, color_system=None, record=True)
    board = build_board(labelled(run_id))
    console.print(live.BoardView(board, stamp="12:00:00", interval_s=2.0))
    out = console.export_text()
    assert_inert(out)
    assert shown(run_id) in out


@pytest.mark.parametrize("run_id", HOSTILE)
def test_the_gpus_table_shows_a_holders_label_as_written(
    run_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    holder: Any = gpu_usage.Holder(run_id, "sagemaker", "c", G0)
    inventory = load_inventory(TOPOLOGIES / "lost.json")
    holders: dict[int, tuple[Any, ...]] = {0: (holder,), 1: (holder,)}
    tables.show_gpus(GpusResult(inventory, holders), json_output=False, full=False)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out  # a newline stays inside its cell
    assert shown(run_id) in out


def test_the_spinner_reads_no_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    from drgpu.ui import talk

    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    with talk.spinner("starting a[/] [link=http://127.0.0.1/]x"):
        pass
