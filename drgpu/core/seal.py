"""The checksum line that ends a file drgpu writes for the user (`render -o`): it tells a file
drgpu wrote, unchanged since, from one a person edited (which drgpu never overwrites)."""

from __future__ import annotations

import hashlib

SEAL_PREFIX = "# drgpu-sha256: "


def sealed(text: str) -> str:
    """`text` (ending in a newline) with its checksum line after it."""
    body = text if text.endswith("\n") else text + "\n"
    digest = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{body}{SEAL_PREFIX}{digest}\n"


def is_sealed(text: str) -> bool:
    """Whether `text` is what `sealed` wrote, byte for byte."""
    body = text[: text.rfind("\n", 0, len(text) - 1) + 1]
    return bool(body) and text == sealed(body)
