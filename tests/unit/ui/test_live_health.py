"""drgpu/ui/live.py: temperature, power and the history sparklines, shown as the terminal's
width allows (dropped first at narrow widths), and in plain lines."""

from __future__ import annotations

import pytest

from drgpu.core.gpu_board import build_board, new_history, recorded
from drgpu.ui.live import (
    board_lines,
    board_text,
    health_columns,
    health_header,
    sparkline,
)
from tests.unit.core.test_gpu_board_history import snapshot


def test_sparklines_scale_percentages_to_eight_heights() -> None:
    assert sparkline((0, 12, 25, 50, 75, 100), 6) == "▁▁▂▄▆█"
    assert sparkline((100,), 4) == "   █"  # padded on the left: the newest is on the right
    assert sparkline(tuple(range(30)), 5) == sparkline((25, 26, 27, 28, 29), 5)
    assert sparkline((50,), 0) == ""


@pytest.mark.parametrize(
    ("room", "columns"),
    [
        (0, (False, 0, 0)),  # no spare cells: nothing added
        (11, (False, 0, 0)),
        (12, (True, 0, 0)),  # temperature and power first
        (12 + 9, (True, 8, 0)),  # then the utilisation history
        (12 + 18, (True, 8, 8)),  # then the memory history
        (200, (True, 20, 20)),  # at most 20 points each
    ],
)
def test_what_fits_the_room(room: int, columns: tuple[bool, int, int]) -> None:
    assert health_columns(room) == columns


def test_the_terminal_view_shows_them_where_there_is_room() -> None:
    history = new_history(10.0)  # a point per refresh
    for utilization in (0, 50, 100):
        history = recorded(history, snapshot(utilization))
    board = build_board(snapshot(100), history)
    wide = board_text(board, stamp="12:00:00", interval_s=1, width=200).plain
    assert "Temp Power Util hist." in " ".join(wide.split())
    line = next(line for line in wide.splitlines() if "Tesla T4" in line)
    assert "60°C   20W" in line
    assert line.rstrip().endswith("▁▄█" + " " + " " * 17 + "▁▄█")
    narrow = board_text(board, stamp="12:00:00", interval_s=1, width=100).plain
    assert "°C" not in narrow and "Temp" not in narrow
    assert health_header(0) == ""


def test_plain_lines_carry_temperature_and_power() -> None:
    lines = board_lines(build_board(snapshot(30)), stamp="t")
    assert lines[0] == "t GPU 0 Tesla T4 util 30% mem 300/1000 MiB temp 53C power 20W"
