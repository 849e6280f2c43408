"""Plan warnings without the index-order one.

The example boxes of the tests mix GPU kinds, so CUDA's order differs from nvidia-smi's
there and every plan with bare indices warns about it (drgpu.core.index_order). Tests
about other warnings compare the rest; tests/unit/core/test_index_order.py tests that one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from drgpu.core.findings import Finding

ORDER_WARNING = "CUDA's order"


def messages(document: Mapping[str, Any]) -> list[str]:
    """The messages of a `--json` document's findings (a plan's: its warnings)."""
    return [finding["message"] for finding in document["findings"]]


def order_free(warnings: Iterable[Finding | str]) -> tuple[str, ...]:
    """The messages of `warnings` less the one about CUDA's order against nvidia-smi's."""
    texts = (w if isinstance(w, str) else w.message for w in warnings)
    return tuple(text for text in texts if not text.startswith(ORDER_WARNING))


def order_free_text(stderr: str) -> str:
    """stderr less the `drgpu: warning:` line about CUDA's order."""
    mark = f"drgpu: warning: {ORDER_WARNING}"
    return "".join(line for line in stderr.splitlines(True) if not line.startswith(mark))
