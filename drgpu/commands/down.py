"""`drgpu down`: stop and remove the stack the way `up` started it (DRfC's stop script, drgpu's
Swarm stack, or Compose), under the engine-wide lock (`run_lock`)."""

from __future__ import annotations

import os

from drgpu.commands import compose_run, drfc_stack, swarm_deploy
from drgpu.commands.options import resolved, settings
from drgpu.core.inputs import InputOptions, Inputs
from drgpu.core.settings import Config, config_from_texts
from drgpu.errors import ConfigError, DockerError
from drgpu.ui.talk import warn


def down(inputs: InputOptions, *, swarm: bool) -> None:
    """Stop and remove the stack; unreadable settings are a warning, the run the shell's then."""
    target = resolved(inputs)
    try:
        config = settings(target)
    except ConfigError as error:
        config = identified(target, error)
        swarm = swarm or _a_swarm_stack(config.project)
    scripts = drfc_stack.runs_scripts(target, explicit_files=inputs.compose_files is not None)
    if scripts and (config.deploys_to_swarm() or not swarm):
        drfc_stack.down(config, target)
    elif config.deploys_to_swarm(swarm):
        swarm_deploy.down(config, target)
    else:
        compose_run.down(config, target)


def _a_swarm_stack(project: str) -> bool:
    """Whether `project` is a Swarm stack on this engine (the settings that would say so did
    not read)."""
    from drgpu.host.swarm_engine import stack_service_count  # lazy: only for unreadable settings

    return bool(stack_service_count(project))


def identified(target: Inputs, error: ConfigError) -> Config:
    """The run `down` stops when its settings do not read (`error`, warned): the one the shell's
    `DR_*` exports name, as for DRfC's `dr-stop-training`; refused (naming the runs) if none."""
    exported = {key: value for key, value in os.environ.items() if key.startswith("DR_")}
    if "DR_RUN_ID" not in exported:
        from drgpu.host.engine import drgpu_containers  # lazy: only for unreadable settings

        try:
            runs = ", ".join(sorted({c.project for c in drgpu_containers()})) or "none"
        except DockerError as exc:
            runs = f"unknown ({exc.message})"
        raise ConfigError(
            f"{error.message}; down cannot tell which run to stop (runs up: {runs})",
            hint="fix the settings, or name the run: DR_RUN_ID=<id> drgpu down",
        ) from None
    warn(f"{error.message} (down stops the run the shell names, DR_RUN_ID)")
    return config_from_texts([], exported, evaluation=target.evaluation, drfc=True)
