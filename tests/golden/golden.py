"""Compare text with a golden file; `DRGPU_UPDATE_GOLDEN=1` writes the file anew instead."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent
UPDATE_VARIABLE = "DRGPU_UPDATE_GOLDEN"


def assert_matches_golden(name: str, text: str) -> None:
    """Fail unless `text` equals tests/golden/<name>, byte for byte (the diff says how not)."""
    path = GOLDEN_DIR / name
    if os.environ.get(UPDATE_VARIABLE) == "1":
        path.write_text(text, encoding="utf-8", newline="\n")
        return
    assert path.is_file(), f"{path} is missing: run with {UPDATE_VARIABLE}=1 to write it"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"golden/{name}",
                tofile="rendered",
            )
        )
        raise AssertionError(
            f"rendered text differs from {path}; if the change is intended,"
            f" run with {UPDATE_VARIABLE}=1 and review the diff:\n{diff}"
        )
