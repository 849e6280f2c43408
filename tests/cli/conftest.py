"""What the CLI tests share besides the `cli` fixture (tests/conftest.py): a system.env
written for a test, and the shape of an error's stderr."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.runners import Result

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
