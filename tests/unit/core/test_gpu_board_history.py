"""drgpu/core/gpu_board.py: each GPU's short history (utilisation and memory, one point per
history step) and its temperature and power on the board."""

from __future__ import annotations

from drgpu.core.gpu_board import HISTORY_POINTS, build_board, new_history, recorded
from drgpu.core.gpu_usage import Status, build_status
from drgpu.core.model import Gpu, Inventory

G0, G1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-0000-4000-8000-000000000000"


def snapshot(utilization: int, *, lost: bool = False) -> Status:
    gpus = (
        Gpu(
            index=0,
            uuid=G0,
            name="Tesla T4",
            pci_bus_id="00000000:01:00.0",
            memory_total_mib=1000,
            memory_used_mib=10 * utilization,
            utilization_gpu_percent=utilization,
            temperature_c=50 + utilization // 10,
            power_w=20.5,
        ),
        Gpu(
            index=1,
            uuid=G1,
            name="L4",
            pci_bus_id="00000000:02:00.0",
            memory_total_mib=1000,
            error="gpu_is_lost" if lost else None,
        ),
    )
    return build_status(Inventory(gpus=gpus), [], [], {})


def test_a_point_per_history_step_and_at_most_twenty() -> None:
    history = new_history(interval_s=2.0)  # a point every 3 refreshes (6 s)
    assert history.every == 3
    for refresh in range(100):
        history = recorded(history, snapshot(refresh))
    assert history.utilization[G0] == tuple(range(99 - 3 * (HISTORY_POINTS - 1), 100, 3))
    assert len(history.memory[G0]) == HISTORY_POINTS
    assert history.memory[G0][-1] == 99  # percent of the total
    assert history.utilization[G1] == (0,) * HISTORY_POINTS


def test_a_slow_watch_takes_a_point_every_refresh() -> None:
    history = new_history(interval_s=10.0)
    history = recorded(recorded(history, snapshot(5)), snapshot(7))
    assert history.utilization[G0] == (5, 7)


def test_a_lost_gpu_keeps_no_history() -> None:
    history = recorded(new_history(10.0), snapshot(5))  # a point per refresh
    history = recorded(history, snapshot(6, lost=True))
    assert G1 not in history.utilization


def test_the_board_rows_carry_sensors_and_history() -> None:
    status = snapshot(40)
    history = recorded(new_history(1.0), status)
    row = build_board(status, history).gpus[0]
    assert (row.gpu.temperature_c, row.gpu.power_w) == (54, 20.5)
    assert (row.utilization_history, row.memory_history) == ((40,), (40,))
    assert build_board(status).gpus[0].utilization_history == ()  # no history: none shown
