"""`drgpu up`'s progress on stderr: one line per service with its latest state (as Compose
reports it, then drgpu's verification) and the time since `up` began; redrawn in place on
a terminal, one plain line per change elsewhere, nothing with `--quiet`."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

    from drgpu.core.compose_progress import ProgressEvent


@dataclass(frozen=True)
class _Line:
    state: str
    elapsed_s: float
    failed: bool


class UpProgress:
    """Fed `ProgressEvent`s (call it with one); a context manager around the start."""

    def __init__(self, *, quiet: bool = False) -> None:
        self._quiet = quiet
        self._start = time.monotonic()
        self._lines: dict[str, _Line] = {}
        self._live: Any = None

    def __enter__(self) -> UpProgress:
        if not self._quiet and sys.stderr.isatty():
            from rich.console import Console  # lazy: rich is heavy; only drawn output needs it
            from rich.live import Live  # lazy: rich is heavy; only drawn output needs it

            self._live = Live(console=Console(stderr=True), auto_refresh=False, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *raised: object) -> None:
        if self._live is not None:
            self._live.__exit__(*raised)

    def __call__(self, event: ProgressEvent) -> None:
        if self._quiet:
            return
        last = self._lines.get(event.subject)
        if last is not None and (last.state, last.failed) == (event.state, event.failed):
            return
        line = _Line(event.state, time.monotonic() - self._start, event.failed)
        self._lines[event.subject] = line
        if self._live is not None:
            self._live.update(self._view(), refresh=True)
        else:
            mark = "error: " if event.failed else ""
            sys.stderr.write(
                f"drgpu: {event.subject}: {mark}{event.state} ({line.elapsed_s:.1f}s)\n"
            )

    def _view(self) -> Text:
        from rich.text import Text  # lazy: rich is heavy; only drawn output needs it

        width = max(len(subject) for subject in self._lines)
        view = Text()
        for subject, line in self._lines.items():
            done = line.state == "verified"
            style = "bold red" if line.failed else "green" if done else ""
            view.append(f"{'✗' if line.failed else '✓' if done else '·'} ", style)
            view.append(f"{subject:<{width}}  {line.elapsed_s:5.1f}s  ")
            view.append(f"{line.state}\n", style)
        view.rstrip()
        return view
