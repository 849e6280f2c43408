"""`drgpu down`: stop and remove the stack the way `up` started it: DRfC's own stop script
in an activated DRfC shell (Compose or swarm style), drgpu's Swarm stack, or Compose."""

from __future__ import annotations

from dataclasses import dataclass

from drgpu.commands import compose_run, drfc_stack, swarm_deploy
from drgpu.commands.options import InputOptions, resolved, settings


@dataclass(frozen=True)
class DownOptions:
    """`drgpu down`'s options."""

    inputs: InputOptions
    swarm: bool = False


def down(options: DownOptions) -> None:
    """Stop and remove the stack's containers (with --remove-orphans), or its Swarm stack
    (under the engine-wide lock: see `run_lock`)."""
    target = resolved(options.inputs)
    config = settings(target)
    scripts = drfc_stack.runs_scripts(
        target, explicit_files=options.inputs.compose_files is not None
    )
    if scripts and (drfc_stack.swarm_style(config) or not config.deploys_to_swarm(options.swarm)):
        drfc_stack.down(config, target)
    elif config.deploys_to_swarm(options.swarm):
        swarm_deploy.down(config, target)
    else:
        compose_run.down(config, target)
