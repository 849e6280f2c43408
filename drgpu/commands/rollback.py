"""The one rollback of a failed or interrupted `up`: the run goes back down, what the user
made stays, and a rollback that left anything says what (never "brought down" untrue)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from drgpu.core.facts import ContainerFacts
from drgpu.errors import DockerError
from drgpu.host import engine, signals
from drgpu.host.state_files import written_by_drgpu
from drgpu.ui.talk import note

# An rl_coach stopped while it asked for its trainer: the engine makes it a moment later.
SETTLE_S = 0.5
SETTLE_ROUNDS = 6


@contextmanager
def rolled_back(
    project: str,
    bring_down: Callable[[], object],
    *,
    keep_on: type[BaseException] | None = None,
    strays: Callable[[], list[ContainerFacts]] | None = None,
    written: Path | None = None,
) -> Iterator[None]:
    """Bring the run down on any failure or caught signal in the block (signals wait): `bring_down`
    (Compose's down, or DRfC's stop script), every container and network of `project` and
    each volume it did not have before, what `strays` lists (its rl_coach's unlabelled
    SageMaker trainers) until none comes, and the file `written` (the override). A `keep_on`
    failure leaves the run as it is (it ran before; a refusing start script left it)."""
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
                if strays is not None:
                    remove_strays(strays)
                if written is not None and written_by_drgpu(written):
                    written.unlink(missing_ok=True)
            left = left_of(project, strays)
        if left:
            raise DockerError(
                f"could not bring {project} back down: {', '.join(left)} still there",
                hint=f"remove them: docker rm -f {' '.join(left)}",
            ) from failure
        raise


def remove_strays(strays: Callable[[], list[ContainerFacts]]) -> int:
    """Remove what `strays` lists, listing again after a pause (SETTLE_S) until a listing is
    empty: how many were found at first."""
    counts = []
    for _ in range(SETTLE_ROUNDS):
        found = strays()
        counts.append(len(found))
        if not found:
            break
        engine.remove_containers([container.id for container in found])
        time.sleep(SETTLE_S)
    return counts[0]


def left_of(project: str, strays: Callable[[], list[ContainerFacts]] | None) -> list[str]:
    """The names of the containers of `project`, and of `strays`, still there."""
    left = [*engine.project_containers(project), *(strays() if strays else [])]
    return sorted({container.name for container in left})
