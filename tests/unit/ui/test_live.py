"""drgpu/ui/live.py: the board `status --watch` draws, at the widths terminals have."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from drgpu.core.facts import ProcessFacts
from drgpu.core.gpu_board import Board, build_board
from drgpu.core.gpu_usage import build_status
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.ui.live import BoardView, bar, board_text, short_gpu_name, show_status
from tests.unit.core.test_gpu_board import (
    G0,
    G1,
    G2,
    INTRUDER,
    SIMULATOR,
    STACK,
    TRAINER,
    cgroup,
    container,
    gpu,
)

G3 = "GPU-30000000-0000-4000-8000-000000000003"
NAMES = ("NVIDIA GeForce GTX 1650", "Tesla M40 24GB", "NVIDIA GeForce RTX 3090")


def test_bars_fill_in_eighths() -> None:
    assert bar(0, 4) == "····"
    assert bar(1, 4) == "████"
    assert bar(0.5, 4) == "██··"
    assert bar(1 / 32, 4) == "▏···"


def render(board: Board, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(BoardView(board, stamp="12:00:00", interval_s=1.0))
    return console.export_text()


def test_the_terminal_view_draws_every_gpu_and_the_violation() -> None:
    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(100, 512)), gpu(1, G1)))
    board = build_board(build_status(inventory, STACK, [], {100: cgroup(TRAINER)}))
    text = render(board, 160)
    assert "GPU model 0" in text and "GPU model 1" in text
    assert "run 0 · trainer · sagemaker" in text
    assert "WRONG-GPU" in text and "1 violation(s)" in text


def busy_board() -> Board:
    """A GTX 1650, an M40 and an RTX 3090 with every kind of row: a misplaced process, two
    runs on one GPU, a stray process with a long command, a lost GPU a run was given."""

    def card(index: int, uuid: str, *procs: GpuProcess) -> Gpu:
        return Gpu(
            index=index,
            uuid=uuid,
            name=NAMES[index],
            pci_bus_id=f"00000000:0{index}:00.0",
            memory_total_mib=(4096, 22912, 24576)[index],
            memory_used_mib=1024,
            utilization_gpu_percent=40,
            processes=procs,
        )

    lost = Gpu(index=3, uuid="", name="", pci_bus_id="", memory_total_mib=0, error="gpu_is_lost")
    inventory = Inventory(
        gpus=(
            card(0, G0, GpuProcess(200, 300), GpuProcess(100, 512)),
            card(1, G1, GpuProcess(100, 900)),
            card(2, G2, GpuProcess(4242, 1800)),
            lost,
        )
    )
    other = container(INTRUDER, "intruder", f"{G0},{G3}", run_id="other")
    cgroups = {100: cgroup(TRAINER), 200: cgroup(SIMULATOR), 4242: "0::/user.slice\n"}
    command = ("python3", "train.py", "--api-key", "s3cr3t", "--epochs=3")
    commands = {4242: ProcessFacts(command, "alice")}
    return build_board(build_status(inventory, [*STACK, other], [], cgroups, commands=commands))


@pytest.mark.parametrize("width", [80, 100, 120])
def test_every_column_that_matters_fits_ordinary_widths(width: int) -> None:
    drawn = board_text(busy_board(), stamp="12:00:00", interval_s=1.0, width=width).plain
    assert max(map(len, drawn.splitlines())) <= width, drawn  # laid out to fit, not cropped
    text = render(busy_board(), width)
    lines = text.splitlines()
    rows = {line.split()[0]: line for line in lines if line[:4].strip().isdigit()}
    assert set(rows) == {"0", "1", "2", "3"}
    for index, name in enumerate(NAMES):  # a name, shortened at worst; memory in MiB
        assert short_gpu_name(name) in rows[str(index)], text
    assert "1024/4096 MiB" in rows["0"] and "1024/22912 MiB" in rows["1"]
    assert "1024/24576 MiB" in rows["2"] and "held by runs" in rows["0"]
    assert "? (lost)" in rows["3"] and "lost (gpu_is_lost)" in rows["3"]
    under = {line.split("└ ")[1]: line for line in lines if "└ " in line}
    occupant = next(line for name, line in under.items() if name.startswith(("0 ", "run 0 ")))
    assert "MiB" in occupant
    assert sum("WRONG-GPU:" in line for line in lines) == 1
    assert sum("MISSING-GPU:" in line for line in lines) == 1
    stray = next(line for line in lines if "4242" in line and "└ " in line)
    assert "alice · python3" in stray and "1800 MiB" in stray and "STRAY: on th" in stray
    assert "s3cr3t" not in text
    assert "VIOLATION: PID 4242" in text and "4 violation(s)" in text
    assert "G·" not in text and "M/" not in text  # no `1200M/22.4G`: MiB throughout
    # The name column's header says what its rows show, whole (with the role or without).
    header = next(line for line in lines if line.startswith("GPU "))
    with_role = "run 0 · trainer · sagemaker" in text
    assert ("Name / run · role · service" if with_role else "Name / run · service") in header


def test_wider_terminals_get_the_full_names_and_bars() -> None:
    text = render(busy_board(), 120)
    assert all(name in text for name in NAMES)
    assert "run 0 · trainer · sagemaker" in text and "GPU-Util" in text and "█" in text
    assert "WRONG-GPU: given GPU 1" in text
    assert "alice · python3 train.py" in text


def test_gpu_names_shorten_to_their_model() -> None:
    assert short_gpu_name("NVIDIA GeForce RTX 3090") == "RTX 3090"
    assert short_gpu_name("Tesla M40 24GB") == "Tesla M40 24GB"
    assert short_gpu_name("NVIDIA") == "NVIDIA"


@pytest.mark.parametrize("width", [80, 100, 120])
def test_one_shot_status_on_a_terminal_is_one_frame_of_the_board(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    inventory = Inventory(gpus=(gpu(0, G0, GpuProcess(100, 512)), gpu(1, G1)))
    status = build_status(inventory, STACK, [], {100: cgroup(TRAINER)})
    monkeypatch.setenv("COLUMNS", str(width))
    terminal = Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    show_status(status, json_output=False)
    drawn = re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue())
    assert "drgpu status  every drgpu run · " in drawn and "Ctrl-C" not in drawn
    assert "WRONG-GPU" in drawn and "1 violation(s)" in drawn
    assert max(map(len, drawn.splitlines())) <= width
