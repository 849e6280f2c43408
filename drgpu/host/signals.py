"""The signals drgpu catches (SIGINT, SIGTERM, SIGHUP): each unwinds the command like
Ctrl-C does, through the same rollback; inside a shielded block they wait their turn."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class Interrupted(BaseException):
    """A caught signal, unwinding the command (exit 128 + its number). No `except Exception`
    stops it, and typer and click let it through to `drgpu.cli.main`, which names it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name  # SIGINT, SIGTERM or SIGHUP
        self.exit_code = 128 + signum  # as a shell reports a program a signal stopped
        super().__init__(self.name)


@contextmanager
def caught() -> Iterator[None]:
    """Within the block, the first caught signal raises `Interrupted` (in the main thread);
    later ones are ignored to the process's end, so the unwinding finishes (a `shielded`
    block still tells of each)."""
    interrupted: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        interrupted.append(signum)
        for caught_signum in CAUGHT:
            signal.signal(caught_signum, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = _install(interrupt, keep_ignored=True)
    try:
        yield
    finally:
        if not interrupted:
            _restore(previous)


@contextmanager
def shielded(on_signal: Callable[[str], None]) -> Iterator[None]:
    """Within the block, caught signals do not interrupt: `on_signal` is told of each one,
    and the block runs to its end (a rollback that must not be cut short)."""
    previous = _install(
        lambda signum, _: on_signal(signal.Signals(signum).name), keep_ignored=False
    )
    try:
        yield
    finally:
        _restore(previous)


def _install(
    handler: Callable[[int, FrameType | None], None], *, keep_ignored: bool
) -> dict[int, _Handler]:
    previous: dict[int, _Handler] = {}
    for signum in CAUGHT:
        if keep_ignored and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # ignored by whoever started drgpu (nohup, a background job): it stays so
        try:
            previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread: signals go to the main thread anyway
            break
    return previous


def _restore(previous: dict[int, _Handler]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)
