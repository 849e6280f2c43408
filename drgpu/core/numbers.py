"""Whole numbers as users write them, checked against their bounds before any conversion."""

from __future__ import annotations

import re

_WHOLE_NUMBER = re.compile(r"^[0-9]+$")


def whole_number(text: str, low: int, high: int) -> int | None:
    """`text` as a whole number from `low` to `high`, else None (never converting a number
    longer than `high` could be written: Python refuses ints of over 4300 digits)."""
    digits = text.lstrip("0") or "0"
    if not _WHOLE_NUMBER.match(text) or len(digits) > len(str(high)):
        return None
    number = int(digits)
    return number if low <= number <= high else None
