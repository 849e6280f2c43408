"""`drgpu up`'s progress on stderr: one line per service with its latest state (as Compose
reports it, then drgpu's verification) and the time since `up` began; redrawn in place on
a terminal, one plain line per change elsewhere, nothing with `--quiet`."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

    from drgpu.core.compose_progress import ProgressEvent


class UpProgress:
    """Fed `ProgressEvent`s (call it with one); a context manager around the start."""

    def __init__(self, *, quiet: bool = False) -> None:
        self._quiet = quiet
        self._start = time.monotonic()
        self._lines: dict[str, tuple[str, float, bool]] = {}  # state, elapsed_s, failed
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
        if last is not None and (last[0], last[2]) == (event.state, event.failed):
            return
        elapsed_s = time.monotonic() - self._start
        self._lines[event.subject] = (event.state, elapsed_s, event.failed)
        if self._live is not None:
            self._live.update(self._view(), refresh=True)
        else:
            mark = "error: " if event.failed else ""
            sys.stderr.write(f"drgpu: {event.subject}: {mark}{event.state} ({elapsed_s:.1f}s)\n")

    def _view(self) -> Text:
        from rich.text import Text  # lazy: rich is heavy; only drawn output needs it

        width = max(len(subject) for subject in self._lines)
        view = Text()
        for subject, (state, elapsed_s, failed) in self._lines.items():
            done = state == "verified"
            style = "bold red" if failed else "green" if done else ""
            view.append(f"{'✗' if failed else '✓' if done else '·'} ", style)
            view.append(f"{subject:<{width}}  {elapsed_s:5.1f}s  ")
            view.append(f"{state}\n", style)
        view.rstrip()
        return view
