"""The one JSON convention of every `--json` document.

A document is an object with `schema_version`, `ok`, and the command's own keys; each
judgement in it is a finding, written by `finding()` with the same keys everywhere:
`kind`, `subject`, `level`, `message`, `fix`, then the finding's own facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from drgpu.core.findings import Finding, failed

SCHEMA_VERSION = 2  # 2: every judgement is a finding (kind, subject, level, message, fix)


def finding(item: Finding) -> dict[str, Any]:
    """One finding as JSON."""
    return {
        "kind": item.kind,
        "subject": item.subject,
        "level": str(item.level),
        "message": item.message,
        "fix": item.fix,
        **item.facts,
    }


def document(findings: Iterable[Finding], **body: Any) -> dict[str, Any]:
    """A command's document: `ok` (no finding failed), its keys, then `findings`."""
    items = list(findings)
    return {
        "schema_version": SCHEMA_VERSION,
        "ok": not failed(items),
        **body,
        "findings": [finding(item) for item in items],
    }
