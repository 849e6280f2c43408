"""What the CLI tests share: drgpu's own `main`, run in-process in a fresh directory (no
Docker, no NVML), and a system.env written for a test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from drgpu.cli import main


class Result(NamedTuple):
    """How one drgpu command ended (`code, out, err = cli(...)` unpacks it)."""

    code: int
    out: str
    err: str


Cli = Callable[..., Result]
Settings = Callable[..., Path]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cli:
    """`cli("plan", "--json", ...)`: drgpu's own main, run in a fresh working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DRGPU_DEBUG", raising=False)
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str | Path) -> Result:
        capsys.readouterr()
        with pytest.raises(SystemExit) as caught:
            main([str(arg) for arg in args])
        captured = capsys.readouterr()
        code = caught.value.code
        return Result(code if isinstance(code, int) else 1, captured.out, captured.err)

    return run


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
