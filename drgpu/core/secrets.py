"""Which settings are secrets, and how drgpu shows them: never in full."""

from __future__ import annotations

SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD")
MASK = "****"


def is_secret(name: str) -> bool:
    """Whether a setting's value must never be printed (its name holds a secret marker)."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def masked(name: str, value: str) -> str:
    """`value` as drgpu may print it."""
    return MASK if value and is_secret(name) else value
