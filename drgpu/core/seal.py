"""The checksum line drgpu ends a file it writes for the user with (`render -o`): it tells
a file drgpu wrote, unchanged since, from one a person edited (which drgpu never
overwrites), whatever its first line says."""

from __future__ import annotations

import hashlib
import re

SEAL_PREFIX = "# drgpu-sha256: "
_SEAL = re.compile(r"# drgpu-sha256: (?P<digest>[0-9a-f]{64})\n\Z")


def sealed(text: str) -> str:
    """`text` (ending in a newline) with its checksum line after it."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{SEAL_PREFIX}{_digest(body)}\n"


def is_sealed(text: str) -> bool:
    """Whether `text` is what `sealed` wrote, byte for byte (no line added, changed or
    removed since)."""
    body, newline, last = text[:-1].rpartition("\n")
    match = _SEAL.fullmatch(last + "\n") if newline and text.endswith("\n") else None
    return match is not None and match["digest"] == _digest(body + newline)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
