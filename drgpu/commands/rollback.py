"""The one rollback of a failed or interrupted `up`: on any failure or caught signal the run
goes back down, and what the user made stays."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from drgpu.host import engine, signals
from drgpu.ui.talk import note


@contextmanager
def rolled_back(
    project: str,
    bring_down: Callable[[], object],
    *,
    keep_on: type[BaseException] | None = None,
) -> Iterator[None]:
    """On any failure or caught signal inside the block, the run goes back down: first
    `bring_down` (Compose's own down, or DRfC's stop script), then every container and
    network of `project` and each volume it did not have when the block began (what the
    user made stays). Signals during the rollback do not cut it short. A failure of type
    `keep_on` leaves the run as it is (a stack that ran before, which a refusing start
    script did not touch)."""
    kept = engine.project_volumes(project)
    try:
        yield
    except BaseException as failure:
        if keep_on is not None and isinstance(failure, keep_on):
            raise
        told: list[str] = []

        def postpone(name: str) -> None:
            if not told:
                note(f"{name}: still bringing {project} back down, one moment")
            told.append(name)

        with signals.shielded(postpone):
            if isinstance(failure, (KeyboardInterrupt, signals.Interrupted)):
                note(f"interrupted: bringing {project} back down")
            try:
                bring_down()
            finally:
                engine.remove_run(project, kept)
        raise
