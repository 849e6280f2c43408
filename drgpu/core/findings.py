"""One kind of judgement for every command: a finding.

`plan`, `doctor`, `swarm-setup`, `cuda-check`, `up` and `status` each say things about
a subject (a check, a service, a container, a GPU, a node): whether it is as it should
be, and, when not, what to do. A finding is that sentence as data; `ui` turns findings
into lines and into `--json` (`drgpu.ui.documents`), the same way for every command.
"""

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
    """One judgement: `subject` is `level`, because `message`; `fix` says what to do.

    `kind` names the judgement for machines (a doctor check id, a violation kind such as
    `wrong-gpu`); `facts` carries its plain JSON values (a pid, a GPU index, a run id).
    """

    subject: str
    level: Level
    message: str
    fix: str | None = None
    kind: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)


def worst(findings: Iterable[Finding]) -> Level:
    """The highest level among `findings` (OK when there are none)."""
    order = list(Level)
    return max((f.level for f in findings), key=order.index, default=Level.OK)


def failed(findings: Iterable[Finding]) -> bool:
    """Whether any finding is a failure."""
    return worst(findings) == Level.FAIL
