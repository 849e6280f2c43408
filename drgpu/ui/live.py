"""The live view of `drgpu status --watch`: a board redrawn in place on a terminal (rich's
live display, on the alternate screen, like nvitop), plain lines anywhere else.

Everything here draws a `core.gpu_board.Board`; nothing reads the world.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

    from drgpu.core.gpu_board import Board, GpuRow, Occupant
    from drgpu.core.gpu_usage import Status

BAR_WIDTH = 20
_EIGHTHS = " ▏▎▍▌▋▊▉"
_ALERT = "bold red"


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A bar of `width` cells filled to `fraction` (0..1), in eighths of a cell."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text.ljust(width, "·")


def _mib(value: int) -> str:
    return f"{value / 1024:.1f}G" if value >= 10240 else f"{value}M"


def memory_text(row: GpuRow) -> str:
    """`1200M/22.4G` of a GPU."""
    return f"{_mib(row.memory_used_mib)}/{_mib(row.memory_total_mib)}"


def utilization_text(row: GpuRow) -> str:
    """`37%`, or `n/a` where NVML cannot tell."""
    return "n/a" if row.utilization_percent is None else f"{row.utilization_percent}%"


def occupant_text(occupant: Occupant) -> str:
    """`run 0 · trainer · sagemaker`."""
    run = f"run {occupant.run_id}" if occupant.run_id is not None else "no run"
    return f"{run} · {occupant.role} · {occupant.name}"


NAME_WIDTH = 44


def board_view(board: Board, *, stamp: str, interval_s: float) -> RenderableType:
    """The board for a terminal: a header, one line per GPU (bars for utilisation and
    memory) and one per occupant under it, then every violation in full; what is wrong in
    bold red. Laid out in fixed columns by hand: one Text, cheap to redraw every tick."""
    from rich.text import Text

    view = Text(no_wrap=True, overflow="ellipsis")
    view.append("drgpu status", "bold")
    view.append(f"  {board.scope} · {stamp} · every {interval_s:g}s · Ctrl-C quits\n\n")
    view.append(
        f"{'GPU':>3} {'Name / run · role · service':<{NAME_WIDTH}} {'PID':>7}"
        f" {'GPU-Util':<{BAR_WIDTH + 6}} {'Memory':<{BAR_WIDTH + 13}}\n",
        "bold",
    )
    for row in board.gpus:
        _append_gpu(view, row)
    view.append("\n")
    for problem in board.problems:
        view.append(f"VIOLATION: {problem}\n", _ALERT)
    for note in board.notes:
        view.append(f"note: {note}\n", "dim")
    if board.violation_count:
        view.append(f"{board.violation_count} violation(s)", _ALERT)
    else:
        view.append("no violation", "green")
    return view


def _cell(text: str, width: int) -> str:
    """`text` cut (with an ellipsis) or padded to `width`."""
    return text[: width - 1] + "…" if len(text) > width else text.ljust(width)


def _append_gpu(view: Text, row: GpuRow) -> None:
    style = _ALERT if row.problems else "bold"
    view.append(f"{row.index:>3} ", style)
    view.append(_cell(row.name if not row.lost else "?", NAME_WIDTH), style)
    view.append(" " * 9)
    if not row.lost:
        _append_bar(view, row.utilization_percent or 0, utilization_text(row), BAR_WIDTH + 6)
        _append_bar(view, round(row.memory_fraction * 100), memory_text(row), BAR_WIDTH + 13)
    view.append("; ".join(row.problems), _ALERT)
    view.append("\n")
    for occupant in row.occupants:
        style = _ALERT if occupant.problem else ""
        pid = "" if occupant.pid is None else str(occupant.pid)
        memory = "" if occupant.memory_mib is None else f"{occupant.memory_mib}M"
        view.append(
            f"    {_cell('└ ' + occupant_text(occupant), NAME_WIDTH)} {pid:>7}"
            f" {'':<{BAR_WIDTH + 6}} {memory:<{BAR_WIDTH + 13}}",
            style,
        )
        view.append(f"{occupant.problem}\n", style)


def _append_bar(view: Text, percent: int, label: str, width: int) -> None:
    color = "green" if percent < 60 else "yellow" if percent < 90 else "red"
    view.append(bar(percent / 100), color)
    view.append(f" {label}".ljust(width - BAR_WIDTH) + " ")


def board_lines(board: Board, *, stamp: str) -> list[str]:
    """The board as plain lines (stdout is no terminal): one per GPU, one per occupant under
    it (`!` marks what is wrong), then the violations no row shows."""
    lines = []
    for row in board.gpus:
        problems = "".join(f" ! {problem}" for problem in row.problems)
        if row.lost:
            lines.append(f"{stamp} GPU {row.index} ?{problems}")
        else:
            lines.append(
                f"{stamp} GPU {row.index} {row.name} util {utilization_text(row)}"
                f" mem {row.memory_used_mib}/{row.memory_total_mib} MiB{problems}"
            )
        for occupant in row.occupants:
            mark = "!" if occupant.problem else "-"
            pid = "" if occupant.pid is None else f" pid {occupant.pid}"
            memory = "" if occupant.memory_mib is None else f" {occupant.memory_mib} MiB"
            problem = f" {occupant.problem}" if occupant.problem else ""
            lines.append(f"{stamp}   {mark} {occupant_text(occupant)}{pid}{memory}{problem}")
    lines += [f"{stamp} VIOLATION: {problem}" for problem in board.problems]
    lines.append(f"{stamp} {board.violation_count} violation(s)")
    return lines


@contextmanager
def watch_display(*, json_lines: bool, interval_s: float) -> Iterator[Callable[[Status], None]]:
    """How `status --watch` shows each snapshot: one JSON document per line (`--json`), the
    live board on a terminal, plain lines elsewhere."""
    import time

    from drgpu.core.gpu_board import build_board
    from drgpu.core.gpu_usage import document

    if json_lines:

        def show_json(status: Status) -> None:
            sys.stdout.write(json.dumps(document(status)) + "\n")
            sys.stdout.flush()

        yield show_json
    elif sys.stdout.isatty():
        with live_screen() as redraw:
            yield lambda status: redraw(
                board_view(
                    build_board(status), stamp=time.strftime("%H:%M:%S"), interval_s=interval_s
                )
            )
    else:
        yield lambda status: print_lines(
            board_lines(build_board(status), stamp=time.strftime("%H:%M:%S"))
        )


@contextmanager
def live_screen() -> Iterator[Callable[[RenderableType], None]]:
    """A function that redraws the terminal in place, on the alternate screen; on leaving
    (also on Ctrl-C) the screen and the cursor are as they were."""
    from rich.console import Console
    from rich.live import Live

    console = Console(file=sys.stdout)
    with Live(console=console, screen=True, auto_refresh=False, redirect_stderr=False) as live:

        def show(view: RenderableType) -> None:
            live.update(view, refresh=True)

        yield show


def print_lines(lines: list[str]) -> None:
    """Plain lines on stdout, flushed (a pipe sees each tick at once)."""
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
