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


def board_view(
    board: Board, *, stamp: str, interval_s: float, width: int | None = None
) -> RenderableType:
    """The board for a terminal: a header, one line per GPU (bars for utilisation and
    memory) and one per occupant under it, then every violation in full; what is wrong in
    bold red. Laid out in fixed columns by hand: one Text, cheap to redraw every tick.
    Where the terminal (`width` columns) has room, each GPU also shows its temperature,
    power and history (`health_columns`)."""
    from rich.text import Text

    room = 0 if width is None else width - BASE_WIDTH
    view = Text(no_wrap=True, overflow="ellipsis")
    view.append("drgpu status", "bold")
    view.append(f"  {board.scope} · {stamp} · every {interval_s:g}s · Ctrl-C quits\n\n")
    view.append(
        f"{'GPU':>3} {'Name / run · role · service':<{NAME_WIDTH}} {'PID':>7}"
        f" {'GPU-Util':<{BAR_WIDTH + 6}} {'Memory':<{BAR_WIDTH + 13}}"
        f"{health_header(room)}\n",
        "bold",
    )
    for row in board.gpus:
        _append_gpu(view, row, room)
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


def _append_gpu(view: Text, row: GpuRow, room: int = 0) -> None:
    style = _ALERT if row.problems else "bold"
    view.append(f"{row.index:>3} ", style)
    view.append(_cell(row.name if not row.lost else "?", NAME_WIDTH), style)
    view.append(" " * 9)
    if not row.lost:
        _append_bar(view, row.utilization_percent or 0, utilization_text(row), BAR_WIDTH + 6)
        _append_bar(view, round(row.memory_fraction * 100), memory_text(row), BAR_WIDTH + 13)
        _append_health(view, row, room)
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


# --- Temperature, power and history: shown where the terminal has room ----------------

BASE_WIDTH = 118  # a GPU line up to its memory column
SENSORS_WIDTH = 12  # ` 100°C  250W`
_SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: tuple[int, ...], width: int) -> str:
    """The last `width` percentages (0..100) as a line of block heights, padded to `width`."""
    shown = values[-width:] if width > 0 else ()
    marks = "".join(_SPARKS[min(7, max(0, v) * 8 // 101)] for v in shown)
    return marks.rjust(width)


def health_columns(room: int) -> tuple[bool, int, int]:
    """What `room` columns beyond BASE_WIDTH hold, dropped in this order as it shrinks:
    the memory history, the utilisation history (each up to HISTORY_POINTS wide, at least
    8), then the temperature and power. (sensors shown, utilisation width, memory width)"""
    from drgpu.core.gpu_board import HISTORY_POINTS

    if room < SENSORS_WIDTH:
        return False, 0, 0
    left = room - SENSORS_WIDTH
    if left >= 2 * (1 + 8):
        each = min(HISTORY_POINTS, left // 2 - 1)
        return True, each, each
    if left >= 1 + 8:
        return True, min(HISTORY_POINTS, left - 1), 0
    return True, 0, 0


def health_header(room: int) -> str:
    """The header over the temperature, power and history columns that fit."""
    sensors, util, memory = health_columns(room)
    if not sensors:
        return ""
    text = f"{'Temp':>6} {'Power':>5}"
    if util:
        text += f" {'Util hist.'[:util]:<{util}}"
    if memory:
        text += f" {'Mem hist.'[:memory]:<{memory}}"
    return text


def _append_health(view: Text, row: GpuRow, room: int) -> None:
    sensors, util, memory = health_columns(room)
    if not sensors:
        return
    temperature = "" if row.temperature_c is None else f"{row.temperature_c}°C"
    power = "" if row.power_w is None else f"{row.power_w:.0f}W"
    view.append(f"{temperature:>6} {power:>5}")
    if util:
        view.append(" " + sparkline(row.utilization_history, util), "cyan")
    if memory:
        view.append(" " + sparkline(row.memory_history, memory), "magenta")
    view.append(" ")


def sensors_text(row: GpuRow) -> str:
    """` temp 52C power 140W` for plain lines (what NVML can tell)."""
    text = "" if row.temperature_c is None else f" temp {row.temperature_c}C"
    return text + ("" if row.power_w is None else f" power {row.power_w:.0f}W")


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
                f" mem {row.memory_used_mib}/{row.memory_total_mib} MiB"
                f"{sensors_text(row)}{problems}"
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
            yield _with_history(redraw, interval_s)
    else:
        yield lambda status: print_lines(
            board_lines(build_board(status), stamp=time.strftime("%H:%M:%S"))
        )


def _with_history(
    redraw: Callable[[RenderableType], None], interval_s: float
) -> Callable[[Status], None]:
    """Draws each snapshot on the terminal, with each GPU's history of the snapshots
    before where the terminal is wide enough."""
    import shutil
    import time

    from drgpu.core.gpu_board import build_board, new_history, recorded

    history = new_history(interval_s)

    def show(status: Status) -> None:
        nonlocal history
        history = recorded(history, status)
        width = shutil.get_terminal_size().columns
        stamp = time.strftime("%H:%M:%S")
        board = build_board(status, history)
        redraw(board_view(board, stamp=stamp, interval_s=interval_s, width=width))

    return show


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
