"""`drgpu example-env`: system.env.example on stdout, or in a new file, never over one."""

from __future__ import annotations

from pathlib import Path

from tests.support.runners import Cli

REPO = Path(__file__).resolve().parents[2]


def test_it_prints_the_example_settings(cli: Cli) -> None:
    result = cli("example-env")
    assert result.code == 0
    assert result.out == (REPO / "system.env.example").read_text(encoding="utf-8")


def test_it_writes_a_new_file_and_never_over_one(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "system.env"
    assert cli("example-env", "-o", target).code == 0
    assert target.read_text(encoding="utf-8") == (REPO / "system.env.example").read_text()
    target.write_text("DR_WORKERS=2\n", encoding="utf-8")
    result = cli("example-env", "-o", target)
    assert result.code == 2
    assert result.err.startswith(f"drgpu: error: {target} exists; drgpu never writes over it")
    assert target.read_text(encoding="utf-8") == "DR_WORKERS=2\n"
