"""The status board (`core.gpu_board.Board`) drawn: on a terminal laid out for its width
(redrawn in place by `--watch`, like nvitop), plain lines anywhere else."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drgpu.core.gpu_board import HISTORY_POINTS, build_board, memory_percent, new_history, recorded
from drgpu.ui.documents import status_document
from drgpu.ui.tables import console, memory_text, print_json, wrap
from drgpu.ui.talk import visible

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions
    from rich.segment import Segment
    from rich.text import Text

    from drgpu.core.gpu_board import Board, GpuRow, Occupant
    from drgpu.core.gpu_usage import Status
    from drgpu.core.model import Gpu

BAR_WIDTH = 20
_EIGHTHS = " ▏▎▍▌▋▊▉"
_ALERT = "bold red"
_STAMP = "%H:%M:%S"  # each snapshot's time


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A bar of `width` cells filled to `fraction` (0..1), in eighths of a cell."""
    eighths = round(min(1.0, max(0.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width, "·")


def utilization_text(gpu: Gpu) -> str:
    """`37%`, or `n/a` where NVML cannot tell."""
    return "n/a" if gpu.utilization_gpu_percent is None else f"{gpu.utilization_gpu_percent}%"


def short_gpu_name(name: str) -> str:
    """A GPU's name without the vendor and brand words (`GTX 1650`, `Tesla M40 24GB`)."""
    words = [word for word in name.split() if word not in ("NVIDIA", "GeForce")]
    return " ".join(words) or name


def _gpu_names(gpu: Gpu) -> tuple[str, ...]:
    return ("? (lost)",) if gpu.lost else (gpu.name, short_gpu_name(gpu.name))


_PID_WIDTH = 7
_UTIL_WIDTH = 4  # `100%`


@dataclass(frozen=True)
class Layout:
    """The board's column widths on a terminal `width` cells wide: GPU index, name, PID,
    utilisation and memory (bar and text), then what is wrong (the rest of the line, of
    which the temperature, power and history may take `health` cells)."""

    width: int
    name: int
    bar: int
    memory: int
    health: int = 0

    @property
    def bars(self) -> int:
        """The cells of a bar and the space after it."""
        return self.bar + 1 if self.bar else 0

    @property
    def before_marker(self) -> int:
        columns = self.name + _PID_WIDTH + _UTIL_WIDTH + self.memory + 2 * self.bars
        return 4 + columns + 4  # the index, then a space after each column

    @property
    def marker(self) -> int:
        return max(0, self.width - self.before_marker)


def layout(board: Board, width: int) -> Layout:
    """Columns that fit `width`: bars shrink and names are shortened before the memory
    column or a marker is cut (a marker keeps at least its first word; the violations
    under the board say each in full); the health columns take what the markers do not
    need, once the bars have their full width (they go first as the terminal narrows)."""
    occupants = [o for row in board.gpus for o in row.occupants]
    full, short = (  # the name column's width with the longest and the shortest names
        max(
            len(NAME_HEADERS[form]),
            *(len(_gpu_names(row.gpu)[form]) for row in board.gpus),
            *(len("└ " + o.names[form]) for o in occupants if not form or not o.by_command),
            0,  # (max needs two numbers)
        )
        for form in (0, -1)
    )
    short = min(short, full)
    texts = [*(memory_text(row.gpu) for row in board.gpus), *map(_occupant_memory, occupants)]
    memory = max(map(len, ["Memory", *texts]))
    markers = [p for row in board.gpus if not row.gpu.lost for p in row.problems]
    markers += [o.problem for o in occupants if o.problem]
    marker_full = min(MARKER_WIDTH, max(map(len, markers), default=0))
    marker_min = min(marker_full, max((len(m.split()[0]) + 1 for m in markers), default=0))
    # (bar width, shortest name width, marker width), most wanted first: the bars go
    # before a marker is cut
    choices = (
        (BAR_WIDTH, min(full, 36), marker_full),
        (12, min(full, 28), marker_full),
        (8, min(short, 24), marker_full),
        (4, min(short, 20), marker_full),
        (0, min(short, 16), marker_full),
        (0, min(short, 16), marker_min),
    )
    for bar_width, name_min, marker in choices:
        room = width - Layout(width, 0, bar_width, memory).before_marker - marker
        if room >= name_min:  # markers get their full width before names grow
            name = max(name_min, min(full, NAME_WIDTH, room + marker - marker_full))
            spare = room + marker - marker_full - 1 - name  # cells the markers do not need
            health = max(0, spare) if bar_width == BAR_WIDTH else 0
            return Layout(width, name, bar_width, memory, health)
    return Layout(width, min(short, 12), 0, memory)


MARKER_WIDTH = 24  # the most a marker needs (`WRONG-GPU: given GPU 1`)
NAME_WIDTH = 44
# The name column's header per form of the occupants' names (the rows drawn under it).
NAME_HEADERS = ("Name / run · role · service",) * 2 + ("Name / run · service",)


class BoardView:
    """The board for a terminal, laid out for the width rich renders it at (a resized
    terminal gets a new layout on the next refresh)."""

    def __init__(self, board: Board, *, stamp: str, interval_s: float | None) -> None:
        self.board, self.stamp, self.interval_s = board, stamp, interval_s

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> Iterator[Text | Segment]:
        """rich's protocol: the board as one Text, `options.max_width` wide (its segments as
        they are where every line fits: cheaper than rich's wrapping)."""
        from rich.cells import cell_len

        width = options.max_width
        text = board_text(self.board, stamp=self.stamp, interval_s=self.interval_s, width=width)
        if all(cell_len(line) <= width for line in text.plain.split("\n")):
            yield from text.render(console, end=text.end)
        else:  # wide characters: rich cuts the lines
            yield text


def board_text(board: Board, *, stamp: str, interval_s: float | None, width: int) -> Text:
    """The board in fixed columns, no line longer than `width`: a header (a watch's names
    its `interval_s`), a line per GPU, per occupant and per other node of a swarm, then
    every violation in full; what is wrong in bold red."""
    from rich.text import Text  # lazy: rich is heavy; only drawn output needs it

    grid = layout(board, width)
    view = Text(no_wrap=True, overflow="ellipsis")
    title = f"  {board.scope} · {stamp}"
    if interval_s is not None:
        title += f" · every {interval_s:g}s · Ctrl-C quits"
    view.append("drgpu status", "bold")
    view.append(_cut(title, width - len("drgpu status")) + "\n\n")
    util_header = "GPU-Util" if grid.bar + 1 + _UTIL_WIDTH >= len("GPU-Util") else "Util"
    form = _occupant_form(board, grid.name)
    header = (
        f"{'GPU':>3} {_cell(NAME_HEADERS[form], grid.name)} {'PID':>{_PID_WIDTH}}"
        f" {util_header:<{grid.bars + _UTIL_WIDTH}} {'Memory':<{grid.bars + grid.memory}} "
        f"{health_header(grid.health)}"
    )
    view.append(_cut(header, width).rstrip() + "\n", "bold")
    for row in board.gpus:
        _append_gpu(view, row, grid, form)
    view.append("\n")
    for node in board.nodes:
        view.append(_wrapped(node, width))
    for problem in board.problems:
        view.append(_wrapped(f"VIOLATION: {problem}", width), _ALERT)
    for note in board.notes:
        view.append(_wrapped(note, width), "bold yellow" if note.startswith("WARNING") else "dim")
    if board.problems:
        view.append(f"{len(board.problems)} violation(s)", _ALERT)
    else:
        view.append("no violation", "green")
    return view


def _cell(text: str, width: int) -> str:
    """`text` cut (with an ellipsis) or padded to `width`."""
    return _cut(text, width).ljust(width)


def _cut(text: str, width: int) -> str:
    """`text` (its control characters written visibly), cut with an ellipsis to `width`."""
    text = visible(text)
    if len(text) <= width:
        return text
    return text[: width - 1] + "…" if width > 0 else ""


def _wrapped(text: str, width: int) -> str:
    """`text` in lines of at most `width` cells, the later ones indented."""
    return "".join(_cut(line, width) + "\n" for line in wrap(text, width))


def _occupant_memory(occupant: Occupant) -> str:
    return "" if occupant.memory_mib is None else f"{occupant.memory_mib} MiB"


def _occupant_form(board: Board, width: int) -> int:
    """The longest form of the occupants' names in which every one fits `width` (one form
    for the whole board)."""
    named = [o for row in board.gpus for o in row.occupants if not o.by_command]
    for form in range(2):
        if all(len("└ " + o.names[form]) <= width for o in named):
            return form
    return 2


def _append_gpu(view: Text, row: GpuRow, grid: Layout, form: int) -> None:
    """A GPU's line and its occupants' lines."""
    health_width = len(health_header(grid.health))  # the cells `_append_health` takes
    gpu = row.gpu
    style = _ALERT if row.problems else "bold"
    view.append(f"{gpu.index:>3} ", style)
    names = _gpu_names(gpu)  # the first that fits, else the last one cut
    view.append(_cell(next((n for n in names if len(n) <= grid.name), names[-1]), grid.name), style)
    view.append(" " * (_PID_WIDTH + 2))
    if gpu.lost:
        room = grid.width - 4 - grid.name - _PID_WIDTH - 2
        view.append(_cut("; ".join(row.problems), room), _ALERT)
    else:
        _append_bar(
            view, gpu.utilization_gpu_percent or 0, utilization_text(gpu), _UTIL_WIDTH, grid
        )
        view.append(" ")
        percent = memory_percent(gpu)
        _append_bar(view, percent, memory_text(gpu), grid.memory, grid)
        view.append(" ")
        _append_health(view, row, grid.health)
        view.append(_cut("; ".join(row.problems), grid.marker - health_width), _ALERT)
    view.append("\n")
    for occupant in row.occupants:
        style = _ALERT if occupant.problem else ""
        pid = "" if occupant.pid is None else str(occupant.pid)
        name = "└ " + occupant.names[min(form, len(occupant.names) - 1)]
        view.append(
            f"    {_cell(name, grid.name)} {pid:>{_PID_WIDTH}} {'':<{grid.bars + _UTIL_WIDTH}}"
            f" {'':<{grid.bars}}{_occupant_memory(occupant):>{grid.memory}} {'':<{health_width}}",
            style,
        )
        view.append(_cut(occupant.problem, grid.marker - health_width) + "\n", style)


def _append_bar(view: Text, percent: int, label: str, label_width: int, grid: Layout) -> None:
    if grid.bar:
        color = "green" if percent < 60 else "yellow" if percent < 90 else "red"
        view.append(bar(percent / 100, grid.bar), color)
        view.append(" ")
    view.append(f"{label:>{label_width}}")


# --- Temperature, power and history: shown where the terminal has room ----------------

SENSORS_WIDTH = 12  # ` 100°C  250W`
_SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: tuple[int, ...], width: int) -> str:
    """The last `width` percentages (0..100) as a line of block heights, padded to `width`."""
    shown = values[-width:] if width > 0 else ()
    marks = "".join(_SPARKS[min(7, max(0, v) * 8 // 101)] for v in shown)
    return marks.rjust(width)


def health_columns(room: int) -> tuple[bool, int, int]:
    """(sensors shown, utilisation and memory history widths) in `room` spare cells: the
    memory history goes first as it shrinks, then the utilisation history (each 8 to
    HISTORY_POINTS wide), then the temperature and power."""
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
    return text + " "


def _append_health(view: Text, row: GpuRow, room: int) -> None:
    sensors, util, memory = health_columns(room)
    if not sensors:
        return
    gpu = row.gpu
    temperature = "" if gpu.temperature_c is None else f"{gpu.temperature_c}°C"
    power = "" if gpu.power_w is None else f"{gpu.power_w:.0f}W"
    view.append(f"{temperature:>6} {power:>5}")
    if util:
        view.append(" " + sparkline(row.utilization_history, util), "cyan")
    if memory:
        view.append(" " + sparkline(row.memory_history, memory), "magenta")
    view.append(" ")


def board_lines(board: Board, *, stamp: str) -> list[str]:
    """The board as plain lines: one per GPU, one per occupant under it (`!` marks what is
    wrong), one per other node of a swarm, then every violation and note."""
    lines = []
    for row in board.gpus:
        gpu = row.gpu
        problems = "".join(f" ! {problem}" for problem in row.problems)
        temperature = "" if gpu.temperature_c is None else f" temp {gpu.temperature_c}C"
        power = "" if gpu.power_w is None else f" power {gpu.power_w:.0f}W"  # what NVML tells
        text = f"{gpu.name} util {utilization_text(gpu)} mem {memory_text(gpu)}{temperature}{power}"
        lines.append(f"{stamp} GPU {gpu.index} {'?' if gpu.lost else text}{problems}")
        for occupant in row.occupants:
            mark = "!" if occupant.problem else "-"
            pid = "" if occupant.pid is None else f" pid {occupant.pid}"
            memory = "" if occupant.memory_mib is None else f" {occupant.memory_mib} MiB"
            problem = f" {occupant.problem}" if occupant.problem else ""
            lines.append(f"{stamp}   {mark} {occupant.names[0]}{pid}{memory}{problem}")
    lines += [f"{stamp} {node}" for node in board.nodes]
    lines += [f"{stamp} VIOLATION: {problem}" for problem in board.problems]
    lines += [f"{stamp} {note}" for note in board.notes]
    lines.append(f"{stamp} {len(board.problems)} violation(s)")
    return lines


@contextmanager
def watch_display(*, json_lines: bool, interval_s: float) -> Iterator[Callable[[Status], None]]:
    """How `status --watch` shows each snapshot: one JSON document per line (`--json`), the
    live board on a terminal, plain lines elsewhere."""
    if json_lines:

        def show_json(status: Status) -> None:
            sys.stdout.write(json.dumps(status_document(status)) + "\n")
            sys.stdout.flush()

        yield show_json
    elif sys.stdout.isatty():
        # lazy: rich is heavy; only drawn output needs it
        from rich.console import Console
        from rich.control import Control
        from rich.segment import Segment, Segments

        screen = Console(file=sys.stdout)
        history = new_history(interval_s)  # each GPU's history, drawn where there is room

        def show(status: Status) -> None:
            """Redraw in place on the alternate screen, as rich's live display does (each
            frame rendered once, padded to the terminal's size now)."""
            nonlocal history
            history = recorded(history, status)
            view = BoardView(
                build_board(status, history), stamp=time.strftime(_STAMP), interval_s=interval_s
            )
            width, height = screen.size
            lines = screen.render_lines(view, screen.options.update(height=height), pad=True)
            frame = [Control.home().segment]
            for number, line in enumerate(Segment.set_shape(lines, width, height)):
                frame += [Segment.line(), *line] if number else line
            screen.print(Segments(frame), end="", crop=False)

        screen.set_alt_screen(True)
        screen.show_cursor(False)
        try:
            yield show
        finally:  # also on Ctrl-C: the screen and the cursor as they were
            screen.show_cursor(True)
            screen.set_alt_screen(False)
    else:
        yield status_lines


def show_status(status: Status | None, *, json_output: bool) -> None:
    """One-shot `drgpu status` (None: a watch has shown its own): JSON, or one frame of the
    watch's board on a terminal, plain lines anywhere else."""
    if status is None:
        return
    if json_output:
        print_json(status_document(status))
    elif sys.stdout.isatty():
        board = build_board(status)
        console().print(BoardView(board, stamp=time.strftime(_STAMP), interval_s=None))
    else:
        status_lines(status)


def status_lines(status: Status) -> None:
    """A snapshot as plain lines on stdout, flushed (a pipe sees each tick at once); a line
    break or control character inside one (from a label) is written visibly."""
    lines = board_lines(build_board(status), stamp=time.strftime(_STAMP))
    sys.stdout.write("".join(visible(line) + "\n" for line in lines))
    sys.stdout.flush()
