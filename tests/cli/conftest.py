"""What the CLI tests share besides the `cli` fixture (tests/conftest.py): the example
inventories, a system.env written for a test, and the shape of an error's stderr."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.runners import Result

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "examples" / "inventories"
# 0: Tesla M40 (bus 03), 1: GTX 1650 (bus 81); DRfC's own box is INVENTORIES / "gtx1650-m40.json"
GTX_M40 = REPO / "tests" / "inventories" / "m40-first.json"
MIG_L4 = INVENTORIES / "a100-mig-plus-l4.json"
M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"

Settings = Callable[..., Path]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """A system.env in tmp_path with the given keys, e.g. DR_WORKERS='2'."""

    def write(**values: str) -> Path:
        path = tmp_path / "system.env"
        path.write_text(
            "".join(f"{key}={value}\n" for key, value in values.items()), encoding="utf-8"
        )
        return path

    return write


def assert_one_error_line(result: Result) -> str:
    """The whole of stderr is `drgpu: error: ...`, maybe with one hint line; no traceback."""
    lines = result.err.splitlines()
    assert 1 <= len(lines) <= 2, result.err
    assert lines[0].startswith("drgpu: error: ")
    if len(lines) == 2:
        assert lines[1].startswith("  hint: ")
    assert "Traceback" not in result.err
    return lines[0]
