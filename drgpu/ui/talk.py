"""Talk for people on stderr: spinners and warnings (rich, imported only when used)."""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext


def spinner(message: str) -> AbstractContextManager[object]:
    """A spinner on stderr while a slow step runs; silent when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return nullcontext()
    from rich.console import Console  # lazy: rich is heavy; only drawn output needs it
    from rich.text import Text

    return Console(stderr=True).status(Text(one_line(message)))  # a Text: no markup read


def preload_rich() -> None:
    """Import what the tables need ahead of use, e.g. in a thread."""
    import rich.console  # lazy: rich is heavy; only drawn output needs it
    import rich.table  # noqa: F401


def warn(message: str) -> None:
    """One warning line on stderr."""
    sys.stderr.write(f"drgpu: warning: {one_line(message)}\n")


def note(message: str) -> None:
    """One line of talk on stderr."""
    sys.stderr.write(f"drgpu: {one_line(message)}\n")


def one_line(text: str) -> str:
    """`text` as one line, each whitespace run (a newline) one space, `visible`: what others
    wrote (a lock's labels, Compose's messages) cannot fake a line of drgpu's."""
    return visible(" ".join(text.split()))


def visible(text: str, keep: str = "") -> str:
    """`text` with each control character but those in `keep` (a newline, an escape, a NUL)
    written visibly (`\\n`, `\\x1b`): text from outside cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)
