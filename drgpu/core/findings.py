"""One kind of judgement for every command: a finding, which `ui` turns into lines and
into `--json` (`drgpu.ui.documents`) the same way for every command."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drgpu.core.modes import StrEnum


class Level(StrEnum):
    """How much a finding matters, least first."""

    OK = "ok"  # as it should be
    NOTE = "note"  # worth knowing, nothing to do
    WARN = "warn"  # likely wrong, or not checked: the command still succeeds
    FAIL = "fail"  # wrong: the command fails


@dataclass(frozen=True)
class Finding:
    """One judgement: `subject` is `level`, because `message`; `fix` says what to do. `kind`
    names it for machines (`wrong-gpu`); `facts` carries plain JSON values (a pid, a run id)."""

    subject: str
    level: Level
    message: str
    fix: str | None = None
    kind: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)


def failed(findings: Iterable[Finding]) -> bool:
    """Whether any finding is a failure."""
    return any(f.level == Level.FAIL for f in findings)
