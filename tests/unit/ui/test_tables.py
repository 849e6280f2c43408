"""What the tables say about GPU order."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.host.files import load_inventory
from drgpu.ui.tables import gpus_table

TOPOLOGIES = Path(__file__).parents[2] / "topologies"


def test_gpus_never_says_the_orders_differ_because_a_gpu_is_lost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpus_table(load_inventory(TOPOLOGIES / "lost.json"), full=False)
    shown = capsys.readouterr()
    assert "LOST" in shown.out
    assert "differs" not in shown.err


def test_gpus_says_so_where_cuda_ranks_the_gpus_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpus_table(load_inventory(TOPOLOGIES / "gtx1650-rtx3090-m40-orders.json"), full=False)
    assert "CUDA's default order (fastest first, column CUDA) differs" in capsys.readouterr().err
