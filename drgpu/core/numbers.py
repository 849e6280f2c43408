"""Whole numbers as users write them, checked against their bounds before any conversion.
Only ASCII digits count: `str.isdigit` takes `²` and `٣`, which no shell reads as a number."""

from __future__ import annotations

from drgpu.errors import ConfigError


def is_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits, and nothing else."""
    return text.isascii() and text.isdigit()


def whole_number(text: str, low: int, high: int) -> int | None:
    """`text` as a whole number from `low` to `high`, else None (converting no more digits
    than `high` has: Python refuses ints of over 4300 digits)."""
    digits = text.lstrip("0") or "0"
    if not is_digits(text) or len(digits) > len(str(high)):
        return None
    number = int(digits)
    return number if low <= number <= high else None


def whole_seconds(key: str, text: str, low: int, high: int) -> int:
    """The setting `key`'s value `text` as whole seconds from `low` to `high`, or ConfigError."""
    seconds = whole_number(text, low, high)
    if seconds is None:
        raise ConfigError(
            f"{key}: {text[:40]!r} is not a whole number of seconds from {low} to {high}"
        )
    return seconds
