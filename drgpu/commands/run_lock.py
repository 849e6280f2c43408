"""The engine-wide lock of a run's `up` and `down`: the cleanup of what a killed holder left,
and the rule that a later `down` wins over an earlier `up` still waiting."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from drgpu.commands.rollback import remove_strays
from drgpu.core.drfc_scripts import run_trainers
from drgpu.core.inputs import Inputs
from drgpu.core.lock_holder import Holder, down_marks, superseded
from drgpu.core.numbers import whole_seconds
from drgpu.core.settings import DEFAULTS, Config, training_run
from drgpu.core.sharing import MPS_LOG_VOLUME, MPS_PIPE_VOLUME
from drgpu.errors import DockerError
from drgpu.host import compose, engine, swarm, swarm_engine
from drgpu.host.enginelock import TIMEOUT_KEY, engine_lock
from drgpu.host.state_files import state_dir
from drgpu.ui.talk import note, warn

MAX_TIMEOUT_S = 86400


@contextmanager
def locked(command: str, config: Config) -> Iterator[Holder]:
    """Hold the engine's lock for `drgpu COMMAND` of `config`'s run (host.enginelock). A `down`
    leaves its mark in the engine; an `up` that began before that `down` and got the lock
    after it stops there: `drgpu up & drgpu down` ends with nothing running."""
    project = config.project
    text = (config.values.get(TIMEOUT_KEY) or os.environ.get(TIMEOUT_KEY) or "").strip()
    timeout_s = whole_seconds(TIMEOUT_KEY, text or DEFAULTS[TIMEOUT_KEY], 0, MAX_TIMEOUT_S)
    with engine_lock(
        command,
        project,
        on_wait=note,
        on_stale=_clean_after,
        timeout_s=timeout_s,
        volumes_before=lambda: engine.project_volumes(project),
    ) as holder:
        if command == "down":
            engine.write_down_marks(down_marks(engine.read_down_marks(), project, holder.process))
        elif superseded(engine.read_down_marks(), project, holder.process):
            raise DockerError(
                f"not starting {project}: a `drgpu down` of it was run after this `up` began",
                hint="run `drgpu up` again to start it",
            )
        yield holder


def _clean_after(holder: Holder) -> None:
    """Remove what a killed `drgpu up` or `down` left of its run: never verified; its Swarm
    stack (waited for; none on an engine that is no swarm manager); a training's SageMaker
    trainers too (its rl_coach may have started one)."""
    project = holder.project
    if services := swarm_engine.stack_service_count(project):
        swarm.remove_stack(project, compose.compose_environment({}))
    removed = {"services": services, **engine.remove_run(project, holder.volumes_before)}
    if (run_id := training_run(project)) is not None:
        removed["SageMaker trainers"] = _remove_trainers(run_id)
    left = ", ".join(f"{count} {kind}" for kind, count in removed.items() if count)
    what = f", and what it left of {project} ({left})" if left else ""
    warn(f"{holder.describe()} was killed: its lock is removed{what}")


def _remove_trainers(run_id: str) -> int:
    """Remove the SageMaker trainers the rl_coach of run `run_id` started: how many."""
    return remove_strays(lambda: run_trainers(engine.sagemaker_containers(), run_id))


@contextmanager
def down_locked(
    config: Config, target: Inputs, *, say_removed: bool = False, trainers: bool = True
) -> Iterator[None]:
    """Hold the engine-wide lock for a `down` of the target's run (see `locked`), its `.drgpu`
    folder checked first; when the block succeeds, remove the MPS volumes drgpu made, with
    `trainers` a training's SageMaker trainers (a DRfC rl_coach starts them outside the
    stack; `drfc_stack.down` removes them itself) and, with `say_removed`, say what the block
    removed."""
    state_dir(target.env_file, create=False)
    with locked("down", config):
        before = engine.project_resources(config.project) if say_removed else None
        yield
        if trainers and not config.evaluation and (count := _remove_trainers(config.run_id)):
            note(f"removed {count} SageMaker trainer(s) of run {config.run_id}")
        # the MPS daemon's tmpfs volumes, which drgpu's override made (a stop keeps volumes)
        made = {f"{config.project}_{volume}" for volume in (MPS_PIPE_VOLUME, MPS_LOG_VOLUME)}
        engine.remove_volumes(made.intersection(engine.project_volumes(config.project)))
        if before is not None:
            note(removed_note(config.project, before, engine.project_resources(config.project)))


def removed_note(project: str, before: tuple[int, int], after: tuple[int, int]) -> str:
    """What a `down` removed, from the project's (containers, networks) before and after."""
    counts = zip(before, after, ("container", "network"), strict=True)
    said = ", ".join(
        f"{b - a} {thing}{'' if b - a == 1 else 's'}" for b, a, thing in counts if b > a
    )
    return f"removed {said} of {project}" if said else f"nothing of {project} was there to remove"
