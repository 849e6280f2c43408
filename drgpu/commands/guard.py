"""What keeps `up` and `down` safe against each other and against signals: the engine-wide
lock (with the cleanup of what a killed holder left), the rule that a later `down` wins
over an earlier `up` still waiting, and the one rollback of a failed or interrupted `up`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from drgpu.core.lock_holder import Holder, down_marks, superseded
from drgpu.errors import ConfigError, DockerError


@contextmanager
def locked(command: str, project: str, settings: Mapping[str, str]) -> Iterator[Holder]:
    """Hold the engine's lock for `drgpu COMMAND PROJECT` (see drgpu.host.enginelock).

    A `down` leaves its mark in the engine; an `up` that began before that `down` and got
    the lock after it stops there: `drgpu up & drgpu down` ends with nothing running.
    """
    from drgpu.host import engine
    from drgpu.host.enginelock import DEFAULT_TIMEOUT_S, TIMEOUT_KEY, engine_lock
    from drgpu.ui.talk import note

    timeout_s = _seconds(settings, TIMEOUT_KEY, DEFAULT_TIMEOUT_S)
    with engine_lock(
        command,
        project,
        on_wait=note,
        on_stale=_clean_after,
        timeout_s=timeout_s,
        volumes_before=lambda: engine.project_volumes(project),
    ) as holder:
        if command == "down":
            engine.write_down_marks(down_marks(engine.down_marks(), project, holder.process))
        elif superseded(engine.down_marks(), project, holder.process):
            raise DockerError(
                f"not starting {project}: a `drgpu down` of it was run after this `up` began",
                hint="run `drgpu up` again to start it",
            )
        yield holder


def _clean_after(holder: Holder) -> None:
    """Remove what a killed `drgpu up` or `down` left of its run: never verified."""
    from drgpu.commands.swarm_deploy import remove_stale
    from drgpu.host import engine
    from drgpu.ui.talk import warn

    removed = {"services": remove_stale(holder.project)}  # a Swarm stack: docker stack rm
    removed.update(engine.remove_run(holder.project, holder.volumes_before))
    left = ", ".join(f"{count} {kind}" for kind, count in removed.items() if count)
    warn(
        f"{holder.describe()} was killed: its lock is removed"
        + (f", and what it left of {holder.project} ({left})" if left else "")
    )


def _seconds(settings: Mapping[str, str], key: str, default: float) -> float:
    text = (settings.get(key) or os.environ.get(key) or "").strip()
    if not text:
        return default
    if not text.isdigit() or len(text) > 6 or int(text) > MAX_LOCK_TIMEOUT_S:
        raise ConfigError(
            f"{key}: {text[:40]!r} is not a whole number of seconds from 0 to {MAX_LOCK_TIMEOUT_S}"
        )
    return float(text)


MAX_LOCK_TIMEOUT_S = 86400


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
    from drgpu.host import engine, signals
    from drgpu.ui.talk import note

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
